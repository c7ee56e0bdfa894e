package logrotate

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"openflare/agent/observability"
)

// fakeTailer reports the file it was last moved to.
type fakeTailer struct {
	dev, ino uint64
	ok       bool
}

func (f *fakeTailer) ReportedFile() (uint64, uint64, bool) { return f.dev, f.ino, f.ok }

// reach makes the tailer report the file now at p.
func (f *fakeTailer) reach(t *testing.T, p string) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	f.dev, f.ino, f.ok = uint64(st.Dev), st.Ino, true
}

func accessRotator(t *testing.T, n Reopener, tl Tailer, p string) (*Rotator, *bytes.Buffer) {
	r, out := testRotator(t, n, p)
	r.Access, r.Tailer = p, tl
	return r, out
}

// The access log is moved aside only once the tailer has reached it: a
// second move before that would hand the tailer two files to follow. It
// waits up to twice its size; past that it goes (the control plane is
// down, or the uploads cannot keep up), said in a warning.
func TestAccessLogWaitsForTailer(t *testing.T) {
	p := filepath.Join(t.TempDir(), "access.log")
	n := newNginx(t, p)
	tl := &fakeTailer{}
	r, out := accessRotator(t, n, tl, p)
	tl.reach(t, p)
	n.write(p, line('a')+line('b'))
	check(t, r)
	expectFiles(t, p, "", line('a')+line('b'))

	// The tailer is still in access.log.1.
	n.write(p, line('c')+line('d')+line('e'))
	check(t, r)
	expectFiles(t, p, line('c')+line('d')+line('e'), line('a')+line('b'))
	tl.reach(t, p)
	check(t, r)
	expectFiles(t, p, "", line('c')+line('d')+line('e'), line('a')+line('b'))
	if strings.Contains(out.String(), "WARN") {
		t.Fatalf("a warning while the tailer kept up:\n%s", out)
	}

	// The tailer is stuck in access.log.1 now.
	n.write(p, line('f')+line('g')+line('h'))
	check(t, r)
	n.write(p, line('i'))
	check(t, r)
	expectFiles(t, p, "", line('f')+line('g')+line('h')+line('i'), line('c')+line('d')+line('e'), "(none)")
	if !strings.Contains(out.String(), "level=WARN") || !strings.Contains(out.String(), "before the control plane received it") {
		t.Fatalf("no warning for the early move:\n%s", out)
	}
}

// Nothing reported yet (a first start, the server not reached): the tailer
// reads the file at the path from its start, so that one waits too.
func TestAccessLogWaitsForFirstReport(t *testing.T) {
	p := filepath.Join(t.TempDir(), "access.log")
	n := newNginx(t, p)
	r, _ := accessRotator(t, n, &fakeTailer{}, p)
	n.write(p, line('a')+line('b')+line('c'))
	check(t, r)
	expectFiles(t, p, line('a')+line('b')+line('c'), "(none)")
}

// With log_keep 0 the access log is still moved aside, not emptied (the
// tailer may not have read its end), and the moved file goes once the
// tailer has finished it.
func TestAccessLogKeepZero(t *testing.T) {
	p := filepath.Join(t.TempDir(), "access.log")
	n := newNginx(t, p)
	tl := &fakeTailer{}
	r, _ := accessRotator(t, n, tl, p)
	r.Keep = 0
	tl.reach(t, p)
	n.write(p, line('a')+line('b'))
	check(t, r)
	n.write(p, line('c'))
	check(t, r)
	expectFiles(t, p, line('c'), line('a')+line('b'))
	tl.reach(t, p)
	check(t, r)
	expectFiles(t, p, line('c'), "(none)")
}

// The real tailer and the rotation, with beats failing at random, agents
// restarting and nginx writing to the moved file for a while after each
// reopen: every line arrives exactly once, in order.
func TestAccessLogExactlyOnce(t *testing.T) {
	const total = 20000
	dir := t.TempDir()
	p := filepath.Join(dir, "log", "access.log")
	os.Mkdir(filepath.Dir(p), 0o755)
	opts := observability.Options{
		AccessLogPath:     p,
		StateFile:         filepath.Join(dir, "observability.json"),
		BufferPath:        filepath.Join(dir, "buffer.json"),
		DataDir:           dir,
		MainConfigPath:    filepath.Join(dir, "nginx.conf"), // none: no health probe
		ObservabilityPort: 1,
		MaxLines:          100,
	}
	collector := func() *observability.Collector {
		c, err := observability.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	rng := rand.New(rand.NewPCG(3, 11))
	n := &slowNginx{fakeNginx: newNginx(t, p)}
	c := collector()
	var out bytes.Buffer
	rotator := func() *Rotator {
		return &Rotator{Logs: []string{p}, Access: p, MaxBytes: 100 * int64(len(accessLine(0))), Keep: 2, Perm: testPerm(), Nginx: n, Tailer: c,
			Log: slog.New(slog.NewTextHandler(&out, nil))}
	}
	r := rotator()

	var got []int
	written, failures, restarts := 0, 0, 0
	for step := 0; len(got) < total; step++ {
		if step > 20000 {
			t.Fatalf("stuck after %d lines", len(got))
		}
		for range min(rng.IntN(30), total-written) {
			n.write(p, accessLine(written))
			written++
			n.settle()
		}
		n.reopened()
		if rng.IntN(2) == 0 {
			if err := r.Check(); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(8) == 0 {
			restarts++
			c.Close()
			c = collector()
			r = rotator()
		}
		rep := c.Collect(context.Background())
		if len(rep.Events) > 0 {
			t.Fatalf("after %d lines: %+v", len(got), rep.Events)
		}
		if rng.IntN(4) == 0 {
			failures++
			c.Nack(rep)
			continue
		}
		for _, l := range rep.AccessLogs {
			var i int
			if _, err := fmt.Sscanf(l.Path, "/n/%d", &i); err != nil {
				t.Fatalf("path %q", l.Path)
			}
			got = append(got, i)
		}
		c.Ack(rep)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("line %d arrived as number %d (after %v)", v, i, got[max(0, i-3):i])
		}
	}
	rotations := strings.Count(out.String(), "log rotated")
	if rotations < 10 || failures == 0 || restarts == 0 || strings.Contains(out.String(), "WARN") {
		t.Fatalf("%d rotations, %d failed beats, %d restarts: not what the test is for\n%s", rotations, failures, restarts, out.String())
	}
	t.Logf("%d lines, %d rotations, %d failed beats, %d restarts", len(got), rotations, failures, restarts)
}

// slowNginx reopens a few lines after it was told to, as workers do once
// the master's signal reaches them, and before the next read (the tailer
// counts on a reopen taking less than a beat).
type slowNginx struct {
	*fakeNginx
	asked, pending int
}

func (n *slowNginx) Reopen() error {
	n.asked++
	n.pending = 1 + n.asked%7
	return nil
}

// settle is one line written: a reopen asked for may reach the workers.
func (n *slowNginx) settle() {
	if n.pending > 0 {
		if n.pending--; n.pending == 0 {
			n.fakeNginx.Reopen()
		}
	}
}

// reopened completes the reopen asked for.
func (n *slowNginx) reopened() {
	if n.pending > 0 {
		n.pending = 0
		n.fakeNginx.Reopen()
	}
}

func accessLine(i int) string {
	return fmt.Sprintf(`{"ts":"2026-07-18T10:00:00+08:00","host":"h","path":"/n/%d","remote_addr":"203.0.113.9","status":200,"request_time":0.001,"bytes_sent":1,"request_length":1,"user_agent":"ua","cache_status":"-"}`+"\n", i)
}
