package observability

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/internal/linux"
)

// fixtureRoot is a host tree of internal/linux's test data.
func fixtureRoot(name string) string {
	return filepath.Join("..", "..", "internal", "linux", "testdata", name)
}

// fakeClock is the Collector's time source in tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 7, 18, 2, 0, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// testOptions returns options over a fresh directory, the x86 fixture
// host and no main config (so no health check).
func testOptions(t testing.TB, clk *fakeClock) Options {
	dir := t.TempDir()
	return Options{
		AccessLogPath:     filepath.Join(dir, "log", "access.log"),
		StateFile:         filepath.Join(dir, "state", "observability.json"),
		BufferPath:        filepath.Join(dir, "state", "observability-buffer.json"),
		DataDir:           dir,
		MainConfigPath:    filepath.Join(dir, "conf", "nginx.conf"),
		ObservabilityPort: 1,
		FS:                linux.NewFS(fixtureRoot("x86-server")),
		Now:               clk.Now,
	}
}

func newCollector(t testing.TB, o Options) *Collector {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestNewValidates(t *testing.T) {
	o := testOptions(t, newClock())
	o.StateFile = ""
	if _, err := New(o); err == nil || !strings.Contains(err.Error(), "state file") {
		t.Errorf("New without a state file: %v", err)
	}
	o = testOptions(t, newClock())
	o.ObservabilityPort = 0
	if _, err := New(o); err == nil {
		t.Error("New with port 0 succeeded")
	}
}

// TestCollectorRestart resumes from the committed cursor in a new
// Collector, finding the rotated file by inode.
func TestCollectorRestart(t *testing.T) {
	clk := newClock()
	o := testOptions(t, clk)
	if err := os.MkdirAll(filepath.Dir(o.AccessLogPath), 0o755); err != nil {
		t.Fatal(err)
	}
	old := createLog(t, o.AccessLogPath)
	writeLines(t, old, 0, 5)

	o.MaxLines = 3
	c := newCollector(t, o)
	r := c.Collect(context.Background())
	expectLines(t, batch{lines: r.AccessLogs}, 0, 3)
	c.Ack(r)
	r = c.Collect(context.Background()) // lines 3 and 4, never acknowledged
	expectLines(t, batch{lines: r.AccessLogs}, 3, 5)
	c.Close()

	if err := os.Rename(o.AccessLogPath, o.AccessLogPath+"-20260718"); err != nil {
		t.Fatal(err)
	}
	writeLines(t, old, 5, 6)
	cur := createLog(t, o.AccessLogPath)
	writeLines(t, cur, 100, 102)

	c = newCollector(t, o)
	r = c.Collect(context.Background())
	expectLines(t, batch{lines: r.AccessLogs}, 3, 6)
	c.Ack(r)
	r = c.Collect(context.Background())
	expectLines(t, batch{lines: r.AccessLogs}, 0, 0)
	c.Ack(r)
	r = c.Collect(context.Background())
	expectLines(t, batch{lines: r.AccessLogs}, 100, 102)
	c.Ack(r)
}

// TestCollectorReportResolvedOnce ignores a second resolution and a
// superseded report.
func TestCollectorReportResolvedOnce(t *testing.T) {
	clk := newClock()
	o := testOptions(t, clk)
	c := newCollector(t, o)
	r1 := c.Collect(context.Background())
	r2 := c.Collect(context.Background())
	c.Nack(r1) // superseded by r2: ignored
	c.Ack(r2)
	c.Nack(r2) // already acknowledged: ignored
	if len(c.buf.windows) != 0 {
		t.Fatalf("buffer %+v; stale and repeated resolutions must be ignored", c.buf.windows)
	}
	c.Ack(nil)
}

// TestExactlyOnce pushes 10 000 lines through beats that fail at random,
// with rotations and restarts, and checks every line arrives once, in
// order.
func TestExactlyOnce(t *testing.T) {
	const total = 10000
	clk := newClock()
	o := testOptions(t, clk)
	o.MaxLines = 150
	dir := filepath.Dir(o.AccessLogPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	w := createLog(t, o.AccessLogPath)
	c := newCollector(t, o)

	var got []int
	written, rotations, failures := 0, 0, 0
	write := func(f *os.File, n int) {
		n = min(n, total-written)
		writeLines(t, f, written, written+n)
		written += n
	}
	for beat := 0; len(got) < total; beat++ {
		if beat > 10000 {
			t.Fatalf("stuck after %d lines", len(got))
		}
		write(w, rng.IntN(200))

		// Rotate only once the previous rotation is acknowledged: the
		// chain of successors is not kept across restarts.
		if rng.IntN(6) == 0 && c.saved.Cursor.Ino == inode(t, o.AccessLogPath) {
			rotations++
			if err := os.Rename(o.AccessLogPath, filepath.Join(dir, "access.log."+strconv.Itoa(rotations))); err != nil {
				t.Fatal(err)
			}
			next := createLog(t, o.AccessLogPath)
			write(w, rng.IntN(50)) // workers that have not reopened yet
			w = next
		}
		if rng.IntN(12) == 0 {
			c.Close()
			c = newCollector(t, o)
		}

		r := c.Collect(context.Background())
		if rng.IntN(3) == 0 {
			failures++
			c.Nack(r)
			continue
		}
		for _, l := range r.AccessLogs {
			got = append(got, lineNumber(t, l))
		}
		c.Ack(r)
		clk.Advance(3 * time.Second)
	}
	for i, n := range got {
		if n != i {
			t.Fatalf("line %d delivered as the %dth (after %v)", n, i, got[max(0, i-3):i])
		}
	}
	if rotations == 0 || failures == 0 {
		t.Fatalf("rotations %d failures %d: the test did not exercise them", rotations, failures)
	}
	t.Logf("%d lines, %d rotations, %d failed beats", len(got), rotations, failures)
}

// TestCollectorConcurrentUse drives one Collector from several goroutines;
// the race detector checks the locking. Reports superseded by another
// goroutine's Collect are ignored, so no line is committed twice.
func TestCollectorConcurrentUse(t *testing.T) {
	o := testOptions(t, newClock())
	if err := os.MkdirAll(filepath.Dir(o.AccessLogPath), 0o755); err != nil {
		t.Fatal(err)
	}
	f := createLog(t, o.AccessLogPath)
	writeLines(t, f, 0, 500)
	c := newCollector(t, o)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 25 {
				r := c.Collect(context.Background())
				if (g+i)%3 == 0 {
					c.Nack(r)
				} else {
					c.Ack(r)
				}
			}
		})
	}
	wg.Wait()
	r := c.Collect(context.Background())
	c.Ack(r)
	if r = c.Collect(context.Background()); len(r.AccessLogs) != 0 {
		t.Fatalf("%d lines left after everything was acknowledged", len(r.AccessLogs))
	}
}

func inode(t testing.TB, path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return idOf(fi).ino
}

func TestCollectReportsFacts(t *testing.T) {
	clk := newClock()
	o := testOptions(t, clk)
	c := newCollector(t, o)
	r := c.Collect(context.Background())
	if r.HostMetrics == nil || r.EdgeHealth == nil {
		t.Fatalf("report %+v lacks readings", r)
	}
	if r.Status != "" || r.EdgeHealth.Status != protocol.StatusUnknown {
		t.Errorf("no main config: status %q, edge status %q; want unchanged and unknown", r.Status, r.EdgeHealth.Status)
	}
	if r.HostMetrics.CapturedAtUnix != clk.Now().Unix() || r.EdgeHealth.CapturedAtUnix != clk.Now().Unix() {
		t.Errorf("captured at %d/%d, want %d", r.HostMetrics.CapturedAtUnix, r.EdgeHealth.CapturedAtUnix, clk.Now().Unix())
	}
	if len(r.AccessLogs) != 0 || len(r.Buffered) != 0 || len(r.Events) != 0 {
		t.Errorf("unexpected %+v", r)
	}
}

func BenchmarkCollect(b *testing.B) {
	clk := newClock()
	o := testOptions(b, clk)
	if err := os.MkdirAll(filepath.Dir(o.AccessLogPath), 0o755); err != nil {
		b.Fatal(err)
	}
	f := createLog(b, o.AccessLogPath)
	var sb strings.Builder
	for i := range defaultMaxLines {
		sb.WriteString(numbered(i))
	}
	chunk := sb.String()
	c := newCollector(b, o)
	c.Ack(c.Collect(context.Background())) // the profile, once

	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	cpu := startCPUClock()
	for b.Loop() {
		b.StopTimer()
		writeRaw(b, f, chunk)
		b.StartTimer()
		r := c.Collect(context.Background())
		if len(r.AccessLogs) != defaultMaxLines {
			b.Fatalf("%d lines", len(r.AccessLogs))
		}
		c.Ack(r)
	}
	reportLineRate(b, b.N*defaultMaxLines, cpu)
}

// ReportedFile names the file of the last acknowledged line, across a
// rotation and a restart: the log rotation waits for it to name the file
// at the path before it moves that file aside.
func TestReportedFile(t *testing.T) {
	o := testOptions(t, newClock())
	if err := os.MkdirAll(filepath.Dir(o.AccessLogPath), 0o755); err != nil {
		t.Fatal(err)
	}
	first := createLog(t, o.AccessLogPath)
	firstID := fileIDOf(t, o.AccessLogPath)
	writeLines(t, first, 0, 3)
	c := newCollector(t, o)
	expect := func(want fileID, what string) {
		t.Helper()
		dev, ino, ok := c.ReportedFile()
		if got := (fileID{dev, ino}); !ok || got != want {
			t.Fatalf("%s: ReportedFile %v (ok %v), want %v", what, got, ok, want)
		}
	}
	r := c.Collect(context.Background())
	if _, _, ok := c.ReportedFile(); ok {
		t.Fatal("a file is reported before any acknowledgement")
	}
	c.Ack(r)
	expect(firstID, "after the first acknowledgement")

	if err := os.Rename(o.AccessLogPath, o.AccessLogPath+".1"); err != nil {
		t.Fatal(err)
	}
	second := createLog(t, o.AccessLogPath)
	secondID := fileIDOf(t, o.AccessLogPath)
	writeLines(t, first, 3, 4) // a worker that has not reopened yet
	writeLines(t, second, 10, 12)
	for range 2 { // the rest of the moved file, then its end seen once more
		c.Ack(c.Collect(context.Background()))
	}
	expect(firstID, "while the moved file may still be written")
	r = c.Collect(context.Background())
	expectLines(t, batch{lines: r.AccessLogs}, 10, 12)
	c.Nack(r)
	expect(firstID, "after a failed beat with the new file's lines")
	r = c.Collect(context.Background())
	c.Ack(r)
	expect(secondID, "once the new file's lines are acknowledged")

	c.Close()
	c = newCollector(t, o)
	expect(secondID, "after a restart")
}

func fileIDOf(t testing.TB, path string) fileID {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return idOf(fi)
}
