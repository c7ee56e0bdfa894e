package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"openflare/agent/logrotate"
	"openflare/testing/testsupport"
)

// failingNginx refuses reopens until told otherwise.
type failingNginx struct {
	calls atomic.Int32
	ok    atomic.Bool
}

func (n *failingNginx) Reopen() error {
	n.calls.Add(1)
	if n.ok.Load() {
		return nil
	}
	return errors.New("signal master 4242: no such process")
}

// A problem of the logs is logged once however many checks meet it, its
// end once, and the loop stops with its context.
func TestLogLoopReportsChangesAndStops(t *testing.T) {
	p := filepath.Join(t.TempDir(), "error.log")
	if err := os.WriteFile(p, []byte(strings.Repeat("x", 200)), 0o600); err != nil {
		t.Fatal(err)
	}
	var out testsupport.Buffer
	nginx := &failingNginx{}
	log := slog.New(slog.NewTextHandler(&out, nil))
	a := &Agent{log: log, logs: &logrotate.Rotator{Logs: []string{p}, MaxBytes: 100, Keep: 1, Perm: logrotate.Perm{Mode: 0o600, GID: -1}, Nginx: nginx, Log: log}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		a.logLoop(ctx)
		close(done)
	}()
	testsupport.WaitFor(t, 10*time.Second, "three failed reopens", func() bool { return nginx.calls.Load() >= 3 })
	if n := strings.Count(out.String(), "level=ERROR"); n != 1 || !strings.Contains(out.String(), "no such process") {
		t.Fatalf("%d error lines for one lasting problem:\n%s", n, out.String())
	}
	nginx.ok.Store(true)
	testsupport.WaitFor(t, 10*time.Second, "the recovery logged", func() bool { return strings.Contains(out.String(), "in order again") })
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not stop with its context")
	}
}

// Logs nobody writes to are left alone, and a write to one wakes the loop
// long before logQuiet: a log grown past its size is moved aside.
func TestLogLoopWakesOnWrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "error.log")
	if err := os.WriteFile(p, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	a := &Agent{log: log, logs: &logrotate.Rotator{Logs: []string{p}, MaxBytes: 100, Keep: 1, Perm: logrotate.Perm{Mode: 0o600, GID: -1}, Nginx: &failingNginx{}, Log: log}}
	a.logs.Nginx.(*failingNginx).ok.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.logLoop(ctx)
	// Past the first checks: the loop waits for a write.
	time.Sleep(3 * logrotate.Interval)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(strings.Repeat("y", 200))
	f.Close()
	testsupport.WaitFor(t, logQuiet/2, "the grown log moved aside", func() bool {
		_, err := os.Stat(p + ".1")
		return err == nil
	})
}
