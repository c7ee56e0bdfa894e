package ipgroups

import (
	"encoding/binary"
	"errors"
	"fmt"

	"openflare/internal/rangefile"
)

// The layout as the tests read it back, independently of the writer
// (internal/rangefile has its description).
const (
	compiledFormat  = 1
	byteOrderMark   = 0x01020304
	labelOffset     = 16
	labelLen        = rangefile.LabelLen
	headerSize      = rangefile.HeaderSize
	recordSize      = rangefile.RecordSize
	groupCountWord  = 80
	firstRecordByte = headerSize
	v4RangeSize     = rangefile.V4RangeSize
	v6RangeSize     = rangefile.V6RangeSize
	flagEnabled     = 1
)

var native = binary.NativeEndian

// compiledGroup is one group of a decoded compiled file.
type compiledGroup struct {
	ID      uint64
	Enabled bool
	V4      [][2]uint32
	V6      [][2][16]byte
}

// decodeCompiled parses a compiled file back, checking every bound the Lua
// side checks; tests use it to state what the file holds.
func decodeCompiled(b []byte) (label string, groups []compiledGroup, err error) {
	if len(b) < headerSize || string(b[:8]) != compiledMagic || native.Uint32(b[8:]) != compiledFormat || native.Uint32(b[12:]) != byteOrderMark {
		return "", nil, errors.New("bad header")
	}
	label = string(b[labelOffset : labelOffset+labelLen])
	n := int(native.Uint32(b[groupCountWord:]))
	if firstRecordByte+recordSize*n > len(b) {
		return "", nil, errors.New("records beyond the end")
	}
	for i := range n {
		rec := b[firstRecordByte+recordSize*i:]
		w := func(k int) int { return int(native.Uint32(rec[4*k:])) }
		g := compiledGroup{ID: uint64(w(0)) | uint64(w(1))<<32, Enabled: w(2)&flagEnabled != 0}
		n4, off4, n6, off6 := w(3), w(4), w(5), w(6)
		if off4%4 != 0 || off6%4 != 0 || off4+n4*v4RangeSize > len(b) || off6+n6*v6RangeSize > len(b) {
			return "", nil, fmt.Errorf("group %d: ranges beyond the end", g.ID)
		}
		for k := range n4 {
			p := b[off4+k*v4RangeSize:]
			g.V4 = append(g.V4, [2]uint32{native.Uint32(p), native.Uint32(p[4:])})
		}
		for k := range n6 {
			p := b[off6+k*v6RangeSize:]
			var r [2][16]byte
			for half := range 2 {
				for word := range 4 {
					binary.BigEndian.PutUint32(r[half][4*word:], native.Uint32(p[16*half+4*word:]))
				}
			}
			g.V6 = append(g.V6, r)
		}
		groups = append(groups, g)
	}
	return label, groups, nil
}
