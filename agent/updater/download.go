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

	"openflare/internal/download"
)

// fetch streams rawURL into w, at most limit bytes, and returns its
// SHA-256. want is the size the release announced (0: unknown). The bounds
// are internal/download's: a truncated binary must never be mistaken for a
// complete one, even before its digest is checked, and a slow but moving
// download on a router's uplink is not cut off.
func (u *Updater) fetch(ctx context.Context, rawURL string, w io.Writer, limit, want int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", rawURL, err)
	}
	req.Header.Set("User-Agent", "openflare/"+u.o.Version)
	req.Header.Set("Accept", "application/octet-stream")
	t, err := download.Get(u.client, req, download.Limits{Max: limit, Want: want, Stall: u.o.StallTimeout})
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", rawURL, err)
	}
	defer t.Close()
	if t.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("download %s: %s", rawURL, t.Status)
	}
	h := sha256.New()
	if _, err := t.Copy(io.MultiWriter(w, h)); err != nil {
		return nil, fmt.Errorf("download %s: %w", rawURL, err)
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
