package observability

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"openflare/agent/protocol"
)

// numbered is an access-log line whose path carries n, so tests can check
// which lines arrived and in what order.
func numbered(n int) string {
	return fmt.Sprintf(`{"ts":"2026-07-18T10:00:00+08:00","host":"h","path":"/n/%d","remote_addr":"203.0.113.9","status":200,"request_time":0.001,"bytes_sent":1,"request_length":1,"user_agent":"ua","cache_status":"-"}`+"\n", n)
}

func lineNumber(t testing.TB, r protocol.AccessLog) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscanf(r.Path, "/n/%d", &n); err != nil {
		t.Fatalf("unexpected path %q", r.Path)
	}
	return n
}

func writeLines(t testing.TB, f *os.File, from, to int) {
	t.Helper()
	var sb strings.Builder
	for i := from; i < to; i++ {
		sb.WriteString(numbered(i))
	}
	if _, err := f.WriteString(sb.String()); err != nil {
		t.Fatal(err)
	}
}

func writeRaw(t testing.TB, f *os.File, s string) {
	t.Helper()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// createLog creates (or replaces) the log at path, opened for appending
// the way nginx opens it.
func createLog(t testing.TB, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func testTailer(t *testing.T, path string, c Cursor) *tailer {
	tl := newTailer(path, c, slog.New(slog.DiscardHandler))
	t.Cleanup(tl.close)
	return tl
}

// expectLines checks a batch holds exactly lines from..to-1 in order.
func expectLines(t *testing.T, b batch, from, to int) {
	t.Helper()
	if len(b.lines) != to-from {
		t.Fatalf("got %d lines, want %d (%d..%d)", len(b.lines), to-from, from, to-1)
	}
	for i, r := range b.lines {
		if n := lineNumber(t, r); n != from+i {
			t.Fatalf("line %d is %d, want %d", i, n, from+i)
		}
	}
}

func TestTailAppendPartialAndAck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	f := createLog(t, path)
	tl := testTailer(t, path, Cursor{})

	writeLines(t, f, 0, 3)
	full := numbered(3)
	writeRaw(t, f, full[:40]) // caught mid-write

	b := tl.next(100)
	expectLines(t, b, 0, 3)
	if want := int64(3 * len(numbered(0))); b.cursor.Offset != want {
		t.Fatalf("cursor offset %d, want %d: stop after the last newline", b.cursor.Offset, want)
	}
	// Not acknowledged: the same lines again, now with the completed one.
	writeRaw(t, f, full[40:])
	b = tl.next(100)
	expectLines(t, b, 0, 4)
	tl.commit(b.cursor)
	if b = tl.next(100); len(b.lines) != 0 || b.cursor != tl.committed {
		t.Fatalf("after commit: %d lines, cursor %+v", len(b.lines), b.cursor)
	}
	writeLines(t, f, 4, 6)
	expectLines(t, tl.next(100), 4, 6)
}

func TestTailLineCapCarriesOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	f := createLog(t, path)
	tl := testTailer(t, path, Cursor{})
	writeLines(t, f, 0, 2500)

	b := tl.next(2000)
	expectLines(t, b, 0, 2000)
	if !b.more {
		t.Fatal("more not set at the line cap")
	}
	tl.commit(b.cursor)
	b = tl.next(2000)
	expectLines(t, b, 2000, 2500)
	if b.more {
		t.Fatal("more set at the end of the file")
	}
}

func TestTailByteCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	f := createLog(t, path)
	tl := testTailer(t, path, Cursor{})
	tl.maxBytes = int64(10*len(numbered(10)) + 5) // lines 10..99 have one length
	writeLines(t, f, 10, 35)

	for from := 10; from < 35; from += 10 {
		b := tl.next(2000)
		expectLines(t, b, from, min(from+10, 35))
		if b.more != (from+10 < 35) {
			t.Fatalf("more %v after line %d", b.more, from+9)
		}
		tl.commit(b.cursor)
	}
}

func TestTailUnparsableAndLongLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	f := createLog(t, path)
	tl := testTailer(t, path, Cursor{})

	writeLines(t, f, 0, 1)
	writeRaw(t, f, "not a log line\n")
	writeRaw(t, f, strings.Repeat("x", maxLineBytes+1)+"\n") // too long, within one read
	writeLines(t, f, 1, 2)
	writeRaw(t, f, strings.Repeat("y", 3*readChunk)) // too long, still being written

	b := tl.next(100)
	expectLines(t, b, 0, 2)
	if b.unparsable != 3 || !b.cursor.Skip {
		t.Fatalf("unparsable %d, skip %v; want 3 and skipping", b.unparsable, b.cursor.Skip)
	}
	tl.commit(b.cursor)

	writeRaw(t, f, "yyy\n")
	writeLines(t, f, 2, 3)
	b = tl.next(100)
	expectLines(t, b, 2, 3)
	if b.unparsable != 0 || b.cursor.Skip {
		t.Fatalf("unparsable %d, skip %v; the long line was counted already", b.unparsable, b.cursor.Skip)
	}
}

func TestTailTruncation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	f := createLog(t, path)
	tl := testTailer(t, path, Cursor{})
	writeLines(t, f, 0, 3)
	b := tl.next(100)
	tl.commit(b.cursor)

	// copytruncate: same file, now shorter than the offset.
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	writeLines(t, f, 3, 4)
	b = tl.next(100)
	expectLines(t, b, 3, 4)
	if b.cursor.Offset != int64(len(numbered(3))) {
		t.Fatalf("cursor %+v, want restarted at 0", b.cursor)
	}
	tl.commit(b.cursor)

	// Truncated and refilled past the offset between two reads: the size
	// does not tell, the head does.
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	writeLines(t, f, 4, 7)
	expectLines(t, tl.next(100), 4, 7)
}

// TestTailInodeReused restarts with a cursor whose file was deleted while
// the agent was down and whose inode now belongs to a new log.
func TestTailInodeReused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	f := createLog(t, path)
	writeLines(t, f, 0, 3)
	first := testTailer(t, path, Cursor{})
	c := first.next(2).cursor
	first.close()

	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	writeLines(t, f, 10, 13) // same identity, longer than the offset
	tl := testTailer(t, path, c)
	expectLines(t, tl.next(100), 10, 13)
}

func TestTailMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	tl := testTailer(t, path, Cursor{})
	if b := tl.next(100); len(b.lines) != 0 || b.cursor != (Cursor{}) || len(b.events) != 0 {
		t.Fatalf("missing file: %+v", b)
	}
	f := createLog(t, path)
	writeLines(t, f, 0, 2)
	expectLines(t, tl.next(100), 0, 2)
}

// TestTailRotation follows logrotate's rename and `nginx -s reopen`:
// workers go on writing to the renamed file until they reopen, and the
// tailer must not switch while they might.
func TestTailRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	old := createLog(t, path)
	tl := testTailer(t, path, Cursor{})
	step := func(from, to int) {
		t.Helper()
		b := tl.next(100)
		expectLines(t, b, from, to)
		tl.commit(b.cursor)
	}

	writeLines(t, old, 0, 3)
	step(0, 3)

	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	writeLines(t, old, 3, 4) // nothing at the path yet
	step(3, 4)

	cur := createLog(t, path)
	writeLines(t, old, 4, 5) // the new file exists, workers still on the old one
	step(4, 5)
	writeLines(t, old, 5, 6) // a worker that had not reopened yet
	step(5, 6)

	writeLines(t, cur, 100, 102)
	step(0, 0) // the old file is at its end once: wait one more cycle
	b := tl.next(100)
	expectLines(t, b, 100, 102)
	// Not acknowledged: the switch is read again.
	b = tl.next(100)
	expectLines(t, b, 100, 102)
	tl.commit(b.cursor)
	if len(tl.files) != 1 {
		t.Fatalf("%d files open after the switch, want 1", len(tl.files))
	}
	writeLines(t, cur, 102, 103)
	step(102, 103)
}

// TestTailDoubleRotation rotates twice before the first switch is
// acknowledged: files are still read one after the other.
func TestTailDoubleRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	f0 := createLog(t, path)
	tl := testTailer(t, path, Cursor{})
	writeLines(t, f0, 0, 2)
	tl.commit(tl.next(100).cursor)

	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	f1 := createLog(t, path)
	writeLines(t, f1, 10, 12)
	expectLines(t, tl.next(100), 0, 0) // F0 drained once
	if err := os.Rename(path, path+".2"); err != nil {
		t.Fatal(err)
	}
	f2 := createLog(t, path)
	writeLines(t, f2, 20, 22)

	b := tl.next(100)
	expectLines(t, b, 10, 12)
	tl.commit(b.cursor)
	expectLines(t, tl.next(100), 0, 0)
	b = tl.next(100)
	expectLines(t, b, 20, 22)
	tl.commit(b.cursor)
}

func TestTailRotatedFileFoundAfterRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	old := createLog(t, path)
	writeLines(t, old, 0, 3)
	first := testTailer(t, path, Cursor{})
	b := first.next(2)
	expectLines(t, b, 0, 2)
	first.close()

	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	cur := createLog(t, path)
	writeLines(t, cur, 100, 101)

	tl := testTailer(t, path, b.cursor)
	b = tl.next(100)
	expectLines(t, b, 2, 3)
	tl.commit(b.cursor)
	expectLines(t, tl.next(100), 0, 0)
	expectLines(t, tl.next(100), 100, 101)
}

func TestTailLostFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	old := createLog(t, path)
	writeLines(t, old, 0, 3)
	first := testTailer(t, path, Cursor{})
	c := first.next(2).cursor
	first.close()
	// Moved out of the directory (not deleted, so its inode cannot be
	// reused by the next file).
	if err := os.Rename(path, filepath.Join(t.TempDir(), "elsewhere")); err != nil {
		t.Fatal(err)
	}

	// Nothing at the path either: start over with whatever appears.
	tl := testTailer(t, path, c)
	b := tl.next(100)
	if len(b.lines) != 0 || b.cursor != (Cursor{}) || len(b.events) != 1 {
		t.Fatalf("lost file, empty path: %+v", b)
	}
	ev := b.events[0]
	if ev.EventType != "access_log_lost" || ev.Severity != "warning" || !strings.Contains(ev.Message, "after byte") {
		t.Fatalf("event %+v", ev)
	}

	cur := createLog(t, path)
	writeLines(t, cur, 100, 102)
	b = tl.next(100)
	expectLines(t, b, 100, 102)
	if len(b.events) != 1 {
		t.Fatalf("events %+v; the loss is reported until acknowledged", b.events)
	}
	tl.commit(b.cursor)
	if b = tl.next(100); len(b.events) != 0 {
		t.Fatalf("events %+v after the commit", b.events)
	}
}

// A link at the access log's path is never followed: a root-only file it
// points to is not uploaded.
func TestTailRefusesLink(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte(numbered(0)+numbered(1)), 0o600)
	path := filepath.Join(dir, "access.log")
	if err := os.Symlink(secret, path); err != nil {
		t.Fatal(err)
	}
	tl := testTailer(t, path, Cursor{})
	if b := tl.next(100); len(b.lines) != 0 {
		t.Fatalf("read %d lines through a link", len(b.lines))
	}
}

// Two rotations between reads hand a file past the tailer: its lines are
// reported lost, not dropped in silence.
func TestTailRotationStormReported(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	f0 := createLog(t, path)
	tl := testTailer(t, path, Cursor{})
	writeLines(t, f0, 0, 2)
	tl.commit(tl.next(100).cursor)

	// A storm: F0 → .2, F1 → .1, F2 at the path, all before the next read.
	os.Rename(path, path+".2")
	f1 := createLog(t, path)
	writeLines(t, f1, 10, 12)
	os.Rename(path, path+".1")
	f2 := createLog(t, path)
	writeLines(t, f2, 20, 22)

	b := tl.next(100)
	if len(b.events) != 1 || b.events[0].EventType != "access_log_lost" || !strings.Contains(b.events[0].Message, "access.log.1") {
		t.Fatalf("events %+v", b.events)
	}
	// The current file is read as before.
	tl.commit(b.cursor)
	expectLines(t, tl.next(100), 20, 22)
}
