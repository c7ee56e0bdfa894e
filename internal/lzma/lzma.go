// Package lzma decodes raw LZMA ("LZMA1", as stored inside .7z and after the
// 13-byte header of .lzma files) and LZMA2 chunk streams (as stored inside
// .xz blocks and .7z).
//
// Only decoding is implemented. Memory is bounded: the dictionary is never
// larger than MaxDict, is capped by the uncompressed size when that is
// known, and grows with the data actually produced, so a header that merely
// declares a large dictionary costs nothing until output exists. The
// literal tables of LZMA1 depend on lc+lp and are at most 6 MiB.
//
// Readers are streaming: they never produce more than they are asked for, so
// a caller guarding against decompression bombs only has to count bytes.
// Corrupt input yields an error wrapping ErrCorrupt (truncated input also
// wraps io.ErrUnexpectedEOF); it never panics and every Read makes progress
// or fails.
package lzma

import (
	"errors"
	"fmt"
	"io"
)

// MaxDict is the largest dictionary a reader allocates. It is the size xz -9
// and 7-Zip -mx9 use; larger dictionaries are refused unless the known
// uncompressed size makes them irrelevant.
const MaxDict = 64 << 20

// ErrCorrupt is wrapped by every error caused by invalid compressed data.
var ErrCorrupt = errors.New("corrupt data")

// ErrDictionaryTooLarge is wrapped by the refusal of a dictionary above
// MaxDict.
var ErrDictionaryTooLarge = errors.New("dictionary too large")

// minDict follows the format: smaller declared dictionaries behave as 4 KiB.
const minDict = 4096

func corrupt(what string) error {
	return fmt.Errorf("lzma: %w: %s", ErrCorrupt, what)
}

var errTruncated = fmt.Errorf("lzma: %w: compressed data truncated: %w", ErrCorrupt, io.ErrUnexpectedEOF)

// props holds the literal context, literal position and position bits.
type props struct {
	lc, lp, pb uint
}

func decodeProps(b byte) (props, error) {
	if b >= 9*5*5 {
		return props{}, corrupt(fmt.Sprintf("invalid properties byte 0x%02x", b))
	}
	v := uint(b)
	return props{lc: v % 9, lp: v / 9 % 5, pb: v / 45}, nil
}

// windowCap returns the ring buffer size for a dictionary: capped by the
// uncompressed size when known (size >= 0), rounded up to a multiple of 16 so
// that buffer positions keep the low bits that pb and lp select.
func windowCap(dict uint32, size int64) (int, error) {
	d := int64(dict)
	if d < minDict {
		d = minDict
	}
	if size >= 0 && size < d {
		d = size
	}
	if d > MaxDict {
		return 0, fmt.Errorf("lzma: %w: %d bytes, the limit is %d", ErrDictionaryTooLarge, dict, MaxDict)
	}
	d = (d + 15) &^ 15
	if d == 0 {
		d = 16
	}
	return int(d), nil
}

// NewReader returns a reader of raw LZMA1 data as 7z stores it. props is the
// 5-byte property block (lc/lp/pb byte, little-endian dictionary size). size
// is the uncompressed size, or -1 when unknown, in which case the data must
// end with an end marker; with a known size an end marker is accepted but not
// required.
//
// The reader buffers its input and may read past the end of the LZMA data:
// give it a reader limited to the compressed stream.
func NewReader(r io.Reader, props []byte, size int64) (io.Reader, error) {
	if len(props) != 5 {
		return nil, fmt.Errorf("lzma: properties are %d bytes, want 5", len(props))
	}
	if size < -1 {
		return nil, fmt.Errorf("lzma: invalid uncompressed size %d", size)
	}
	p, err := decodeProps(props[0])
	if err != nil {
		return nil, err
	}
	dict := uint32(props[1]) | uint32(props[2])<<8 | uint32(props[3])<<16 | uint32(props[4])<<24
	c, err := windowCap(dict, size)
	if err != nil {
		return nil, err
	}
	z := &reader1{src: r, remaining: size}
	z.d.init(p, c)
	return z, nil
}

// reader1 decodes one LZMA1 stream.
type reader1 struct {
	d         decoder
	src       io.Reader
	started   bool
	remaining int64 // -1: unknown
	eof       bool
	err       error
}

func (z *reader1) Read(p []byte) (int, error) {
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
		if !z.started {
			z.started = true
			z.d.rc.setSource(z.src)
			if err := z.d.rc.start(); err != nil {
				z.err = err
				continue
			}
		}
		if z.remaining == 0 {
			z.err = z.finish()
			z.eof = z.err == nil
			continue
		}
		w.makeRoom()
		n := len(w.buf) - w.pos
		if n > len(p) {
			n = len(p)
		}
		if z.remaining >= 0 && int64(n) > z.remaining {
			n = int(z.remaining)
		}
		start := w.pos
		err := z.d.decode(w.pos + n)
		if z.remaining >= 0 {
			z.remaining -= int64(w.pos - start)
		}
		switch {
		case err != nil:
			z.err = err
		case z.d.eos:
			if z.remaining > 0 {
				z.err = corrupt("end marker before the declared size")
			} else if z.d.rc.code != 0 {
				z.err = corrupt("data after end marker")
			} else {
				z.eof = true
			}
		}
	}
}

// finish is called once the declared size is reached: either the range
// coder is at a clean end, or an end marker must follow.
func (z *reader1) finish() error {
	if z.d.pending > 0 {
		return corrupt("match extends past the declared size")
	}
	if z.d.rc.code == 0 {
		return nil
	}
	return z.d.endMarker()
}
