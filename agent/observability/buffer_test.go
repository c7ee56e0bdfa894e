package observability

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
)

// readBuffer returns the windows in the buffer file.
func readBuffer(t *testing.T, path string) []protocol.BufferedWindow {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ws []protocol.BufferedWindow
	if err := json.Unmarshal(data, &ws); err != nil {
		t.Fatalf("buffer file %q: %v", data, err)
	}
	return ws
}

func starts(ws []protocol.BufferedWindow) []int64 {
	var s []int64
	for _, w := range ws {
		s = append(s, w.CapturedAtUnix)
	}
	return s
}

func equalStarts(a []int64, b ...int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWindowStart(t *testing.T) {
	for in, want := range map[int64]int64{0: 0, 59: 0, 60: 60, 61: 60, -1: -60, -60: -60, 1784340005: 1784340000} {
		if got := windowStart(in); got != want {
			t.Errorf("windowStart(%d) = %d, want %d", in, got, want)
		}
	}
}

// TestBufferSameMinute fails two beats in one minute, then succeeds in the
// same minute: one window, holding the later reading, replayed once
// alongside (not instead of) the successful beat's own readings.
func TestBufferSameMinute(t *testing.T) {
	clk := newClock() // 02:00:05
	o := testOptions(t, clk)
	c := newCollector(t, o)
	minute := clk.Now().Unix() - 5

	c.Nack(c.Collect(context.Background()))
	clk.Advance(20 * time.Second)
	c.Nack(c.Collect(context.Background()))
	ws := readBuffer(t, o.BufferPath)
	if !equalStarts(starts(ws), minute) || ws[0].HostMetrics.CapturedAtUnix != minute+25 || ws[0].EdgeHealth.CapturedAtUnix != minute+25 {
		t.Fatalf("buffer %+v; want one window at %d with the later reading", ws, minute)
	}
	if ws[0].AccessLogs != nil {
		t.Fatalf("buffer holds access logs: %+v", ws[0].AccessLogs)
	}

	clk.Advance(20 * time.Second)
	r := c.Collect(context.Background())
	if !equalStarts(starts(r.Buffered), minute) || r.Buffered[0].HostMetrics.CapturedAtUnix != minute+25 {
		t.Fatalf("buffered %+v; the failed beats of this minute must be replayed", r.Buffered)
	}
	if r.HostMetrics.CapturedAtUnix != minute+45 {
		t.Fatalf("current readings captured at %d, want %d", r.HostMetrics.CapturedAtUnix, minute+45)
	}
	c.Ack(r)
	if ws := readBuffer(t, o.BufferPath); len(ws) != 0 {
		t.Fatalf("buffer after ack: %+v", ws)
	}
	if r := c.Collect(context.Background()); len(r.Buffered) != 0 {
		t.Fatalf("acknowledged windows sent again: %+v", r.Buffered)
	}
}

// TestBufferReplayOnce fails beats over several minutes: every window is
// replayed until a beat carrying it succeeds, and never after.
func TestBufferReplayOnce(t *testing.T) {
	clk := newClock()
	o := testOptions(t, clk)
	c := newCollector(t, o)
	m0 := clk.Now().Unix() - 5

	for range 3 {
		c.Nack(c.Collect(context.Background()))
		clk.Advance(time.Minute)
	}
	r := c.Collect(context.Background())
	if !equalStarts(starts(r.Buffered), m0, m0+60, m0+120) {
		t.Fatalf("buffered %v", starts(r.Buffered))
	}
	c.Nack(r) // the replay failed too: nothing is lost
	clk.Advance(time.Minute)

	// Restart in between: the buffer is on disk.
	c.Close()
	c = newCollector(t, o)
	r = c.Collect(context.Background())
	if !equalStarts(starts(r.Buffered), m0, m0+60, m0+120, m0+180) {
		t.Fatalf("buffered after restart %v", starts(r.Buffered))
	}
	c.Ack(r)
	info, err := os.Stat(o.BufferPath)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("buffer mode %v, want 0600", info.Mode().Perm())
	}
	if r := c.Collect(context.Background()); len(r.Buffered) != 0 {
		t.Fatalf("sent again: %v", starts(r.Buffered))
	}
}

// TestBufferAckKeepsNewerWindows acknowledges a beat that carried only some
// of the windows: the others stay.
func TestBufferAckKeepsNewerWindows(t *testing.T) {
	clk := newClock()
	o := testOptions(t, clk)
	o.ReplayMinutes = 1000
	c := newCollector(t, o)
	m0 := clk.Now().Unix() - 5
	for i := range maxReplayWindows + 2 {
		c.buf.upsert(m0+int64(i)*60, &protocol.HostMetrics{CapturedAtUnix: m0 + int64(i)*60}, nil)
	}
	clk.Advance(time.Duration(maxReplayWindows+2) * time.Minute)

	r := c.Collect(context.Background())
	if len(r.Buffered) != maxReplayWindows || r.Buffered[0].CapturedAtUnix != m0 {
		t.Fatalf("%d windows from %d; want the %d oldest", len(r.Buffered), r.Buffered[0].CapturedAtUnix, maxReplayWindows)
	}
	c.Ack(r)
	r = c.Collect(context.Background())
	if !equalStarts(starts(r.Buffered), m0+maxReplayWindows*60, m0+(maxReplayWindows+1)*60) {
		t.Fatalf("left %v", starts(r.Buffered))
	}
}

func TestBufferReplayExpiry(t *testing.T) {
	clk := newClock()
	o := testOptions(t, clk)
	o.ReplayMinutes = 5
	c := newCollector(t, o)
	m0 := clk.Now().Unix() - 5

	c.Nack(c.Collect(context.Background()))
	clk.Advance(3 * time.Minute)
	c.Nack(c.Collect(context.Background()))
	clk.Advance(3 * time.Minute) // m0 is now older than 5 minutes
	r := c.Collect(context.Background())
	if !equalStarts(starts(r.Buffered), m0+180) {
		t.Fatalf("buffered %v, want only %d", starts(r.Buffered), m0+180)
	}
	c.Ack(r)
	if ws := readBuffer(t, o.BufferPath); len(ws) != 0 {
		t.Fatalf("file still holds %v", starts(ws))
	}
}

func TestBufferCapTrims(t *testing.T) {
	clk := newClock()
	o := testOptions(t, clk)
	o.BufferCap = 1500
	c := newCollector(t, o)

	for range 10 {
		c.Nack(c.Collect(context.Background()))
		clk.Advance(time.Minute)
	}
	info, err := os.Stat(o.BufferPath)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() > o.BufferCap+1 { // the trailing newline
		t.Fatalf("buffer is %d bytes, cap %d", info.Size(), o.BufferCap)
	}
	kept := readBuffer(t, o.BufferPath)
	if len(kept) == 0 || len(kept) >= 10 || kept[len(kept)-1].CapturedAtUnix != clk.Now().Unix()-65 {
		t.Fatalf("kept %v; want the newest windows", starts(kept))
	}

	r := c.Collect(context.Background())
	dropped := 0
	for _, ev := range r.Events {
		if ev.EventType != "observability_buffer_trimmed" || ev.Severity != "warning" || !strings.Contains(ev.Message, "oldest minute windows") {
			t.Fatalf("event %+v", ev)
		}
		n := 0
		if _, err := fmt.Sscan(ev.Metadata["dropped_windows"], &n); err != nil {
			t.Fatal(err)
		}
		dropped += n
	}
	if dropped+len(kept) != 10 {
		t.Fatalf("events report %d dropped, %d kept, of 10", dropped, len(kept))
	}
	c.Ack(r)
	if r := c.Collect(context.Background()); len(r.Events) != 0 {
		t.Fatalf("events after ack: %+v", r.Events)
	}
}

func TestBufferCorruptFileMovedAside(t *testing.T) {
	clk := newClock()
	o := testOptions(t, clk)
	if err := os.MkdirAll(filepath.Dir(o.BufferPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(o.BufferPath, []byte("[{\"captured_at_unix\": 12"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCollector(t, o)
	if r := c.Collect(context.Background()); len(r.Buffered) != 0 {
		t.Fatalf("buffered %+v from a corrupt file", r.Buffered)
	}
	aside, _ := filepath.Glob(o.BufferPath + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("corrupt file not moved aside: %v", aside)
	}
	if _, err := os.Stat(o.BufferPath); !os.IsNotExist(err) {
		t.Fatalf("buffer file still there: %v", err)
	}
}

// TestBufferWriteFailure keeps the windows in memory when the file cannot
// be written, and replays them.
func TestBufferWriteFailure(t *testing.T) {
	clk := newClock()
	o := testOptions(t, clk)
	blocker := filepath.Join(t.TempDir(), "not-a-dir")
	o.BufferPath = filepath.Join(blocker, "buffer.json")
	c := newCollector(t, o)
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.Nack(c.Collect(context.Background()))
	clk.Advance(time.Minute)
	r := c.Collect(context.Background())
	if len(r.Buffered) != 1 {
		t.Fatalf("buffered %v after a failed write", starts(r.Buffered))
	}
	c.Ack(r)
	if r := c.Collect(context.Background()); len(r.Buffered) != 0 {
		t.Fatalf("buffered %v after the ack", starts(r.Buffered))
	}
}
