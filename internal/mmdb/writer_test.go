package mmdb

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

// This file is a small MaxMind DB writer for the tests, written from the
// specification like the reader. Go values map to field types as follows:
// string, []byte, float64 (double), float32 (float), u16, u32, u64, i32,
// *big.Int (uint128), bool, map[string]any, []any.

type (
	u16 uint16
	u32 uint32
	u64 uint64
	i32 int32
)

// network is one (prefix → record) pair; later pairs override earlier ones.
type network struct {
	prefix netip.Prefix
	record any
}

type writerOptions struct {
	ipVersion  int // 4 or 6
	recordSize int // 24, 28 or 32
	// aliasIPv4 makes ::ffff:0:0/96 and 2002::/16 share the IPv4 subtree
	// at ::/96, as MaxMind's databases do (IPv6 only).
	aliasIPv4 bool
	// dedup stores repeated strings, maps and arrays once and points to
	// them, as MaxMind's writer does.
	dedup bool
	// meta edits the metadata map before it is encoded.
	meta func(map[string]any)
	// breadthFirst numbers the nodes level by level rather than depth
	// first: a layout with poor locality, which lookups must not mind.
	breadthFirst bool
}

// trie nodes hold two slots, each nil (no data), a *trieNode or a *leaf.
type trieNode struct{ kids [2]any }

type leaf struct{ record any }

func bitOf(a []byte, i int) int { return int(a[i/8] >> (7 - i%8) & 1) }

// insert places a leaf for the first plen bits of a.
func (n *trieNode) insert(a []byte, plen int, l *leaf) {
	if plen == 0 {
		n.kids = [2]any{l, l}
		return
	}
	p, b := n.slotAt(a, plen)
	p.kids[b] = l
}

// slotAt returns the node holding the slot for the first plen (> 0) bits of
// a, creating nodes on the way. A leaf met on the way is split into a node
// whose halves both hold it, so that a more specific network overrides part
// of a larger one.
func (n *trieNode) slotAt(a []byte, plen int) (*trieNode, int) {
	for i := 0; i < plen-1; i++ {
		b := bitOf(a, i)
		next, ok := n.kids[b].(*trieNode)
		if !ok {
			next = &trieNode{kids: [2]any{n.kids[b], n.kids[b]}}
			n.kids[b] = next
		}
		n = next
	}
	return n, bitOf(a, plen-1)
}

// buildDB returns a database holding nets.
func buildDB(t testing.TB, o writerOptions, nets []network) []byte {
	t.Helper()
	root := &trieNode{}
	for _, nw := range nets {
		p := nw.prefix.Masked()
		var a []byte
		plen := p.Bits()
		switch {
		case o.ipVersion == 4 && p.Addr().Is4():
			a4 := p.Addr().As4()
			a = a4[:]
		case o.ipVersion == 4:
			t.Fatalf("IPv6 network %s in an IPv4 database", p)
		case p.Addr().Is4():
			a16 := [16]byte{}
			a4 := p.Addr().As4()
			copy(a16[12:], a4[:])
			a, plen = a16[:], plen+96
		default:
			a16 := p.Addr().As16()
			a = a16[:]
		}
		root.insert(a, plen, &leaf{nw.record})
	}
	if o.aliasIPv4 {
		zero := make([]byte, 16)
		n, b := root.slotAt(zero, 96)
		v4 := n.kids[b]
		mapped := netip.MustParseAddr("::ffff:0:0").As16()
		n, b = root.slotAt(mapped[:], 96)
		n.kids[b] = v4
		sixToFour := netip.MustParseAddr("2002::").As16()
		n, b = root.slotAt(sixToFour[:], 16)
		n.kids[b] = v4
	}

	// Number the nodes depth first (preorder), as MaxMind's writers do, so
	// that a subtree's nodes lie together in the file; o.breadthFirst
	// numbers them level by level instead. Shared subtrees get one number.
	ids := map[*trieNode]uint32{root: 0}
	order := []*trieNode{root}
	if o.breadthFirst {
		for i := 0; i < len(order); i++ {
			for _, k := range order[i].kids {
				if c, ok := k.(*trieNode); ok {
					if _, seen := ids[c]; !seen {
						ids[c] = uint32(len(order))
						order = append(order, c)
					}
				}
			}
		}
	} else {
		stack := []*trieNode{root}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for i := 1; i >= 0; i-- {
				if c, ok := n.kids[i].(*trieNode); ok {
					if _, seen := ids[c]; !seen {
						ids[c] = 0 // numbered when popped
						stack = append(stack, c)
					}
				}
			}
			if n != root {
				ids[n] = uint32(len(order))
				order = append(order, n)
			}
		}
	}
	nodeCount := uint32(len(order))
	e := newEncoder(o.dedup)
	records := make([]uint32, 0, 2*len(order))
	for _, n := range order {
		for _, k := range n.kids {
			switch k := k.(type) {
			case nil:
				records = append(records, nodeCount)
			case *trieNode:
				records = append(records, ids[k])
			case *leaf:
				records = append(records, nodeCount+16+uint32(e.record(k.record)))
			}
		}
	}
	tree := encodeTree(t, o.recordSize, records)
	meta := standardMeta(o.ipVersion, o.recordSize, nodeCount)
	if o.meta != nil {
		o.meta(meta)
	}
	return assemble(tree, e.buf, meta)
}

// standardMeta returns the metadata map of a database with the given shape.
func standardMeta(ipVersion, recordSize int, nodeCount uint32) map[string]any {
	return map[string]any{
		"binary_format_major_version": u16(2),
		"binary_format_minor_version": u16(0),
		"build_epoch":                 u64(1_700_000_000),
		"database_type":               "OpenFlare-Test-City",
		"description":                 map[string]any{"en": "test database", "de": "Testdatenbank"},
		"ip_version":                  u16(ipVersion),
		"languages":                   []any{"en", "de"},
		"node_count":                  u32(nodeCount),
		"record_size":                 u16(recordSize),
	}
}

// rawDB returns an IPv4 database with 24-bit records whose tree is given
// directly as record values (two per node) and whose data section is data.
func rawDB(t testing.TB, records []uint32, data []byte, edit func(map[string]any)) []byte {
	t.Helper()
	meta := standardMeta(4, 24, uint32(len(records)/2))
	if edit != nil {
		edit(meta)
	}
	return assemble(encodeTree(t, 24, records), data, meta)
}

// tinyDB returns an IPv4 database with one node whose two records both
// point to offset 0 of data, so every IPv4 address finds the value there.
func tinyDB(t testing.TB, data []byte) []byte {
	t.Helper()
	return rawDB(t, []uint32{17, 17}, data, nil)
}

// encodeTree lays out records (two per node) with the given record size.
func encodeTree(t testing.TB, size int, records []uint32) []byte {
	t.Helper()
	for _, v := range records {
		if size < 32 && v >= 1<<size {
			t.Fatalf("record value %d does not fit in %d bits", v, size)
		}
	}
	var b []byte
	for i := 0; i+1 < len(records); i += 2 {
		l, r := records[i], records[i+1]
		switch size {
		case 24:
			b = append(b, byte(l>>16), byte(l>>8), byte(l), byte(r>>16), byte(r>>8), byte(r))
		case 28:
			b = append(b, byte(l>>16), byte(l>>8), byte(l), byte(l>>24)<<4|byte(r>>24)&0x0f, byte(r>>16), byte(r>>8), byte(r))
		case 32:
			b = binary.BigEndian.AppendUint32(b, l)
			b = binary.BigEndian.AppendUint32(b, r)
		default:
			t.Fatalf("record size %d", size)
		}
	}
	return b
}

// assemble joins a tree, the separator, a data section and the metadata.
func assemble(tree, data []byte, meta any) []byte {
	b := slices.Concat(tree, make([]byte, 16), data, []byte(metadataMarker))
	m := newEncoder(false)
	m.value(meta)
	return append(b, m.buf...)
}

type encoder struct {
	buf   []byte
	cache map[string]int // pointer-free encoding → offset, when deduplicating
	byMap map[uintptr]int
}

func newEncoder(dedup bool) *encoder {
	e := &encoder{}
	if dedup {
		e.cache, e.byMap = map[string]int{}, map[uintptr]int{}
	}
	return e
}

// record writes v once and returns its offset; equal records share it
// when deduplicating.
func (e *encoder) record(v any) int {
	// Networks usually share their record's map itself: remember the
	// offset of each map to save re-encoding it for every network.
	var id uintptr
	if m, ok := v.(map[string]any); ok && e.cache != nil {
		id = reflect.ValueOf(m).Pointer()
		if off, ok := e.byMap[id]; ok {
			return off
		}
	}
	key := string(plain(v))
	off, ok := e.cache[key]
	if !ok {
		off = len(e.buf)
		if e.cache != nil {
			e.cache[key] = off
		}
		e.write(v)
	}
	if id != 0 {
		e.byMap[id] = off
	}
	return off
}

// value writes v, or a pointer to an earlier copy of it.
func (e *encoder) value(v any) {
	switch v := v.(type) {
	case string, map[string]any, []any:
		if s, ok := v.(string); ok && len(s) < 3 {
			break
		}
		if e.cache != nil {
			key := string(plain(v))
			if off, ok := e.cache[key]; ok {
				e.buf = appendPointer(e.buf, off)
				return
			}
			e.cache[key] = len(e.buf)
		}
	}
	e.write(v)
}

// plain returns the encoding of v without pointers, which identifies it.
func plain(v any) []byte {
	e := newEncoder(false)
	e.write(v)
	return e.buf
}

func (e *encoder) write(v any) {
	b := e.buf
	switch v := v.(type) {
	case string:
		b = append(appendHeader(b, kindString, len(v)), v...)
	case []byte:
		b = append(appendHeader(b, kindBytes, len(v)), v...)
	case float64:
		b = binary.BigEndian.AppendUint64(appendHeader(b, kindDouble, 8), math.Float64bits(v))
	case float32:
		b = binary.BigEndian.AppendUint32(appendHeader(b, kindFloat, 4), math.Float32bits(v))
	case u16:
		b = appendUint(b, kindUint16, uint64(v))
	case u32:
		b = appendUint(b, kindUint32, uint64(v))
	case u64:
		b = appendUint(b, kindUint64, uint64(v))
	case i32:
		b = appendUint(b, kindInt32, uint64(uint32(v)))
	case *big.Int:
		p := v.Bytes()
		b = append(appendHeader(b, kindUint128, len(p)), p...)
	case bool:
		n := 0
		if v {
			n = 1
		}
		b = appendHeader(b, kindBool, n)
	case map[string]any:
		e.buf = appendHeader(b, kindMap, len(v))
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			e.value(k)
			e.value(v[k])
		}
		return
	case []any:
		e.buf = appendHeader(b, kindArray, len(v))
		for _, x := range v {
			e.value(x)
		}
		return
	default:
		panic(fmt.Sprintf("writer: unsupported %T", v))
	}
	e.buf = b
}

// appendUint writes v in as few bytes as possible; zero has no payload.
func appendUint(b []byte, k kind, v uint64) []byte {
	var p []byte
	for ; v != 0; v >>= 8 {
		p = append([]byte{byte(v)}, p...)
	}
	return append(appendHeader(b, k, len(p)), p...)
}

func appendHeader(b []byte, k kind, size int) []byte {
	ctrl := byte(k) << 5
	var ext []byte
	if k > 7 {
		ctrl, ext = 0, []byte{byte(k - 7)}
	}
	switch {
	case size < 29:
		return append(append(b, ctrl|byte(size)), ext...)
	case size < 285:
		return append(append(append(b, ctrl|29), ext...), byte(size-29))
	case size < 65821:
		s := size - 285
		return append(append(append(b, ctrl|30), ext...), byte(s>>8), byte(s))
	default:
		s := size - 65821
		return append(append(append(b, ctrl|31), ext...), byte(s>>16), byte(s>>8), byte(s))
	}
}

// appendPointer writes a pointer to off in the shortest form.
func appendPointer(b []byte, off int) []byte {
	switch {
	case off < 2048:
		return append(b, 0x20|byte(off>>8), byte(off))
	case off < 2048+1<<19:
		v := off - 2048
		return append(b, 0x28|byte(v>>16), byte(v>>8), byte(v))
	case off < 526336+1<<27:
		v := off - 526336
		return append(b, 0x30|byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0x38), uint32(off))
	}
}
