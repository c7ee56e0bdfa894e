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

// rangeDecoder reads from in; when in is exhausted it refills from src, or,
// with src nil (an LZMA2 chunk held whole in memory), reports corruption.
// Past the end it feeds zero bytes and records err, which the symbol loop
// checks once per symbol: the hot path never tests for errors per bit.
type rangeDecoder struct {
	rng, code uint32
	in        []byte
	pos       int
	src       io.Reader
	err       error
}

// start reads the 5 initial bytes.
func (rc *rangeDecoder) start() error {
	rc.rng = 0xFFFFFFFF
	rc.code = 0
	if rc.next() != 0 {
		if rc.err != nil {
			return rc.err
		}
		return corrupt("range coder does not start with a zero byte")
	}
	for i := 0; i < 4; i++ {
		rc.code = rc.code<<8 | uint32(rc.next())
	}
	if rc.err != nil {
		return rc.err
	}
	if rc.code == rc.rng {
		return corrupt("invalid range coder start")
	}
	return nil
}

func (rc *rangeDecoder) next() byte {
	if rc.pos < len(rc.in) {
		b := rc.in[rc.pos]
		rc.pos++
		return b
	}
	return rc.refill()
}

func (rc *rangeDecoder) refill() byte {
	if rc.err != nil {
		return 0
	}
	if rc.src == nil {
		rc.err = corrupt("range coder reads past the end of its chunk")
		return 0
	}
	for {
		n, err := rc.src.Read(rc.in[:cap(rc.in)])
		rc.in = rc.in[:n]
		rc.pos = 0
		if n > 0 {
			rc.pos = 1
			return rc.in[0]
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				rc.err = errTruncated
			} else {
				rc.err = fmt.Errorf("lzma: reading compressed data: %w", err)
			}
			return 0
		}
	}
}

func (rc *rangeDecoder) normalize() {
	rc.rng <<= 8
	rc.code = rc.code<<8 | uint32(rc.next())
}

func (rc *rangeDecoder) bit(p *prob) uint32 {
	v := uint32(*p)
	bound := (rc.rng >> probBits) * v
	if rc.code < bound {
		rc.rng = bound
		*p = prob(v + (probOne-v)>>moveBits)
		if rc.rng < topValue {
			rc.normalize()
		}
		return 0
	}
	rc.rng -= bound
	rc.code -= bound
	*p = prob(v - v>>moveBits)
	if rc.rng < topValue {
		rc.normalize()
	}
	return 1
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
			rc.normalize()
		}
	}
	return res
}

func (rc *rangeDecoder) tree3(p *[8]prob) uint32 {
	m := uint32(1)
	for i := 0; i < 3; i++ {
		m = m<<1 | rc.bit(&p[m&7])
	}
	return m - 8
}

func (rc *rangeDecoder) tree6(p *[64]prob) uint32 {
	m := uint32(1)
	for i := 0; i < 6; i++ {
		m = m<<1 | rc.bit(&p[m&63])
	}
	return m - 64
}

func (rc *rangeDecoder) tree8(p *[256]prob) uint32 {
	m := uint32(1)
	for i := 0; i < 8; i++ {
		m = m<<1 | rc.bit(&p[m&255])
	}
	return m - 256
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
