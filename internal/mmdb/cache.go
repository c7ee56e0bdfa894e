package mmdb

import (
	"sync/atomic"
)

// codeCache is a direct-mapped cache from a record's offset to one of its
// ISO codes (country.iso_code, or subdivisions[0].iso_code) when that is
// absent or one to three upper-case letters and digits, as in every GeoIP
// database, shared by every goroutine without locks: each slot is one atomic
// word, (offset+1)<<32 | packed code (see packCode). A lookup that finds its
// record here skips the walk through the record (a City record has some
// twenty values before country.iso_code, and more before subdivisions).
type codeCache struct {
	slots []atomic.Uint64
}

const (
	codeCacheSize = 4096 // 32 KiB
	noCode        = 0xffff
)

func newCodeCache() codeCache {
	return codeCache{slots: make([]atomic.Uint64, codeCacheSize)}
}

// slot returns the slot of off. Records are tens to hundreds of bytes apart,
// so the low bits alone would use few slots: mix them first.
func (c *codeCache) slot(off int) *atomic.Uint64 {
	h := uint32(off) * 0x9e3779b1
	return &c.slots[h>>(32-12)]
}

// get returns the code cached for the record at off ("" when it has none).
func (c *codeCache) get(off int) (string, bool) {
	v := c.slot(off).Load()
	if v>>32 != uint64(off)+1 {
		return "", false
	}
	return unpackCode(uint16(v)), true
}

// put remembers code, as stored in the record at off (nil when absent),
// when packCode can pack it.
func (c *codeCache) put(off int, code []byte) {
	if uint64(off)+1 >= 1<<32 {
		return
	}
	p, ok := packCode(code)
	if !ok {
		return
	}
	c.slot(off).Store((uint64(off)+1)<<32 | uint64(p))
}

// codeDigit maps 0-9 and A-Z to 1-36 (0 is "no character").
func codeDigit(c byte) (uint16, bool) {
	switch {
	case c >= '0' && c <= '9':
		return uint16(c-'0') + 1, true
	case c >= 'A' && c <= 'Z':
		return uint16(c-'A') + 11, true
	}
	return 0, false
}

// packCode packs nil as noCode, and a code of one to three upper-case
// letters and digits as three base-37 digits, left-aligned (at most 50652).
func packCode(code []byte) (uint16, bool) {
	if code == nil {
		return noCode, true
	}
	if len(code) == 0 || len(code) > 3 {
		return 0, false
	}
	var v uint16
	for i := range 3 {
		var d uint16
		if i < len(code) {
			var ok bool
			if d, ok = codeDigit(code[i]); !ok {
				return 0, false
			}
		}
		v = v*37 + d
	}
	return v, true
}

const codeChars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"

// unpackCode returns the code packCode packed into v, without allocating:
// two letters from upperPairs, anything else through intern.
func unpackCode(v uint16) string {
	if v == noCode {
		return ""
	}
	var b [3]byte
	n := 0
	for _, d := range [3]uint16{v / (37 * 37), v / 37 % 37, v % 37} {
		if d == 0 {
			break
		}
		b[n] = codeChars[d-1]
		n++
	}
	if n == 2 && b[0] >= 'A' && b[1] >= 'A' {
		i := (int(b[0]-'A')*26 + int(b[1]-'A')) * 2
		return upperPairs[i : i+2]
	}
	return intern(b[:n])
}

// maxIntern is the length up to which strings returned by the path lookups
// are interned.
const maxIntern = 16

// internTab holds recently returned short strings, so that looking up a
// short value such as an ISO code allocates only the first time it is seen.
// It is direct-mapped by a hash of the contents and bounded: a collision
// replaces the older string.
var internTab [4096]atomic.Pointer[string]

// intern returns b as a string, from internTab when possible. b must be at
// most maxIntern bytes long.
func intern(b []byte) string {
	h := uint32(2166136261)
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	slot := &internTab[h>>(32-12)]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}

// nodeCache is a direct-mapped cache from the first bits of an address (16
// of an IPv4 address, 32 of an IPv6 one) to the node of the search tree they
// lead to, when that is a node: repeated clients from the same networks then
// skip the first steps of the tree walk, each a load that depends on the
// one before. Each slot is one atomic word, key<<32 | node+1 (node is below
// nodeCount, so node+1 fits).
type nodeCache struct {
	bits  int // 16 or 32
	slots []atomic.Uint64
}

const nodeCacheSize = 4096 // 32 KiB

func newNodeCache(bits int) nodeCache {
	return nodeCache{bits: bits, slots: make([]atomic.Uint64, nodeCacheSize)}
}

func (c *nodeCache) slot(key uint32) *atomic.Uint64 {
	return &c.slots[(key*0x9e3779b1)>>(32-12)]
}

func (c *nodeCache) get(key uint32) (uint32, bool) {
	v := c.slot(key).Load()
	if v>>32 != uint64(key) || uint32(v) == 0 {
		return 0, false
	}
	return uint32(v) - 1, true
}

func (c *nodeCache) put(key, node uint32) {
	c.slot(key).Store(uint64(key)<<32 | uint64(node+1))
}
