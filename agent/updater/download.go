package updater

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"golang.org/x/sys/unix"

	"github.com/openflare/openflare-agent/internal/stall"
)

// fetch streams rawURL into w, at most limit bytes, and returns its
// SHA-256. want is the size the release announced (0: unknown).
// A body that stops short of its Content-Length or of want, or runs past
// either or the limit, is an error: a truncated binary must never be
// mistaken for a complete one, even before its digest is checked.
func (u *Updater) fetch(ctx context.Context, rawURL string, w io.Writer, limit, want int64) ([]byte, error) {
	// The watchdog covers the wait for headers too; each byte that arrives
	// puts it back, so a slow but moving download on a router's uplink is
	// not cut off, and a stalled one does not hold the loop forever.
	ctx, watch := stall.Watch(ctx, u.o.StallTimeout)
	defer watch.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", rawURL, err)
	}
	req.Header.Set("User-Agent", "openflare-agent/"+u.o.Version)
	req.Header.Set("Accept", "application/octet-stream")
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", rawURL, stall.Cause(ctx, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("download %s: %s", rawURL, resp.Status)
	}
	switch {
	case resp.ContentLength > limit:
		return nil, fmt.Errorf("download %s: %d bytes announced, the cap is %d", rawURL, resp.ContentLength, limit)
	case want > 0 && resp.ContentLength >= 0 && resp.ContentLength != want:
		return nil, fmt.Errorf("download %s: Content-Length %d, the release says %d bytes", rawURL, resp.ContentLength, want)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(watch.Reader(resp.Body), limit+1))
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("download %s: %w", rawURL, stall.Cause(ctx, err))
	case err != nil:
		return nil, fmt.Errorf("download %s: truncated after %d bytes: %w", rawURL, n, err)
	case n > limit:
		return nil, fmt.Errorf("download %s: larger than the cap of %d bytes", rawURL, limit)
	case resp.ContentLength >= 0 && n != resp.ContentLength:
		return nil, fmt.Errorf("download %s: truncated: %d of %d bytes", rawURL, n, resp.ContentLength)
	case want > 0 && n != want:
		return nil, fmt.Errorf("download %s: truncated: %d of the %d bytes the release announced", rawURL, n, want)
	}
	return h.Sum(nil), nil
}

// fetchSmall downloads a small asset (a digest or signature file) whole.
func (u *Updater) fetchSmall(ctx context.Context, a asset, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := u.fetch(ctx, a.URL, &buf, limit, a.Size); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// verifySignature checks an Ed25519 signature over the whole file at path.
// The file is mapped rather than read: pure Ed25519 needs the message in
// one piece, and a mapping costs page cache, not the agent's heap (a
// router's memory limit is a few times the binary's size).
func verifySignature(path string, pub ed25519.PublicKey, sig []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verify signature: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("verify signature: %w", err)
	}
	if fi.Size() == 0 {
		return errors.New("verify signature: empty file")
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("verify signature: map %s: %w", path, err)
	}
	defer unix.Munmap(data)
	if !ed25519.Verify(pub, data, sig) {
		return errors.New("Ed25519 signature does not match update_public_key")
	}
	return nil
}
