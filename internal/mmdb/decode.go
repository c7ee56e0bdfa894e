package mmdb

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"unicode/utf8"
)

// kind is a field type number from the "Output Data Section" of the
// specification.
type kind uint8

const (
	kindExtended  kind = 0
	kindPointer   kind = 1
	kindString    kind = 2
	kindDouble    kind = 3
	kindBytes     kind = 4
	kindUint16    kind = 5
	kindUint32    kind = 6
	kindMap       kind = 7
	kindInt32     kind = 8
	kindUint64    kind = 9
	kindUint128   kind = 10
	kindArray     kind = 11
	kindContainer kind = 12
	kindEndMarker kind = 13
	kindBool      kind = 14
	kindFloat     kind = 15
)

// String names k; header never produces a kind above kindFloat. A switch
// rather than an array of names: constant text costs nothing in the
// binary's data segment.
func (k kind) String() string {
	switch k {
	case kindExtended:
		return "extended"
	case kindPointer:
		return "pointer"
	case kindString:
		return "string"
	case kindDouble:
		return "double"
	case kindBytes:
		return "bytes"
	case kindUint16:
		return "uint16"
	case kindUint32:
		return "uint32"
	case kindMap:
		return "map"
	case kindInt32:
		return "int32"
	case kindUint64:
		return "uint64"
	case kindUint128:
		return "uint128"
	case kindArray:
		return "array"
	case kindContainer:
		return "data cache container"
	case kindEndMarker:
		return "end marker"
	case kindBool:
		return "boolean"
	}
	return "float"
}

// Limits that keep a hostile file from costing unbounded time or memory.
// GeoIP records nest three levels deep and hold a few hundred values and a
// few KiB of text, so honest files stay far below them.
const (
	maxDepth = 32      // nested maps and arrays
	maxItems = 1 << 16 // values decoded or skipped per lookup
	maxBytes = 4 << 20 // string and bytes payload decoded per lookup
)

// section is the data section, or the metadata section; pointers and offsets
// are relative to its start. Offsets are ints that are always checked to lie
// inside the section, so they fit even on 32-bit platforms.
type section []byte

// errAt describes a problem found at offset off of a section.
func errAt(off int, format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", off, fmt.Sprintf(format, args...))
}

// header is a decoded control byte (with its extended type and size bytes).
type header struct {
	kind kind
	// size is the payload length in bytes, the number of entries of a map
	// or array, the target of a pointer, or the value of a boolean.
	size int
	// start is the offset of the payload (of the first entry for a map or an
	// array, of the next field for a pointer or a boolean).
	start int
}

// end returns the offset just past a scalar's payload.
func (h header) end() int {
	if h.kind == kindPointer || h.kind == kindBool {
		return h.start
	}
	return h.start + h.size
}

// header decodes the field at off and checks everything that can be checked
// without looking at the payload: that the payload of a scalar lies inside the
// section and has a legal length for its type, that a map or an array does
// not claim more entries than there are bytes left, and that a pointer points
// inside the section. Types that may not appear as values (end marker, data
// cache container, unknown extended types) are errors.
func (s section) header(off int) (header, error) {
	if uint(off) >= uint(len(s)) {
		return header{}, errAt(off, "outside the %d-byte section", len(s))
	}
	// The common fields of GeoIP records, short strings and small maps,
	// take the fast path; everything else is checked in full below.
	if c := s[off]; c&0x1f < 29 {
		size, pos := int(c&0x1f), off+1
		switch kind(c >> 5) {
		case kindString:
			if size <= len(s)-pos {
				return header{kind: kindString, size: size, start: pos}, nil
			}
		case kindMap:
			if size <= (len(s)-pos)/2 {
				return header{kind: kindMap, size: size, start: pos}, nil
			}
		}
	}
	ctrl := s[off]
	pos := off + 1
	k := kind(ctrl >> 5)
	switch k {
	case kindPointer:
		return s.pointer(off, ctrl, pos)
	case kindExtended:
		if pos >= len(s) {
			return header{}, errAt(off, "extended type byte is missing")
		}
		ext := s[pos]
		pos++
		if ext == 0 || ext > uint8(kindFloat-7) {
			return header{}, errAt(off, "unknown extended type %d", int(ext)+7)
		}
		k = kind(ext) + 7
	}
	size := int(ctrl & 0x1f)
	if size >= 29 {
		n := size - 28 // 29, 30, 31: one, two or three more size bytes
		if n > len(s)-pos {
			return header{}, errAt(off, "size bytes run past the end of the section")
		}
		v := 0
		for _, b := range s[pos : pos+n] {
			v = v<<8 | int(b)
		}
		pos += n
		size = sizeBase[n] + v
	}
	h := header{kind: k, size: size, start: pos}
	rest := len(s) - pos
	switch k {
	case kindString, kindBytes:
	case kindMap:
		// Every pair takes at least a byte for its key and one for its value.
		if size > rest/2 {
			return header{}, errAt(off, "map claims %d pairs but only %d bytes remain", size, rest)
		}
		return h, nil
	case kindArray:
		if size > rest {
			return header{}, errAt(off, "array claims %d values but only %d bytes remain", size, rest)
		}
		return h, nil
	case kindBool:
		if size > 1 {
			return header{}, errAt(off, "boolean with value %d", size)
		}
		return h, nil
	case kindContainer, kindEndMarker:
		return header{}, errAt(off, "unexpected %s", k)
	default:
		// Numbers have a fixed width, of which integers may use less.
		w := maxWidth[k]
		if size > w || size != w && (k == kindDouble || k == kindFloat) {
			return header{}, errAt(off, "%s with a %d-byte payload", k, size)
		}
	}
	if size > rest {
		return header{}, errAt(off, "%d-byte %s runs past the end of the section (%d bytes remain)", size, k, rest)
	}
	return h, nil
}

// sizeBase[n] is the size that n extra size bytes count from.
var sizeBase = [4]int{1: 29, 2: 285, 3: 65821}

// maxWidth is the payload width of each number type.
var maxWidth = [...]int{
	kindDouble: 8, kindUint16: 2, kindUint32: 4, kindInt32: 4,
	kindUint64: 8, kindUint128: 16, kindFloat: 4,
}

// pointer decodes a pointer field (001SSVVV) whose control byte is at off and
// whose value bytes start at pos.
func (s section) pointer(off int, ctrl byte, pos int) (header, error) {
	ss := ctrl >> 3 & 3
	n := int(ss) + 1
	if n > len(s)-pos {
		return header{}, errAt(off, "pointer runs past the end of the section")
	}
	b := s[pos : pos+n]
	high := uint32(ctrl & 7)
	var v uint32
	switch ss {
	case 0:
		v = high<<8 | uint32(b[0])
	case 1:
		v = (high<<16 | uint32(b[0])<<8 | uint32(b[1])) + 2048
	case 2:
		v = (high<<24 | uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])) + 526336
	default:
		v = binary.BigEndian.Uint32(b)
	}
	if uint64(v) >= uint64(len(s)) {
		return header{}, errAt(off, "pointer to %d is outside the %d-byte section", v, len(s))
	}
	return header{kind: kindPointer, size: int(v), start: pos + n}, nil
}

// follow returns the header of the field that pointer p (found at off)
// points to. The specification forbids pointers to pointers, which rules out
// pointer chains and cycles without containers; cycles through containers are
// stopped by maxDepth.
func (s section) follow(p header, off int) (header, error) {
	t, err := s.header(p.size)
	if err != nil {
		return header{}, fmt.Errorf("following pointer at offset %d: %w", off, err)
	}
	if t.kind == kindPointer {
		return header{}, errAt(off, "pointer to another pointer at %d", p.size)
	}
	return t, nil
}

// resolve returns the header of the field at off, following it if it is a
// pointer.
func (s section) resolve(off int) (header, error) {
	h, err := s.header(off)
	if err != nil || h.kind != kindPointer {
		return h, err
	}
	return s.follow(h, off)
}

// key returns the map key at off (a string, possibly behind a pointer) and
// the offset of the value that follows it.
func (s section) key(off int) ([]byte, int, error) {
	// Fast path: a short string, or a one- or two-byte pointer to one, as
	// MaxMind's writer stores keys.
	if uint(off) < uint(len(s)) {
		c := s[off]
		next, at := off, off
		switch {
		case c>>5 == byte(kindPointer) && c&0x18 == 0 && off+1 < len(s):
			at, next = int(c&7)<<8|int(s[off+1]), off+2
		case c>>5 == byte(kindPointer) && c&0x18 == 0x08 && off+2 < len(s):
			at, next = (int(c&7)<<16|int(s[off+1])<<8|int(s[off+2]))+2048, off+3
		}
		if uint(at) < uint(len(s)) {
			if t := s[at]; t>>5 == byte(kindString) && t&0x1f < 29 {
				start := at + 1
				end := start + int(t&0x1f)
				if end <= len(s) {
					if next == off {
						next = end
					}
					return s[start:end], next, nil
				}
			}
		}
	}
	h, err := s.header(off)
	if err != nil {
		return nil, 0, err
	}
	next := h.end()
	if h.kind == kindPointer {
		if h, err = s.follow(h, off); err != nil {
			return nil, 0, err
		}
	}
	if h.kind != kindString {
		return nil, 0, errAt(off, "map key is a %s, not a string", h.kind)
	}
	return s[h.start:h.end()], next, nil
}

// skip returns the offset just past the value at off without decoding it:
// pointers are not followed and containers are walked with a counter of
// pending values instead of recursion, so skipping costs no allocation and
// no stack, whatever the nesting. budget counts the values walked.
func (s section) skip(off int, budget *int) (int, error) {
	for pending := 1; pending > 0; pending-- {
		if *budget <= 0 {
			return 0, errAt(off, "record has more than %d values", maxItems)
		}
		*budget--
		// Fast path for the fields of GeoIP records: pointers, short
		// strings, small maps and arrays and integers, whose only check
		// needed here is that they end inside the section.
		if uint(off) < uint(len(s)) {
			c := s[off]
			size := int(c & 0x1f)
			switch kind(c >> 5) {
			case kindPointer:
				if n := off + 2 + int(c>>3&3); n <= len(s) {
					off = n
					continue
				}
			case kindString, kindBytes:
				if size < 29 && off+1+size <= len(s) {
					off += 1 + size
					continue
				}
			case kindUint16, kindUint32:
				if size <= 2<<(c>>5-byte(kindUint16)) && off+1+size <= len(s) {
					off += 1 + size
					continue
				}
			case kindDouble:
				if size == 8 && off+9 <= len(s) {
					off += 9
					continue
				}
			case kindMap:
				if size < 29 && 2*size <= len(s)-off-1-(pending-1) {
					pending += 2 * size
					off++
					continue
				}
			case kindExtended:
				if size >= 29 || off+2 > len(s) {
					break
				}
				switch kind(s[off+1]) + 7 {
				case kindArray:
					if size <= len(s)-off-2-(pending-1) {
						pending += size
						off += 2
						continue
					}
				case kindBool:
					if size <= 1 {
						off += 2
						continue
					}
				case kindInt32, kindFloat:
					if size <= 4 && (size == 4 || s[off+1] != byte(kindFloat-7)) && off+2+size <= len(s) {
						off += 2 + size
						continue
					}
				case kindUint64:
					if size <= 8 && off+2+size <= len(s) {
						off += 2 + size
						continue
					}
				}
			}
		}
		h, err := s.header(off)
		if err != nil {
			return 0, err
		}
		switch h.kind {
		case kindMap, kindArray:
			n := h.size
			if h.kind == kindMap {
				n *= 2
			}
			// Every pending value takes at least one byte.
			if n > len(s)-h.start-(pending-1) {
				return 0, errAt(off, "%s of %d entries does not fit in the remaining %d bytes", h.kind, h.size, len(s)-h.start)
			}
			pending += n
			off = h.start
		default:
			off = h.end()
		}
	}
	return off, nil
}

// mapValue scans the map at off (possibly behind a pointer) for key and
// returns the offset of its value. Keys are compared in place and the other
// values are skipped, so a lookup of one path allocates nothing.
func (s section) mapValue(off int, key string, budget *int) (int, bool, error) {
	h, err := s.resolve(off)
	if err != nil {
		return 0, false, err
	}
	if h.kind != kindMap {
		return 0, false, errAt(off, "looking for %q in a %s, not a map", key, h.kind)
	}
	return s.mapLookup(h, key, budget)
}

// mapLookup is mapValue for the map with header h.
func (s section) mapLookup(h header, key string, budget *int) (int, bool, error) {
	pos := h.start
	for range h.size {
		k, next, err := s.key(pos)
		if err != nil {
			return 0, false, err
		}
		if string(k) == key {
			return next, true, nil
		}
		if pos, err = s.skip(next, budget); err != nil {
			return 0, false, err
		}
	}
	return 0, false, nil
}

// isoCode returns rec[field].iso_code as stored (nil when either key is
// absent).
func (s section) isoCode(rec int, field string, budget *int) ([]byte, error) {
	off, ok, err := s.mapValue(rec, field, budget)
	if err != nil || !ok {
		return nil, err
	}
	return s.isoOf(off, budget)
}

// subdivisionCode returns rec.subdivisions[0].iso_code as stored, or nil
// when any step is absent.
func (s section) subdivisionCode(rec int, budget *int) ([]byte, error) {
	off, ok, err := s.mapValue(rec, "subdivisions", budget)
	if err != nil || !ok {
		return nil, err
	}
	h, err := s.resolve(off)
	if err != nil {
		return nil, err
	}
	if h.kind != kindArray {
		return nil, errAt(off, "subdivisions is a %s, not an array", h.kind)
	}
	if h.size == 0 {
		return nil, nil
	}
	return s.isoOf(h.start, budget)
}

// isoOf returns the iso_code of the map at off as stored, or nil when it has
// none.
func (s section) isoOf(off int, budget *int) ([]byte, error) {
	off, ok, err := s.mapValue(off, "iso_code", budget)
	if err != nil || !ok {
		return nil, err
	}
	h, err := s.resolve(off)
	if err != nil {
		return nil, err
	}
	if h.kind != kindString {
		return nil, errAt(off, "iso_code is a %s, not a string", h.kind)
	}
	return s[h.start:h.end():h.end()], nil
}

// decoder decodes values into Go values, or, with build false, only checks
// that they decode (Verify), which allocates nothing. items and bytes are the
// remaining budget.
type decoder struct {
	s     section
	build bool
	items int
	bytes int
}

// value decodes the value at off and returns it with the offset just past it
// (past the pointer, for a pointer). depth counts the enclosing containers.
func (d *decoder) value(off, depth int) (any, int, error) {
	h, err := d.s.header(off)
	if err != nil {
		return nil, 0, err
	}
	if h.kind != kindPointer {
		return d.body(h, off, depth)
	}
	t, err := d.s.follow(h, off)
	if err != nil {
		return nil, 0, err
	}
	v, _, err := d.body(t, h.size, depth)
	return v, h.start, err
}

// body decodes the field with header h found at off.
func (d *decoder) body(h header, off, depth int) (any, int, error) {
	if d.items <= 0 {
		return nil, 0, errAt(off, "record has more than %d values", maxItems)
	}
	d.items--
	switch h.kind {
	case kindMap:
		return d.mapBody(h, off, depth)
	case kindArray:
		return d.arrayBody(h, off, depth)
	case kindBool:
		if !d.build {
			return nil, h.end(), nil
		}
		return h.size == 1, h.end(), nil
	}
	p := d.s[h.start:h.end()]
	switch h.kind {
	case kindString, kindBytes:
		// Shared strings behind pointers can make a small file decode into
		// a lot of text; the byte budget bounds that.
		if d.bytes < len(p) {
			return nil, 0, errAt(off, "record holds more than %d bytes of text", maxBytes)
		}
		d.bytes -= len(p)
		if h.kind == kindString && !utf8.Valid(p) {
			return nil, 0, errAt(off, "string is not valid UTF-8")
		}
	}
	if !d.build {
		return nil, h.end(), nil
	}
	var v any
	switch h.kind {
	case kindString:
		v = string(p)
	case kindBytes:
		v = append([]byte{}, p...)
	case kindDouble:
		v = math.Float64frombits(binary.BigEndian.Uint64(p))
	case kindFloat:
		v = float64(math.Float32frombits(binary.BigEndian.Uint32(p)))
	case kindUint16, kindUint32, kindUint64:
		v = uintBE(p)
	case kindInt32:
		// Two's complement of the 32-bit value; a shorter payload has
		// leading zero bytes, so it is non-negative.
		v = int64(int32(uint32(uintBE(p))))
	case kindUint128:
		v = new(big.Int).SetBytes(p)
	}
	return v, h.end(), nil
}

// containerCap bounds the capacity preallocated for a map or an array: the
// count in the file is only known to fit in the remaining bytes, which for a
// large database is still far too many to trust.
const containerCap = 32

func (d *decoder) mapBody(h header, off, depth int) (any, int, error) {
	if depth >= maxDepth {
		return nil, 0, errAt(off, "maps and arrays nested more than %d deep", maxDepth)
	}
	var m map[string]any
	if d.build {
		m = make(map[string]any, min(h.size, containerCap))
	}
	pos := h.start
	for range h.size {
		k, next, err := d.s.key(pos)
		if err != nil {
			return nil, 0, err
		}
		if d.items <= 0 || d.bytes < len(k) {
			return nil, 0, errAt(pos, "record has more than %d values or %d bytes of text", maxItems, maxBytes)
		}
		d.items--
		d.bytes -= len(k)
		if !utf8.Valid(k) {
			return nil, 0, errAt(pos, "map key is not valid UTF-8")
		}
		v, next, err := d.value(next, depth+1)
		if err != nil {
			return nil, 0, err
		}
		if d.build {
			m[string(k)] = v
		}
		pos = next
	}
	if !d.build {
		return nil, pos, nil
	}
	return m, pos, nil
}

func (d *decoder) arrayBody(h header, off, depth int) (any, int, error) {
	if depth >= maxDepth {
		return nil, 0, errAt(off, "maps and arrays nested more than %d deep", maxDepth)
	}
	var a []any
	if d.build {
		a = make([]any, 0, min(h.size, containerCap))
	}
	pos := h.start
	for range h.size {
		v, next, err := d.value(pos, depth+1)
		if err != nil {
			return nil, 0, err
		}
		if d.build {
			a = append(a, v)
		}
		pos = next
	}
	if !d.build {
		return nil, pos, nil
	}
	return a, pos, nil
}

// uintBE returns the big-endian unsigned integer p of at most 8 bytes.
func uintBE(p []byte) uint64 {
	var v uint64
	for _, b := range p {
		v = v<<8 | uint64(b)
	}
	return v
}
