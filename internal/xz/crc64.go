package xz

import (
	"encoding/binary"
	"sync"
)

// crc64Poly is CRC-64/ECMA-182 in reflected form, the check xz calls CRC64.
const crc64Poly = 0xC96C5795D7870F42

// crc64Tables are for slicing-by-8: the check runs over every output byte,
// so a byte-at-a-time loop would show up next to the LZMA decoder.
var (
	crc64Once   sync.Once
	crc64Tables [8][256]uint64
)

func crc64Init() {
	t := &crc64Tables
	for i := range 256 {
		c := uint64(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ crc64Poly
			} else {
				c >>= 1
			}
		}
		t[0][i] = c
	}
	for i := range 256 {
		for k := 1; k < 8; k++ {
			c := t[k-1][i]
			t[k][i] = c>>8 ^ t[0][byte(c)]
		}
	}
}

// crc64Update continues crc (0 for a new checksum) over p.
func crc64Update(crc uint64, p []byte) uint64 {
	crc64Once.Do(crc64Init)
	t := &crc64Tables
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint64(p)
		crc = t[7][byte(crc)] ^ t[6][byte(crc>>8)] ^ t[5][byte(crc>>16)] ^ t[4][byte(crc>>24)] ^
			t[3][byte(crc>>32)] ^ t[2][byte(crc>>40)] ^ t[1][byte(crc>>48)] ^ t[0][byte(crc>>56)]
		p = p[8:]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}
