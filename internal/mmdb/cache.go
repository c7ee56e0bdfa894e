package mmdb

import (
	"sync/atomic"
)

// codeCache is a direct-mapped cache from a record's offset to its
// country.iso_code when that is absent or two upper-case letters, as in
// every GeoIP database, shared by every goroutine without locks: each slot
// is one atomic word, (offset+1)<<32 | code, where code is the index of the
// code in upperPairs or noCode. A lookup that finds its record here skips
// the walk through the record (a City record has some twenty values before
// country.iso_code). Codes that are not two letters are not cached.
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

func (c *codeCache) get(off int) (string, bool) {
	v := c.slot(off).Load()
	if v>>32 != uint64(off)+1 {
		return "", false
	}
	i := int(v & 0xffff)
	if i == noCode {
		return "", true
	}
	return upperPairs[i : i+2], true
}

// put remembers code, the country.iso_code of the record at off as stored
// (nil when absent), when it is absent or two upper-case letters.
func (c *codeCache) put(off int, code []byte) {
	if uint64(off)+1 >= 1<<32 {
		return
	}
	i := noCode
	switch {
	case code == nil:
	case len(code) == 2 && code[0] >= 'A' && code[0] <= 'Z' && code[1] >= 'A' && code[1] <= 'Z':
		i = (int(code[0]-'A')*26 + int(code[1]-'A')) * 2
	default:
		return
	}
	c.slot(off).Store((uint64(off)+1)<<32 | uint64(i))
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
