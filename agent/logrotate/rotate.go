// Package logrotate keeps nginx's log files private and bounded. The agent
// creates every log before nginx opens it, not world-readable (Perm), and
// moves a log past its size aside (log → log.1 → log.2 …), then tells
// nginx to reopen: a client that makes nginx log, a long URI to a failing
// origin, fills a log at tens of megabytes a second.
//
// The access log is the tailer's too (agent/observability), which must
// report every line exactly once: it is moved aside only once the tailer
// has reached it, and a moved file the tailer has not finished is never
// deleted, unless the access log has grown to twice its size waiting
// (the control plane is down, or a flood outruns the uploads); the tailer
// then reports the lines it misses as lost.
package logrotate

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Interval is how often the logs are checked (a few stats when nothing is
// due). A log is never more than MaxBytes plus what nginx writes to it in
// one interval: 30 MB more under a 30 MB/s flood.
const Interval = time.Second

// Reopener is the running nginx: Reopen makes it reopen its logs (nginx's
// own SIGUSR1), so it writes to the new file at a log's path instead of the
// one moved away.
type Reopener interface {
	Reopen() error
}

// Tailer is the access log's reader (observability.Collector).
// ReportedFile names the file that holds the last line the control plane
// acknowledged; ok is false before the first.
type Tailer interface {
	ReportedFile() (dev, ino uint64, ok bool)
}

// Rotator checks nginx's logs. Check is called from one goroutine.
type Rotator struct {
	// Logs are the files nginx writes; Access is the one of them the
	// Tailer reads.
	Logs   []string
	Access string
	// MaxBytes is the size past which a log is moved aside; Keep is how
	// many moved files of each are kept (log.1 the newest). With Keep 0
	// an error log is emptied in place, and the access log is still moved
	// to access.log.1, which goes once the tailer has reported it:
	// emptying it would lose what the tailer has not read yet.
	MaxBytes int64
	Keep     int
	Perm     Perm
	// Nginx is nil when there is no nginx to tell.
	Nginx  Reopener
	Tailer Tailer
	Log    *slog.Logger

	started bool
	// reopen is a reopen nginx still owes: until it happens, nginx writes
	// to the files moved away.
	reopen bool
}

// Check brings every log within its size and mode. The first Check also
// creates missing logs, restricts the moved ones, and tells nginx to
// reopen when any log has moved files: a crash between a move and the
// reopen would leave nginx writing to the moved file for good.
func (r *Rotator) Check() error {
	var errs []error
	if !r.started {
		r.started = true
		for _, p := range r.Logs {
			// No directory yet: nothing landed, nginx does not log there.
			if err := r.Perm.Ensure(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("create log %s: %w", p, err))
			}
			for i, fi := range r.copies(p) {
				if fi != nil {
					r.reopen = true
					if err := r.Perm.apply(copyPath(p, i), fi); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
	}
	for _, p := range r.Logs {
		moved, err := r.check(p)
		if err != nil {
			errs = append(errs, err)
		}
		r.reopen = r.reopen || moved
	}
	if r.reopen && r.Nginx != nil {
		if err := r.Nginx.Reopen(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("tell nginx to reopen its logs: %w; until it does, it writes to the files moved aside (tried again in %s)", err, Interval))...)
		}
	}
	r.reopen = false
	return errors.Join(errs...)
}

// check restricts the log at p and moves it aside when it is due; moved
// says nginx must reopen.
func (r *Rotator) check(p string) (moved bool, err error) {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check log %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return false, nil
	}
	if err := r.Perm.apply(p, fi); err != nil {
		return false, err
	}
	copies := r.copies(p)
	access := p == r.Access && r.Tailer != nil
	// The moved file the tailer is in (0: the log itself; -1: none of
	// them, or nothing reported yet). Files older than it are done.
	at := -1
	if access {
		at = r.reportedAt(fi, copies)
	}
	for i := len(copies) - 1; i > r.Keep; i-- {
		if copies[i] == nil {
			continue
		}
		if access && i <= at {
			break
		}
		if err := os.Remove(copyPath(p, i)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("remove %s beyond log_keep: %w", copyPath(p, i), err)
		}
	}
	if fi.Size() <= r.MaxBytes {
		return false, nil
	}
	if !access && r.Keep == 0 {
		// nginx appends (O_APPEND): its next line lands at the new end.
		if err := os.Truncate(p, 0); err != nil {
			return false, fmt.Errorf("empty log %s: %w", p, err)
		}
		r.Log.Info("log emptied", "path", p, "bytes", fi.Size())
		return false, nil
	}
	if access && at != 0 {
		// The tailer has not reached this file: moving it now would hand
		// it a second file to follow before the first is finished.
		if fi.Size() <= 2*r.MaxBytes {
			return false, nil
		}
		r.Log.Warn("access log moved aside before the control plane received it; the lines the tailer misses are reported lost",
			"path", p, "bytes", fi.Size())
	}
	if err := r.rotate(p, fi); err != nil {
		return false, fmt.Errorf("rotate log %s: %w", p, err)
	}
	r.Log.Info("log rotated", "path", p, "bytes", fi.Size())
	return true, nil
}

// copies are the moved files of p, index i for p.i (index 0 unused): up
// to Keep (at least 1) with nil where one is missing, and those beyond it
// up to the first missing (left by a larger log_keep).
func (r *Rotator) copies(p string) []fs.FileInfo {
	out := []fs.FileInfo{nil}
	for i := 1; ; i++ {
		fi, err := os.Lstat(copyPath(p, i))
		if err != nil || !fi.Mode().IsRegular() {
			if i > max(r.Keep, 1) {
				return out
			}
			fi = nil
		}
		out = append(out, fi)
	}
}

// reportedAt is the index of the Tailer's reported file: 0 for the log at
// the path (fi), i for p.i, -1 for none of them.
func (r *Rotator) reportedAt(fi fs.FileInfo, copies []fs.FileInfo) int {
	dev, ino, ok := r.Tailer.ReportedFile()
	if !ok {
		return -1
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && uint64(st.Dev) == dev && uint64(st.Ino) == ino {
		return 0
	}
	for i, c := range copies {
		if c == nil {
			continue
		}
		if st, ok := c.Sys().(*syscall.Stat_t); ok && uint64(st.Dev) == dev && uint64(st.Ino) == ino {
			return i
		}
	}
	return -1
}

// link is os.Link; tests stand in a file system without hard links.
var link = os.Link

// rotate moves the log at p (fi) to p.1, the others one up, and puts a new
// empty log with the mode at p. There is a file at p at every instant: it
// is linked to p.1 and a new file renamed over it, so nginx, reopening
// meanwhile for a reload, never creates one of its own (0644) and never
// writes into a file that is then replaced. A rotation cut short (a crash)
// is finished by the next one without overwriting anything: the copies
// above the first gap stay where they are.
func (r *Rotator) rotate(p string, fi fs.FileInfo) error {
	keep := max(r.Keep, 1)
	// Not named like the log: the tailer looks at every file whose name
	// starts with the log's.
	tmp := filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+".new")
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the new log of an interrupted rotation: %w", err)
	}
	first := copyPath(p, 1)
	if c, err := os.Lstat(first); err == nil && os.SameFile(c, fi) {
		// Linked, not yet replaced: the rotation starts again.
		if err := os.Remove(first); err != nil {
			return fmt.Errorf("undo an interrupted rotation: %w", err)
		}
	}
	free := 0
	for i := 1; i <= keep && free == 0; i++ {
		if _, err := os.Lstat(copyPath(p, i)); errors.Is(err, fs.ErrNotExist) {
			free = i
		}
	}
	if free == 0 {
		free = keep
		if err := os.Remove(copyPath(p, keep)); err != nil {
			return fmt.Errorf("drop the oldest: %w", err)
		}
	}
	for i := free; i > 1; i-- {
		if err := os.Rename(copyPath(p, i-1), copyPath(p, i)); err != nil {
			return fmt.Errorf("move the older files up: %w", err)
		}
	}
	if err := r.Perm.create(tmp); err != nil {
		return fmt.Errorf("create the new log: %w", err)
	}
	if err := link(p, first); err != nil {
		// No hard links here (FAT): for an instant there is no file at
		// p, and a reload then would make nginx create one.
		if err := os.Rename(p, first); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("move the log aside: %w", err)
		}
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("put the new log in place: %w", err)
	}
	return nil
}

func copyPath(p string, i int) string { return p + "." + strconv.Itoa(i) }
