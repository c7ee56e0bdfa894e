package lzma

// window is the dictionary: a ring buffer that is also the output buffer.
// buf[flushed:pos] is decoded but not yet returned to the caller. The buffer
// starts small and doubles up to max before it ever wraps, so memory follows
// the data produced rather than the declared dictionary size. Its length is
// always a multiple of 16 and pos restarts at 0 only on wrap or dictionary
// reset, so pos carries the low bits of the stream position that lp and pb
// select.
type window struct {
	buf     []byte
	pos     int
	flushed int
	full    bool // buf has wrapped: all of it is history
	max     int
}

const initialWindow = 64 << 10

func (w *window) init(max int) {
	w.max = max
	n := initialWindow
	if n > max {
		n = max
	}
	w.buf = make([]byte, n)
	w.pos, w.flushed, w.full = 0, 0, false
}

// take hands decoded bytes not yet returned to the caller over to p.
func (w *window) take(p []byte) int {
	n := copy(p, w.buf[w.flushed:w.pos])
	w.flushed += n
	return n
}

// reset forgets the history; the caller has flushed everything.
func (w *window) reset() {
	w.pos, w.flushed, w.full = 0, 0, false
}

// makeRoom ensures pos < len(buf); everything must be flushed when pos has
// reached the end.
func (w *window) makeRoom() {
	if w.pos < len(w.buf) {
		return
	}
	if len(w.buf) < w.max {
		n := 2 * len(w.buf)
		if n > w.max {
			n = w.max
		}
		nb := make([]byte, n)
		copy(nb, w.buf[:w.pos])
		w.buf = nb
		return
	}
	w.pos, w.flushed, w.full = 0, 0, true
}

// has reports whether a byte dist+1 back exists.
func (w *window) has(dist uint32) bool {
	return int64(dist) < int64(w.pos) || (w.full && int64(dist) < int64(len(w.buf)))
}

// back returns the byte dist+1 positions back; has(dist) must hold.
func (w *window) back(dist uint32) byte {
	i := w.pos - int(dist) - 1
	if i < 0 {
		i += len(w.buf)
	}
	return w.buf[i]
}

func (w *window) prev() byte {
	if w.pos > 0 {
		return w.buf[w.pos-1]
	}
	if w.full {
		return w.buf[len(w.buf)-1]
	}
	return 0
}

// copyMatch copies n bytes from dist+1 back; n <= len(buf)-pos.
func (w *window) copyMatch(dist uint32, n int) {
	d := int(dist) + 1
	src := w.pos - d
	if src < 0 {
		src += len(w.buf)
		// The source wraps around the end of the buffer: rare, so simple.
		for ; n > 0; n-- {
			w.buf[w.pos] = w.buf[src]
			w.pos++
			src++
			if src == len(w.buf) {
				src = 0
			}
		}
		return
	}
	if d >= n {
		copy(w.buf[w.pos:w.pos+n], w.buf[src:src+n])
		w.pos += n
		return
	}
	// Overlapping: buf[src:pos] repeats with period d, so copying from src
	// doubles the copyable length each round.
	for n > 0 {
		c := copy(w.buf[w.pos:w.pos+n], w.buf[src:w.pos])
		w.pos += c
		n -= c
	}
}
