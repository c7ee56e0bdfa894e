package lzma

import (
	"errors"
	"fmt"
	"io"
)

// NewReader2 returns a reader of an LZMA2 chunk stream, which ends with a
// 0x00 control byte. dictSize is the dictionary size from the container
// (the xz filter properties or the 7z coder properties). The reader reads
// exactly up to the end byte, never past it, so the container can continue
// reading from r.
func NewReader2(r io.Reader, dictSize uint32) (io.Reader, error) {
	c, err := windowCap(dictSize, -1)
	if err != nil {
		return nil, err
	}
	z := &reader2{src: r, needDictReset: true, needProps: true, max: c}
	return z, nil
}

type chunkKind int

const (
	chunkNone chunkKind = iota
	chunkLZMA
	chunkRaw
)

type reader2 struct {
	d   decoder
	src io.Reader
	max int

	kind      chunkKind
	unpacked  int // bytes of the current chunk still to produce
	chunk     []byte
	hdr       [6]byte
	allocated bool

	needDictReset bool
	needProps     bool
	eof           bool
	err           error
}

func (z *reader2) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	w := &z.d.win
	for {
		if n := w.take(p); n > 0 {
			return n, nil
		}
		if z.err != nil {
			return 0, z.err
		}
		if z.eof {
			return 0, io.EOF
		}
		if z.unpacked == 0 {
			if z.kind == chunkLZMA {
				if z.d.pending > 0 {
					z.err = corrupt("match crosses an LZMA2 chunk boundary")
					continue
				}
				if z.d.rc.code != 0 || z.d.rc.pos != z.d.rc.end {
					z.err = corrupt("LZMA2 chunk sizes do not match its data")
					continue
				}
			}
			z.kind = chunkNone
			z.err = z.nextChunk()
			continue
		}
		w.makeRoom()
		n := len(w.buf) - w.pos
		if n > len(p) {
			n = len(p)
		}
		if n > z.unpacked {
			n = z.unpacked
		}
		if z.kind == chunkRaw {
			if _, err := io.ReadFull(z.src, w.buf[w.pos:w.pos+n]); err != nil {
				z.err = readErr("uncompressed LZMA2 chunk", err)
				continue
			}
			w.pos += n
			z.unpacked -= n
			continue
		}
		start := w.pos
		err := z.d.decode(w.pos + n)
		z.unpacked -= w.pos - start
		if err != nil {
			z.err = err
		} else if z.d.eos {
			z.err = corrupt("end marker inside an LZMA2 chunk")
		}
	}
}

func readErr(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("lzma: %w: %s truncated: %w", ErrCorrupt, what, io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("lzma: reading %s: %w", what, err)
}

// nextChunk reads a chunk header; the window is fully flushed.
func (z *reader2) nextChunk() error {
	h := z.hdr[:1]
	if _, err := io.ReadFull(z.src, h); err != nil {
		return readErr("LZMA2 chunk header", err)
	}
	control := h[0]
	if control == 0 {
		z.eof = true
		return nil
	}
	if control >= 0x80 {
		n := 4
		if control >= 0xC0 {
			n = 5
		}
		h = z.hdr[1 : 1+n]
	} else if control <= 2 {
		h = z.hdr[1:3]
	} else {
		return corrupt(fmt.Sprintf("invalid LZMA2 control byte 0x%02x", control))
	}
	if _, err := io.ReadFull(z.src, h); err != nil {
		return readErr("LZMA2 chunk header", err)
	}
	if !z.allocated {
		z.allocated = true
		z.d.init(props{lc: 0, lp: 0, pb: 0}, z.max)
	}
	if control == 1 || control >= 0xE0 {
		z.needDictReset = false
		z.needProps = true
		z.d.win.reset()
	} else if z.needDictReset {
		return corrupt("LZMA2 stream does not start with a dictionary reset")
	}
	if control <= 2 {
		z.kind = chunkRaw
		z.unpacked = (int(h[0])<<8 | int(h[1])) + 1
		return nil
	}
	z.kind = chunkLZMA
	z.unpacked = (int(control&0x1F)<<16 | int(h[0])<<8 | int(h[1])) + 1
	packed := (int(h[2])<<8 | int(h[3])) + 1
	switch {
	case control >= 0xC0:
		p, err := decodeProps(h[4])
		if err != nil {
			return err
		}
		if p.lc+p.lp > 4 {
			return corrupt(fmt.Sprintf("LZMA2 properties lc=%d lp=%d exceed lc+lp=4", p.lc, p.lp))
		}
		z.needProps = false
		z.d.setProps(p)
		z.d.resetState()
	case z.needProps:
		return corrupt("LZMA2 chunk without properties after a dictionary reset")
	case control >= 0xA0:
		z.d.resetState()
	}
	if z.chunk == nil {
		z.chunk = make([]byte, 1<<16+margin)
	}
	if _, err := io.ReadFull(z.src, z.chunk[:packed]); err != nil {
		return readErr("LZMA2 chunk", err)
	}
	z.d.rc.setChunk(z.chunk, packed)
	return z.d.rc.start()
}
