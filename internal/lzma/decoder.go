package lzma

const (
	states       = 12
	posStatesMax = 1 << 4
	lenToPos     = 4
	endPosModel  = 14
	fullDist     = 128
	alignBits    = 4
	matchMin     = 2
)

type lenDecoder struct {
	choice  prob
	choice2 prob
	low     [posStatesMax][8]prob
	mid     [posStatesMax][8]prob
	high    [256]prob
}

func (l *lenDecoder) reset() {
	l.choice, l.choice2 = probInit, probInit
	for i := range l.low {
		for j := range l.low[i] {
			l.low[i][j] = probInit
			l.mid[i][j] = probInit
		}
	}
	for i := range l.high {
		l.high[i] = probInit
	}
}

// decode returns the match length minus matchMin.
func (l *lenDecoder) decode(rc *rangeDecoder, posState uint32) uint32 {
	if rc.bit(&l.choice) == 0 {
		return rc.tree(l.low[posState&15][:], 3)
	}
	if rc.bit(&l.choice2) == 0 {
		return 8 + rc.tree(l.mid[posState&15][:], 3)
	}
	return 16 + rc.tree(l.high[:], 8)
}

// decoder is the LZMA state machine shared by LZMA1 and LZMA2.
type decoder struct {
	rc  rangeDecoder
	win window

	lc, lp, pb     uint
	lpMask, pbMask uint32

	state                  uint32
	rep0, rep1, rep2, rep3 uint32
	pending                int  // bytes of the last match not yet copied
	eos                    bool // end marker seen

	isMatch    [16 * posStatesMax]prob
	isRep      [states]prob
	isRepG0    [states]prob
	isRepG1    [states]prob
	isRepG2    [states]prob
	isRep0Long [16 * posStatesMax]prob
	posSlot    [lenToPos][64]prob
	posSpec    [1 + fullDist - endPosModel]prob
	align      [1 << alignBits]prob
	matchLen   lenDecoder
	repLen     lenDecoder
	lit        []prob
}

func (d *decoder) init(p props, windowMax int) {
	d.win.init(windowMax)
	d.setProps(p)
	d.resetState()
}

// setProps changes lc/lp/pb; the caller resets the state afterwards.
func (d *decoder) setProps(p props) {
	d.lc, d.lp, d.pb = p.lc, p.lp, p.pb
	d.lpMask = 1<<p.lp - 1
	d.pbMask = 1<<p.pb - 1
	n := 0x300 << (p.lc + p.lp)
	if cap(d.lit) >= n {
		d.lit = d.lit[:n]
	} else {
		d.lit = make([]prob, n)
	}
}

func (d *decoder) resetState() {
	d.state = 0
	d.rep0, d.rep1, d.rep2, d.rep3 = 0, 0, 0, 0
	d.pending = 0
	d.eos = false
	fill := func(s []prob) {
		for i := range s {
			s[i] = probInit
		}
	}
	fill(d.isMatch[:])
	fill(d.isRep[:])
	fill(d.isRepG0[:])
	fill(d.isRepG1[:])
	fill(d.isRepG2[:])
	fill(d.isRep0Long[:])
	for i := range d.posSlot {
		fill(d.posSlot[i][:])
	}
	fill(d.posSpec[:])
	fill(d.align[:])
	fill(d.lit)
	d.matchLen.reset()
	d.repLen.reset()
}

// decode runs the state machine until the window position reaches lim
// (lim <= len(win.buf)), an end marker is found (eos) or the data is
// corrupt. A match cut short by lim is left in pending.
func (d *decoder) decode(lim int) error {
	w := &d.win
	rc := &d.rc
	if d.pending > 0 {
		n := d.pending
		if n > lim-w.pos {
			n = lim - w.pos
		}
		w.copyMatch(d.rep0, n)
		d.pending -= n
	}
	for w.pos < lim {
		if rc.pos+margin > rc.end {
			if err := rc.fill(); err != nil {
				return err
			}
		}
		posState := uint32(w.pos) & d.pbMask
		s := d.state
		if rc.bit(&d.isMatch[(s<<4|posState)&255]) == 0 {
			d.literal()
			continue
		}
		var length uint32
		if rc.bit(&d.isRep[s%states]) == 0 {
			length = d.matchLen.decode(rc, posState)
			dist := d.distance(length)
			if dist == endMarker {
				if err := rc.overrun(); err != nil {
					return err
				}
				d.eos = true
				return nil
			}
			d.rep3, d.rep2, d.rep1, d.rep0 = d.rep2, d.rep1, d.rep0, dist
			if s < 7 {
				d.state = 7
			} else {
				d.state = 10
			}
		} else {
			if rc.bit(&d.isRepG0[s%states]) == 0 {
				if rc.bit(&d.isRep0Long[(s<<4|posState)&255]) == 0 {
					if !w.has(d.rep0) {
						return corrupt("short repeat before the start of the data")
					}
					if s < 7 {
						d.state = 9
					} else {
						d.state = 11
					}
					w.buf[w.pos] = w.back(d.rep0)
					w.pos++
					continue
				}
			} else {
				var dist uint32
				if rc.bit(&d.isRepG1[s%states]) == 0 {
					dist = d.rep1
				} else {
					if rc.bit(&d.isRepG2[s%states]) == 0 {
						dist = d.rep2
					} else {
						dist = d.rep3
						d.rep3 = d.rep2
					}
					d.rep2 = d.rep1
				}
				d.rep1 = d.rep0
				d.rep0 = dist
			}
			length = d.repLen.decode(rc, posState)
			if s < 7 {
				d.state = 8
			} else {
				d.state = 11
			}
		}
		if !w.has(d.rep0) {
			return corrupt("match distance beyond the start of the data")
		}
		n := int(length) + matchMin
		if n > lim-w.pos {
			d.pending = n - (lim - w.pos)
			n = lim - w.pos
		}
		w.copyMatch(d.rep0, n)
	}
	return rc.overrun()
}

// literal decodes one literal. It is the hottest path, so the range coder
// lives in locals here rather than going through rc.bit.
func (d *decoder) literal() {
	w := &d.win
	rc := &d.rc
	prev := uint32(w.prev())
	ls := (uint32(w.pos)&d.lpMask)<<d.lc | prev>>(8-d.lc)
	probs := (*[0x300]prob)(d.lit[0x300*ls:])
	rng, code, in, pos := rc.rng, rc.code, rc.in, rc.pos
	sym := uint32(1)
	s := d.state
	if s >= 7 {
		// After a match the literal is coded relative to the byte at rep0:
		// while the bits agree, a separate set of probabilities is used.
		match := uint32(w.back(d.rep0))
		for sym < 0x100 {
			mb := (match >> 7) & 1
			match <<= 1
			p := &probs[(1+mb)<<8|sym]
			v := uint32(*p)
			bound := (rng >> probBits) * v
			var b uint32
			if code < bound {
				rng = bound
				*p = prob(v + (probOne-v)>>moveBits)
			} else {
				rng -= bound
				code -= bound
				*p = prob(v - v>>moveBits)
				b = 1
			}
			if rng < topValue {
				rng <<= 8
				code = code<<8 | uint32(in[pos])
				pos++
			}
			sym = sym<<1 | b
			if mb != b {
				break
			}
		}
	}
	for sym < 0x100 {
		p := &probs[sym]
		v := uint32(*p)
		bound := (rng >> probBits) * v
		if code < bound {
			rng = bound
			*p = prob(v + (probOne-v)>>moveBits)
			sym <<= 1
		} else {
			rng -= bound
			code -= bound
			*p = prob(v - v>>moveBits)
			sym = sym<<1 | 1
		}
		if rng < topValue {
			rng <<= 8
			code = code<<8 | uint32(in[pos])
			pos++
		}
	}
	rc.rng, rc.code, rc.pos = rng, code, pos
	w.buf[w.pos] = byte(sym)
	w.pos++
	switch {
	case s < 4:
		d.state = 0
	case s < 10:
		d.state = s - 3
	default:
		d.state = s - 6
	}
}

func (d *decoder) distance(length uint32) uint32 {
	rc := &d.rc
	ls := length
	if ls > lenToPos-1 {
		ls = lenToPos - 1
	}
	slot := rc.tree(d.posSlot[ls][:], 6)
	if slot < 4 {
		return slot
	}
	nd := slot>>1 - 1
	dist := (2 | slot&1) << nd
	if slot < endPosModel {
		return dist + rc.reverse(d.posSpec[dist-slot:], nd)
	}
	dist += rc.direct(nd-alignBits) << alignBits
	return dist + rc.reverse(d.align[:], alignBits)
}

// endMarker decodes the symbol that must follow once a known size is
// reached and the range coder is not at a clean end.
func (d *decoder) endMarker() error {
	rc := &d.rc
	if err := rc.fill(); err != nil {
		return err
	}
	posState := uint32(d.win.pos) & d.pbMask
	ok := rc.bit(&d.isMatch[(d.state<<4|posState)&255]) == 1 && rc.bit(&d.isRep[d.state%states]) == 0
	if ok {
		length := d.matchLen.decode(rc, posState)
		ok = d.distance(length) == endMarker
	}
	if err := rc.overrun(); err != nil {
		return err
	}
	if !ok {
		return corrupt("data continues past the declared size")
	}
	if rc.code != 0 {
		return corrupt("data after end marker")
	}
	return nil
}
