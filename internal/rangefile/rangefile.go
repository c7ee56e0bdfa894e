// Package rangefile is the layout of the compiled range-set files the nginx
// workers binary-search in place (waf/ranges.lua): waf_ip_groups.bin (the
// IP groups of ip_match nodes) and waf_geo.bin (the country and region
// networks of geo_match nodes). Each file holds named sets of sorted,
// merged address ranges, with no per-entry Lua objects.
//
// Layout, every integer a uint32 in the host's byte order (the agent and
// nginx run on the same machine):
//
//	0   magic, 8 bytes, one per kind of file
//	8   format version (1)
//	12  0x01020304, so a reader with the other byte order sees a mismatch
//	16  label: 64 characters naming what the file was compiled from
//	80  number of sets
//	84  flags of the file (its kind says what they mean)
//	88  one 32-byte record per set: its 8-byte id, flags (bit 0:
//	    enabled), IPv4 range count, IPv4 offset, IPv6 range count, IPv6
//	    offset, zero; offsets are in bytes from the start of the file
//	…   IPv4 ranges: lo, hi (inclusive), ascending, disjoint, not adjacent
//	…   IPv6 ranges: lo, hi as four words each, most significant first
package rangefile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// Sizes in the layout.
const (
	HeaderSize  = 88
	RecordSize  = 32
	LabelLen    = 64
	V4RangeSize = 8
	V6RangeSize = 32

	format      = 1
	byteOrder   = 0x01020304
	labelOffset = 16
	countOffset = 80
	flagsOffset = 84
	flagEnabled = 1
)

var native = binary.NativeEndian

// ErrHeader marks a file whose header is not one of this format.
var ErrHeader = errors.New("not a compiled range file of format 1")

// New returns the header of a file of sets records, all zero, with room
// for sizeHint bytes in all.
func New(magic, label string, sets int, flags uint32, sizeHint int) ([]byte, error) {
	if len(magic) != 8 || len(label) != LabelLen {
		return nil, fmt.Errorf("range file: magic %q or label %q of the wrong length", magic, label)
	}
	n := HeaderSize + RecordSize*sets
	buf := make([]byte, n, max(n, sizeHint))
	copy(buf, magic)
	native.PutUint32(buf[8:], format)
	native.PutUint32(buf[12:], byteOrder)
	copy(buf[labelOffset:], label)
	native.PutUint32(buf[countOffset:], uint32(sets))
	native.PutUint32(buf[flagsOffset:], flags)
	return buf, nil
}

// Record is one set's entry: which ranges are its.
type Record struct {
	ID       [8]byte
	Enabled  bool
	N4, Off4 int // IPv4 range count and offset
	N6, Off6 int
}

// Put writes record i of buf.
func (r Record) Put(buf []byte, i int) {
	rec := buf[HeaderSize+RecordSize*i:]
	copy(rec[:8], r.ID[:])
	var flags uint32
	if r.Enabled {
		flags = flagEnabled
	}
	native.PutUint32(rec[8:], flags)
	native.PutUint32(rec[12:], uint32(r.N4))
	native.PutUint32(rec[16:], uint32(r.Off4))
	native.PutUint32(rec[20:], uint32(r.N6))
	native.PutUint32(rec[24:], uint32(r.Off6))
}

// NumericID is the record id of a number: its low and high 32 bits as two
// words (waf/ip_groups.lua reads it so).
func NumericID(id uint64) [8]byte {
	var b [8]byte
	native.PutUint32(b[0:], uint32(id))
	native.PutUint32(b[4:], uint32(id>>32))
	return b
}

// AppendV4 appends an IPv4 range.
func AppendV4(buf []byte, lo, hi uint32) []byte {
	buf = native.AppendUint32(buf, lo)
	return native.AppendUint32(buf, hi)
}

// AppendV6 appends an IPv6 range.
func AppendV6(buf []byte, r Range) []byte {
	for _, v := range [4]uint64{r.Lo.Hi, r.Lo.Lo, r.Hi.Hi, r.Hi.Lo} {
		buf = native.AppendUint32(buf, uint32(v>>32))
		buf = native.AppendUint32(buf, uint32(v))
	}
	return buf
}

// Index is what a file's header and records say, without its ranges.
type Index struct {
	Label string
	Flags uint32
	IDs   [][8]byte
}

// ReadIndex reads the header of the file at path and, with ids, its
// record ids. A file of another magic or format wraps ErrHeader.
func ReadIndex(path, magic string, ids bool) (Index, error) {
	f, err := os.Open(path)
	if err != nil {
		return Index{}, err
	}
	defer f.Close()
	head := make([]byte, HeaderSize)
	if _, err := io.ReadFull(f, head); err != nil {
		return Index{}, fmt.Errorf("%w: %s: header: %w", ErrHeader, path, err)
	}
	if string(head[:8]) != magic || native.Uint32(head[8:]) != format || native.Uint32(head[12:]) != byteOrder {
		return Index{}, fmt.Errorf("%w: %s: header %q format %d", ErrHeader, path, head[:8], native.Uint32(head[8:]))
	}
	x := Index{Label: string(head[labelOffset : labelOffset+LabelLen]), Flags: native.Uint32(head[flagsOffset:])}
	if !ids {
		return x, nil
	}
	n := int64(native.Uint32(head[countOffset:]))
	if st, err := f.Stat(); err != nil || HeaderSize+RecordSize*n > st.Size() {
		return Index{}, fmt.Errorf("%w: %s: %d records run past the end", ErrHeader, path, n)
	}
	recs := make([]byte, RecordSize*n)
	if _, err := io.ReadFull(f, recs); err != nil {
		return Index{}, fmt.Errorf("%w: %s: records: %w", ErrHeader, path, err)
	}
	for i := range n {
		x.IDs = append(x.IDs, [8]byte(recs[RecordSize*i:]))
	}
	return x, nil
}
