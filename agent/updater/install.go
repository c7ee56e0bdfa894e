package updater

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"openflare/internal/atomicfile"
)

// install downloads, verifies, tries, swaps and executes rel's binary.
func (u *Updater) install(ctx context.Context, rel *release) error {
	names := AssetNames(runtime.GOOS, runtime.GOARCH, goarm())
	a, ok := pick(rel, names)
	if !ok {
		return fmt.Errorf("%w: release %s has no asset %s", ErrRefused, rel.TagName, strings.Join(names, " or "))
	}
	sum, err := u.digest(ctx, rel, a)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrRefused, a.Name, err)
	}
	var sig []byte
	if u.o.PublicKey != nil {
		if sig, err = u.signature(ctx, rel, a); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrRefused, a.Name, err)
		}
	}
	tmp := u.o.Exe + ".update"
	os.Remove(tmp) // a leftover of a crash
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("self-update: the binary's directory must be writable: %w", err)
	}
	// After a swap tmp is gone, and after an exec nothing returns here.
	defer func() {
		f.Close()
		os.Remove(tmp)
	}()
	u.log.Info("self-update: downloading", "tag", rel.TagName, "asset", a.Name, "bytes", a.Size)
	got, err := u.fetch(ctx, a.URL, f, u.o.MaxSize, a.Size)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	if !bytes.Equal(got, sum) {
		return fmt.Errorf("%w: %s: SHA-256 mismatch: downloaded %x, the release says %x", ErrRefused, a.Name, got, sum)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("self-update: write %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("self-update: write %s: %w", tmp, err)
	}
	if sig != nil {
		if err := verifySignature(tmp, u.o.PublicKey, sig); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrRefused, a.Name, err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("self-update: %w", err)
	}
	if permanent, err := u.trial(ctx, tmp, rel.TagName); err != nil {
		if ctx.Err() != nil {
			return err
		}
		if !permanent {
			return fmt.Errorf("%w: %w; not held against the release: tried again at the next check", ErrRefused, err)
		}
		u.recordFailure(rel.TagName, u.o.Version, err.Error())
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return u.commit(ctx, tmp, rel.TagName)
}

// commit swaps the tried binary in and executes it. A stop requested
// meanwhile (SIGTERM) wins: before the swap nothing changes, after it the
// new binary runs at the next start, which counts as any start of it.
func (u *Updater) commit(ctx context.Context, tmp, tag string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("self-update to %s: stopping before the swap: %w", tag, err)
	}
	if err := u.swap(tmp, tag); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		u.log.Info("self-update: swapped in, but the agent is stopping; the new binary runs at the next start", "version", tag)
		return fmt.Errorf("self-update to %s: stopping before executing it: %w", tag, err)
	}
	u.log.Info("self-update: swapped in; executing the new binary", "version", tag, "previous", u.o.Version, "backup", u.o.Exe+".bak")
	err := u.o.Exec(u.o.Exe, u.o.Args, os.Environ())
	if err == nil {
		return nil
	}
	// Still here: the new binary could not even be executed.
	reason := fmt.Sprintf("exec %s: %v", u.o.Exe, err)
	if rerr := u.restore(reason, false); rerr != nil {
		return fmt.Errorf("self-update: %s; restoring the previous binary: %w", reason, rerr)
	}
	return fmt.Errorf("%w: %s", ErrRefused, reason)
}

// digest is the SHA-256 the release states for a: its digest field, else
// its .sha256 asset. Without either there is nothing to verify against.
func (u *Updater) digest(ctx context.Context, rel *release, a asset) ([]byte, error) {
	sum, ok, err := ParseDigestField(a.Digest)
	if err != nil || ok {
		return sum, err
	}
	d, ok := find(rel, a.Name+".sha256")
	if !ok {
		return nil, fmt.Errorf("%w: no digest field and no %s.sha256 asset", errNoDigest, a.Name)
	}
	data, err := u.fetchSmall(ctx, d, maxDigestFile)
	if err != nil {
		return nil, err
	}
	return ParseDigestFile(data, a.Name)
}

func (u *Updater) signature(ctx context.Context, rel *release, a asset) ([]byte, error) {
	s, ok := find(rel, a.Name+".sig")
	if !ok {
		return nil, fmt.Errorf("no signature asset %s.sig, and update_public_key requires one", a.Name)
	}
	data, err := u.fetchSmall(ctx, s, maxSigFile)
	if err != nil {
		return nil, err
	}
	return ParseSignature(data)
}

// trial runs the new binary with -version and wants it to print the
// release's version: it proves the file executes on this machine and gets
// through its initialisation, before it can replace anything. permanent
// says the error is a verdict on the binary: it printed another version,
// exited non-zero, died of a fault signal it raised itself, or the kernel
// refused its format. A timeout (a loaded router), a kill from outside or
// a failure to start it (ENOMEM; ETXTBSY from a fork elsewhere in the
// process while .update was open for writing, Go issue 22315) says nothing
// about the release.
func (u *Updater) trial(ctx context.Context, path, tag string) (permanent bool, err error) {
	tctx, cancel := context.WithTimeout(ctx, u.o.TrialTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(tctx, path, "-version")
	w := &capWriter{w: &out, n: 4 << 10}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case tctx.Err() != nil:
		return false, fmt.Errorf("trial run of %s -version did not finish within %v: %w", tag, u.o.TrialTimeout, tctx.Err())
	case errors.As(err, &exit):
		ws, ok := exit.Sys().(syscall.WaitStatus)
		return !ok || !ws.Signaled() || faultSignal(ws.Signal()),
			fmt.Errorf("trial run of %s -version failed: %w: %q", tag, err, truncate(out.String(), 200))
	case errors.Is(err, syscall.ENOEXEC):
		return true, fmt.Errorf("trial run of %s -version failed: not an executable for this machine: %w", tag, err)
	default:
		return false, fmt.Errorf("trial run of %s -version failed: %w", tag, err)
	}
	fields := strings.Fields(out.String())
	if len(fields) < 2 || fields[0] != "openflare-agent" || !sameVersion(fields[1], tag) {
		return true, fmt.Errorf("trial run of %s -version printed %q, not openflare-agent %s", tag, truncate(out.String(), 200), tag)
	}
	return false, nil
}

// faultSignal reports whether sig is one a process raises on itself by
// executing something wrong, rather than one sent to it (SIGKILL from the
// OOM killer, SIGTERM from a shutdown).
func faultSignal(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGILL, syscall.SIGFPE, syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGSYS:
		return true
	}
	return false
}

// swap records the pending version, keeps the running binary as
// <exe>.bak and renames the new one over <exe>.
func (u *Updater) swap(tmp, tag string) error {
	exe, bak := u.o.Exe, u.o.Exe+".bak"
	os.Remove(bak)
	if err := os.Link(exe, bak); err != nil {
		if err := copyFile(exe, bak); err != nil {
			return fmt.Errorf("self-update: keep the previous binary: %w", err)
		}
	}
	u.mu.Lock()
	u.st.Pending = &Pending{Version: tag, Previous: u.o.Version}
	err := saveState(u.o.StatePath, u.st)
	if err != nil {
		u.st.Pending = nil
	}
	u.mu.Unlock()
	if err != nil {
		os.Remove(bak)
		return fmt.Errorf("self-update: %w", err)
	}
	if err := os.Rename(tmp, exe); err != nil {
		u.mu.Lock()
		u.st.Pending = nil
		saveState(u.o.StatePath, u.st)
		u.mu.Unlock()
		os.Remove(bak)
		return fmt.Errorf("self-update: replace %s: %w", exe, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(exe)); err != nil {
		u.log.Warn("self-update: fsync the binary's directory", "err", err)
	}
	return nil
}

// goarm is the build's GOARM setting ("" off arm).
func goarm() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "GOARM" {
				return s.Value
			}
		}
	}
	return ""
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	return out.Close()
}

// capWriter keeps the first n bytes written to it and drops the rest.
type capWriter struct {
	w io.Writer
	n int
}

func (c *capWriter) Write(p []byte) (int, error) {
	if c.n > 0 {
		k := min(len(p), c.n)
		c.w.Write(p[:k])
		c.n -= k
	}
	return len(p), nil
}
