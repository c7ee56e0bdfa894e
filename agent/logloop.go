package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"openflare/agent/apply"
	"openflare/agent/config"
	"openflare/agent/landing"
	"openflare/agent/logrotate"
	"openflare/agent/observability"
	"openflare/agent/osuser"
)

// newLogRotation keeps nginx's logs private and within log_max_bytes
// (agent/logrotate), on a loop of its own: a flood fills a log in seconds,
// faster than an apply or a beat would notice.
func newLogRotation(cfg *config.Config, paths landing.Paths, n apply.Nginx, obs *observability.Collector, log *slog.Logger) *logrotate.Rotator {
	// nginx.Unusable runs nothing that could be told to reopen.
	reopen, _ := n.(logrotate.Reopener)
	return &logrotate.Rotator{
		Logs:     paths.Logs(),
		Access:   paths.AccessLog,
		MaxBytes: cfg.LogMaxBytes,
		Keep:     cfg.LogKeep,
		Perm:     logrotate.PermFor(osuser.DB{}),
		Nginx:    reopen,
		Tailer:   obs,
		Log:      log,
	}
}

// logQuiet is how long logs nginx does not write to go unchecked: a change
// no inotify event tells of (another host's write to a network file
// system) is still seen.
const logQuiet = time.Minute

// logLoop checks the logs within logrotate.Interval of nginx writing to
// them, and every Interval while it writes, until ctx ends; logs nobody
// writes to are checked every logQuiet, so that an agent at rest does not
// wake every second for a few stats. Without inotify, or while a check
// fails, every Interval. A problem is logged when it first appears and
// when it is gone, not on every check.
func (a *Agent) logLoop(ctx context.Context) {
	tick := time.NewTicker(logrotate.Interval)
	defer tick.Stop()
	w := newLogWatch(ctx, a.logs.Logs)
	if w != nil {
		defer w.f.Close()
	}
	last := ""
	for {
		err := a.logs.Check()
		switch {
		case err != nil && err.Error() != last:
			last = err.Error()
			a.log.Error("nginx logs", "err", err)
		case err == nil && last != "":
			last = ""
			a.log.Info("nginx logs in order again")
		}
		if err == nil && w != nil && !w.changed() {
			tick.Stop()
			if !w.wait(ctx, logQuiet) {
				return
			}
			tick.Reset(logrotate.Interval)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// logWatch tells the log loop of changes in the logs' directories: a line
// appended, a file created, moved, removed or given another mode.
type logWatch struct {
	f  *os.File
	fd int
	// dirs are the directories not watched yet: the first apply creates
	// them.
	dirs []string
	buf  [4096]byte
}

const logEvents = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO

// newLogWatch watches the directories of logs; nil without inotify.
func newLogWatch(ctx context.Context, logs []string) *logWatch {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	w := &logWatch{f: os.NewFile(uintptr(fd), "inotify"), fd: fd}
	for _, p := range logs {
		if d := filepath.Dir(p); !slices.Contains(w.dirs, d) {
			w.dirs = append(w.dirs, d)
		}
	}
	// Ends a wait.
	context.AfterFunc(ctx, func() { w.f.SetReadDeadline(time.Now()) })
	return w
}

// changed reads the events queued since the last call, and reports
// whether there were any or a directory is not watched yet.
func (w *logWatch) changed() bool {
	w.dirs = slices.DeleteFunc(w.dirs, func(d string) bool {
		_, err := unix.InotifyAddWatch(w.fd, d, logEvents)
		return err == nil
	})
	rc, err := w.f.SyscallConn()
	if err != nil {
		return true
	}
	events := false
	for n := 1; n > 0; {
		n = 0
		rc.Read(func(fd uintptr) bool {
			n, _ = unix.Read(int(fd), w.buf[:])
			return true
		})
		events = events || n > 0
	}
	return events || len(w.dirs) > 0
}

// wait returns at the next event, or after d; false when ctx ended.
func (w *logWatch) wait(ctx context.Context, d time.Duration) bool {
	w.f.SetReadDeadline(time.Now().Add(d))
	if ctx.Err() != nil {
		return false
	}
	w.f.Read(w.buf[:])
	return ctx.Err() == nil
}
