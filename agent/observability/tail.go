package observability

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"openflare/agent/protocol"
)

const (
	// maxLineBytes bounds one access-log line. nginx lines are a few
	// hundred bytes; a longer one is a hostile User-Agent or a broken
	// format, and is skipped rather than held in memory.
	maxLineBytes = 64 << 10
	// readChunk is the read buffer the tailer keeps. It must exceed
	// maxLineBytes so a whole chunk without a newline proves a line too long.
	readChunk = 256 << 10
	// defaultMaxBytes caps the bytes one beat consumes, so a burst of
	// unparsable lines cannot make a beat read the whole file.
	defaultMaxBytes = 4 << 20
)

// Cursor is a position in the access log: the file's identity and the byte
// offset just past the last line consumed. The zero Cursor means "no file
// yet": the next file to appear is read from its start.
type Cursor struct {
	Dev    uint64 `json:"dev,omitempty"`
	Ino    uint64 `json:"ino,omitempty"`
	Offset int64  `json:"offset,omitempty"`
	// Skip means Offset is inside a line longer than maxLineBytes (already
	// counted as unparsable); everything up to its newline is discarded.
	Skip bool `json:"skip,omitempty"`
	// Head is the CRC-32 of the file's first min(Offset, headBytes) bytes.
	// Inode numbers are reused: a file deleted while the agent was down can
	// come back as a new log with the same identity, and copytruncate can
	// refill a file past the offset between two reads. Either way the head
	// no longer matches and the file is read from its start.
	Head uint32 `json:"head,omitempty"`
}

// headBytes is how much of a file's start Cursor.Head covers.
const headBytes = 64

func (c Cursor) id() fileID { return fileID{c.Dev, c.Ino} }

func startOf(id fileID) Cursor { return Cursor{Dev: id.dev, Ino: id.ino} }

type fileID struct{ dev, ino uint64 }

func (id fileID) zero() bool { return id == fileID{} }

func idOf(fi fs.FileInfo) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	// The conversions matter on 32-bit MIPS, where Dev is a uint32.
	return fileID{uint64(st.Dev), uint64(st.Ino)}
}

// batch is what one read of the log produced.
type batch struct {
	lines      []protocol.AccessLog
	unparsable int
	more       bool // a cap stopped the read before the end of the file
	cursor     Cursor
	events     []protocol.HealthEvent
}

// tailer follows the access log. It never moves on by itself: every read
// starts at the committed cursor, and only commit (called once the server
// acknowledged the lines) advances it. A failed beat therefore re-reads the
// same lines, and a crash loses none.
type tailer struct {
	path, dir, base string
	maxBytes        int64
	log             *slog.Logger

	committed Cursor
	// files holds open descriptors by identity. Keeping the committed
	// file open lets the tailer finish a file that was renamed or deleted
	// by log rotation.
	files map[fileID]*os.File
	// succ is the file that replaced the committed one at the path, as
	// first seen: with two rotations before an acknowledgement, lines are
	// still read file by file in order. drained records that the committed
	// file was found fully read once after succ appeared; nginx workers
	// may write to the old descriptor until `nginx -s reopen` reaches them,
	// so the switch waits for a second such read.
	succ struct {
		of, is  fileID
		drained bool
	}
	buf []byte
	// problem is the last problem of the current read, lastProblem that
	// of the previous one (see warn).
	problem, lastProblem string
}

// warn logs a problem unless the previous read had the same one: an
// unreadable log would otherwise be logged on every beat.
func (t *tailer) warn(msg string, err error, args ...any) {
	t.problem = msg + ": " + err.Error()
	if t.problem != t.lastProblem {
		t.log.Warn(msg, append(args, "err", err)...)
	}
}

func newTailer(path string, committed Cursor, log *slog.Logger) *tailer {
	return &tailer{
		path: path, dir: filepath.Dir(path), base: filepath.Base(path),
		maxBytes:  defaultMaxBytes,
		log:       log,
		committed: committed,
		files:     make(map[fileID]*os.File),
	}
}

// next reads up to maxLines parsed lines from the committed cursor. It does not
// change what is committed.
func (t *tailer) next(maxLines int) batch {
	t.problem = ""
	b := t.nextFrom(maxLines)
	t.lastProblem = t.problem
	t.prune(b.cursor.id())
	return b
}

func (t *tailer) nextFrom(maxLines int) batch {
	cur := t.committed
	pathFile, pathID, err := t.pathFile()
	if err != nil {
		t.warn("access log unreadable", err, "path", t.path)
		return batch{cursor: cur}
	}
	if cur.id().zero() {
		if pathFile == nil {
			return batch{cursor: cur}
		}
		return t.read(pathFile, pathID, startOf(pathID), maxLines)
	}
	if pathFile != nil && pathID == cur.id() {
		return t.read(pathFile, pathID, cur, maxLines)
	}

	// The committed file is no longer at the path: rotated or deleted.
	old, err := t.find()
	if err != nil {
		t.warn("looking for the rotated access log", err, "dir", t.dir)
		return batch{cursor: cur}
	}
	if old == nil {
		ev := t.lostEvent(cur)
		t.warn("rotated access log lost", errors.New(ev.Message))
		b := batch{cursor: Cursor{}}
		if pathFile != nil {
			b = t.read(pathFile, pathID, startOf(pathID), maxLines)
		}
		b.events = append(b.events, ev)
		return b
	}
	var skipped []protocol.HealthEvent
	if pathFile != nil && t.succ.of != cur.id() {
		t.succ.of, t.succ.is, t.succ.drained = cur.id(), pathID, false
		skipped = t.skippedRotations(old, cur.id(), pathID)
	}
	b := t.read(old, cur.id(), cur, maxLines)
	b.events = append(b.events, skipped...)
	if b.cursor != cur || t.succ.of != cur.id() {
		t.succ.drained = false
		return b
	}
	if !t.succ.drained {
		t.succ.drained = true
		return b
	}
	// prune keeps the successor's descriptor open while it is pending.
	return t.read(t.files[t.succ.is], t.succ.is, startOf(t.succ.is), maxLines)
}

// pathFile returns the file currently at the path (nil if there is none)
// with its identity. A descriptor already open for that identity is reused.
func (t *tailer) pathFile() (*os.File, fileID, error) {
	// Lstat and O_NOFOLLOW: a link at the log's path (to a root-only
	// file, say) is never followed, so nothing but nginx's own log is
	// uploaded.
	fi, err := os.Lstat(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fileID{}, nil
	}
	if err != nil {
		return nil, fileID{}, fmt.Errorf("stat access log: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fileID{}, fmt.Errorf("access log %s is not a regular file (%v); not read", t.path, fi.Mode().Type())
	}
	if id := idOf(fi); t.files[id] != nil {
		return t.files[id], id, nil
	}
	f, err := os.OpenFile(t.path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fileID{}, nil
	}
	if err != nil {
		return nil, fileID{}, fmt.Errorf("open access log: %w", err)
	}
	// Identify the descriptor, not the earlier stat: a rotation may have
	// happened in between.
	fi, err = f.Stat()
	if err != nil {
		f.Close()
		return nil, fileID{}, fmt.Errorf("stat access log: %w", err)
	}
	id := idOf(fi)
	if prev := t.files[id]; prev != nil {
		f.Close()
		return prev, id, nil
	}
	t.files[id] = f
	return f, id, nil
}

// find returns an open descriptor of the committed file: one already
// held, or (after a restart) a rotated file in the log's directory whose
// name starts with the log's name (access.log.1, access.log-20260718) and
// whose identity and head match. It returns nil, nil when no such file
// exists any more.
func (t *tailer) find() (*os.File, error) {
	id := t.committed.id()
	if f := t.files[id]; f != nil {
		return f, nil
	}
	entries, err := os.ReadDir(t.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read access log directory: %w", err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), t.base) || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil || idOf(fi) != id {
			continue
		}
		f, err := os.Open(filepath.Join(t.dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("open rotated access log: %w", err)
		}
		if fi, err := f.Stat(); err != nil || idOf(fi) != id || !headMatches(f, t.committed) {
			f.Close()
			continue
		}
		t.files[id] = f
		return f, nil
	}
	return nil, nil
}

// skippedRotations reports rotated files that came between the committed
// file and its successor and were never read: a rotation storm (two or
// more rotations between reads) hands them past the tailer, which follows
// one successor at a time.
func (t *tailer) skippedRotations(old *os.File, from, to fileID) []protocol.HealthEvent {
	ofi, err := old.Stat()
	if err != nil {
		return nil
	}
	entries, err := os.ReadDir(t.dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), t.base) || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil || idOf(fi) == from || idOf(fi) == to || fi.ModTime().Before(ofi.ModTime()) {
			continue
		}
		names = append(names, e.Name())
	}
	if len(names) == 0 {
		return nil
	}
	ev := protocol.HealthEvent{
		EventType: protocol.EventAccessLogLost,
		Severity:  protocol.SeverityWarning,
		Message: fmt.Sprintf("access log %s was rotated more than once between reads; the lines of %s were not reported",
			t.path, strings.Join(names, ", ")),
	}
	t.warn("access log rotated faster than it was read", errors.New(ev.Message))
	return []protocol.HealthEvent{ev}
}

func (t *tailer) lostEvent(cur Cursor) protocol.HealthEvent {
	return protocol.HealthEvent{
		EventType: protocol.EventAccessLogLost,
		Severity:  protocol.SeverityWarning,
		Message: fmt.Sprintf("access log %s was rotated away (device %d, inode %d) and is no longer in %s; "+
			"lines written to it after byte %d were not reported", t.path, cur.Dev, cur.Ino, t.dir, cur.Offset),
	}
}

// read parses complete lines of f from c. A truncated file (shorter than
// the offset: copytruncate) is read from its start. A final line without
// its newline is left for a later read: nginx may be writing it.
func (t *tailer) read(f *os.File, id fileID, c Cursor, maxLines int) batch {
	out := batch{cursor: c}
	fi, err := f.Stat()
	if err != nil {
		t.warn("stat access log", err, "path", f.Name())
		return out
	}
	size := fi.Size()
	if size < c.Offset || !headMatches(f, c) {
		c = startOf(id)
		out.cursor = c
	}
	if t.buf == nil {
		t.buf = make([]byte, readChunk)
	}
	off, skip, budget := c.Offset, c.Skip, t.maxBytes
	for len(out.lines) < maxLines && off < size && budget > 0 {
		n := min(int64(len(t.buf)), size-off, budget)
		m, err := f.ReadAt(t.buf[:n], off)
		if m == 0 {
			if err != nil && err != io.EOF {
				t.warn("read access log", err, "path", f.Name(), "offset", off)
			}
			break
		}
		chunk := t.buf[:m]
		used := 0
		for len(out.lines) < maxLines {
			nl := bytes.IndexByte(chunk[used:], '\n')
			if nl < 0 {
				break
			}
			line := chunk[used : used+nl]
			used += nl + 1
			switch {
			case skip:
				skip = false // the end of an over-long line, counted already
			case len(line) > maxLineBytes:
				out.unparsable++
			default:
				if rec, ok := ParseLine(line); ok {
					out.lines = append(out.lines, rec)
				} else {
					out.unparsable++
				}
			}
		}
		if used == 0 {
			if m < len(t.buf) {
				break // an incomplete last line
			}
			// A whole buffer without a newline: the line is too long.
			if !skip {
				out.unparsable++
				skip = true
			}
			used = m
		}
		off += int64(used)
		budget -= int64(used)
		out.cursor = Cursor{Dev: id.dev, Ino: id.ino, Offset: off, Skip: skip, Head: c.Head}
		if c.Offset < headBytes {
			out.cursor.Head, _ = headSum(f, off)
		}
	}
	out.more = off < size && (len(out.lines) >= maxLines || budget < size-off)
	return out
}

// headSum is the CRC-32 of the first min(off, headBytes) bytes of f; ok is
// false when the file is shorter than that.
func headSum(f *os.File, off int64) (sum uint32, ok bool) {
	var b [headBytes]byte
	n := min(off, headBytes)
	if m, _ := f.ReadAt(b[:n], 0); int64(m) != n {
		return 0, false
	}
	return crc32.ChecksumIEEE(b[:n]), true
}

func headMatches(f *os.File, c Cursor) bool {
	sum, ok := headSum(f, c.Offset)
	return ok && sum == c.Head
}

// commit makes c the position the next read starts from.
func (t *tailer) commit(c Cursor) {
	t.committed = c
	t.prune(fileID{})
}

// prune closes descriptors that are no longer needed: only the committed
// file, its successor and the file named by keep stay open.
func (t *tailer) prune(keep fileID) {
	for id, f := range t.files {
		if id == t.committed.id() || id == keep || (t.succ.of == t.committed.id() && id == t.succ.is) {
			continue
		}
		f.Close()
		delete(t.files, id)
	}
}

// close releases every descriptor.
func (t *tailer) close() {
	for id, f := range t.files {
		f.Close()
		delete(t.files, id)
	}
}
