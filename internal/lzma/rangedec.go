package lzma

import (
	"errors"
	"fmt"
	"io"
)

type prob uint16

const (
	probBits  = 11
	probOne   = 1 << probBits
	probInit  = probOne / 2
	moveBits  = 5
	topValue  = 1 << 24
	endMarker = 0xFFFFFFFF
)

// margin is more than the input one symbol can consume: one byte per
// decoded bit at most, and no symbol has more than 48 bits.
const margin = 64

// rangeDecoder reads from in[pos:end]. Before each symbol the decoder calls
// fill, which guarantees margin readable bytes after pos (zero padding past
// end), so the per-bit path never checks for input exhaustion; overrunning
// end is detected once per symbol. in is refilled from src, or, with src
// nil (an LZMA2 chunk held whole in memory), holds all the input there is.
type rangeDecoder struct {
	rng, code uint32
	in        []byte
	pos       int
	end       int
	src       io.Reader
	eof       bool
}

const srcBuffer = 64 << 10

// setChunk makes buf[:n] the whole input; buf has margin bytes to spare.
func (rc *rangeDecoder) setChunk(buf []byte, n int) {
	clear(buf[n : n+margin])
	*rc = rangeDecoder{in: buf[:n+margin], end: n}
}

// setSource makes the decoder read from r.
func (rc *rangeDecoder) setSource(r io.Reader) {
	*rc = rangeDecoder{in: make([]byte, srcBuffer+margin), src: r}
}

// fill is called between symbols.
func (rc *rangeDecoder) fill() error {
	if rc.src != nil && !rc.eof {
		n := copy(rc.in, rc.in[rc.pos:rc.end])
		rc.pos, rc.end = 0, n
		for empty := 0; rc.end < margin && !rc.eof; {
			k, err := rc.src.Read(rc.in[rc.end:srcBuffer])
			rc.end += k
			if err != nil {
				if !errors.Is(err, io.EOF) {
					return fmt.Errorf("lzma: reading compressed data: %w", err)
				}
				rc.eof = true
			}
			if k > 0 {
				empty = 0
			} else if empty++; empty == 100 {
				return fmt.Errorf("lzma: reading compressed data: %w", io.ErrNoProgress)
			}
		}
		clear(rc.in[rc.end : rc.end+margin])
	}
	return rc.overrun()
}

// overrun reports whether the decoder has used padding as input.
func (rc *rangeDecoder) overrun() error {
	if rc.pos <= rc.end {
		return nil
	}
	if rc.src != nil {
		return errTruncated
	}
	return corrupt("range coder reads past the end of its chunk")
}

// start reads the 5 initial bytes.
func (rc *rangeDecoder) start() error {
	if err := rc.fill(); err != nil {
		return err
	}
	if rc.end-rc.pos < 5 {
		if rc.src != nil {
			return errTruncated
		}
		return corrupt("LZMA2 chunk too short")
	}
	if rc.in[rc.pos] != 0 {
		return corrupt("range coder does not start with a zero byte")
	}
	rc.rng = 0xFFFFFFFF
	rc.code = uint32(rc.in[rc.pos+1])<<24 | uint32(rc.in[rc.pos+2])<<16 | uint32(rc.in[rc.pos+3])<<8 | uint32(rc.in[rc.pos+4])
	rc.pos += 5
	if rc.code == rc.rng {
		return corrupt("invalid range coder start")
	}
	return nil
}

func (rc *rangeDecoder) bit(p *prob) (b uint32) {
	v := uint32(*p)
	bound := (rc.rng >> probBits) * v
	if rc.code < bound {
		rc.rng = bound
		v += (probOne - v) >> moveBits
	} else {
		rc.rng -= bound
		rc.code -= bound
		v -= v >> moveBits
		b = 1
	}
	*p = prob(v)
	if rc.rng < topValue {
		rc.rng <<= 8
		rc.code = rc.code<<8 | uint32(rc.in[rc.pos])
		rc.pos++
	}
	return b
}

// direct decodes n bits of equal probability.
func (rc *rangeDecoder) direct(n uint32) uint32 {
	var res uint32
	for ; n > 0; n-- {
		rc.rng >>= 1
		rc.code -= rc.rng
		t := 0 - (rc.code >> 31)
		rc.code += rc.rng & t
		res = res<<1 + t + 1
		if rc.rng < topValue {
			rc.rng <<= 8
			rc.code = rc.code<<8 | uint32(rc.in[rc.pos])
			rc.pos++
		}
	}
	return res
}

// tree decodes a bits-bit symbol most significant bit first; p is indexed
// from 1. Like literal, it keeps the coder in locals.
func (rc *rangeDecoder) tree(p []prob, bits uint) uint32 {
	rng, code, in, pos := rc.rng, rc.code, rc.in, rc.pos
	m := uint32(1)
	top := uint32(1) << bits
	for m < top {
		q := &p[m]
		v := uint32(*q)
		bound := (rng >> probBits) * v
		if code < bound {
			rng = bound
			*q = prob(v + (probOne-v)>>moveBits)
			m <<= 1
		} else {
			rng -= bound
			code -= bound
			*q = prob(v - v>>moveBits)
			m = m<<1 | 1
		}
		if rng < topValue {
			rng <<= 8
			code = code<<8 | uint32(in[pos])
			pos++
		}
	}
	rc.rng, rc.code, rc.pos = rng, code, pos
	return m - top
}

// reverse decodes n bits least significant first; p is indexed from 1.
func (rc *rangeDecoder) reverse(p []prob, n uint32) uint32 {
	m := uint32(1)
	var sym uint32
	for i := uint32(0); i < n; i++ {
		b := rc.bit(&p[m])
		m = m<<1 | b
		sym |= b << i
	}
	return sym
}
