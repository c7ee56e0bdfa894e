package mmdb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// record returns the left (bit 0) or right (bit 1) record of node, which must
// be below nodeCount: FromBytes checked that nodeCount nodes fit in the tree,
// so the offsets are in range and fit in an int.
func (r *Reader) record(node uint32, bit byte) uint32 {
	switch r.recordSize {
	case 24:
		return read24(r.tree, int(node)*6+int(bit)*3)
	case 28:
		return read28(r.tree, int(node)*7, uint32(bit))
	default:
		return read32(r.tree, int(node)*8+int(bit)*4)
	}
}

// read24, read28 and read32 read one record of each size; they are small
// enough to be inlined into the loops of walk.
func read24(t []byte, o int) uint32 {
	b := t[o : o+3]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}

// read28 reads record bit (0 or 1) of the node at o. The middle byte holds
// the top four bits of both records: the high nibble belongs to the left
// one, the low nibble to the right one. Reading the four bytes at o+3*bit
// gets either record without a branch on the (unpredictable) bit.
func read28(t []byte, o int, bit uint32) uint32 {
	x := binary.BigEndian.Uint32(t[o+int(bit)*3:])
	left := x>>8 | x&0xf0<<20
	right := x & 0x0fffffff
	if bit == 0 {
		return left
	}
	return right
}

func read32(t []byte, o int) uint32 {
	return binary.BigEndian.Uint32(t[o:])
}

// walk follows the bits of the address hi:lo (big-endian halves) from bit
// number bit, starting at node, until it leaves the tree or runs out of bits,
// and returns the last record value with the number of bits consumed. There
// is one loop per record size because this is the hot path of every lookup.
func (r *Reader) walk(node uint32, hi, lo uint64, bit int) (uint32, int) {
	return r.walkTo(node, hi, lo, bit, 128)
}

// walkTo is walk that stops after bit number stop-1.
func (r *Reader) walkTo(node uint32, hi, lo uint64, bit, stop int) (uint32, int) {
	t, n := r.tree, r.nodeCount
	switch r.recordSize {
	case 24:
		for ; bit < stop && node < n; bit++ {
			node = read24(t, int(node)*6+int(bitAt(hi, lo, bit))*3)
		}
	case 28:
		for ; bit < stop && node < n; bit++ {
			node = read28(t, int(node)*7, bitAt(hi, lo, bit))
		}
	default:
		for ; bit < stop && node < n; bit++ {
			node = read32(t, int(node)*8+int(bitAt(hi, lo, bit))*4)
		}
	}
	return node, bit
}

// bitAt returns bit number i (0 is the most significant) of hi:lo.
func bitAt(hi, lo uint64, i int) uint32 {
	if i < 64 {
		return uint32(hi>>(63-i)) & 1
	}
	return uint32(lo>>(127-i)) & 1
}

// findIPv4Start follows 96 zero bits from the root of an IPv6 tree: IPv4
// addresses live in ::/96, so every IPv4 lookup would repeat that walk. The
// walk may end early at a data or "no data" record, which then answers every
// IPv4 lookup; the second result is the number of bits it took.
func (r *Reader) findIPv4Start() (uint32, int) {
	if r.meta.IPVersion == 4 {
		return 0, 0
	}
	node, i := uint32(0), 0
	for ; i < 96 && node < r.nodeCount; i++ {
		node = r.record(node, 0)
	}
	return node, i
}

var errInvalidAddr = errors.New("mmdb: invalid IP address")

// find walks the search tree for ip and returns the data-section offset of
// its record, or false when the database has no data for ip.
func (r *Reader) find(ip netip.Addr) (int, bool, error) {
	off, _, ok, err := r.findNetwork(ip)
	return off, ok, err
}

// findNetwork is find that also returns the length of the network ip is in,
// counted in the tree (so in IPv6 bits when an IPv4 address is looked up in
// an IPv6 tree).
func (r *Reader) findNetwork(ip netip.Addr) (int, int, bool, error) {
	if !ip.IsValid() {
		return 0, 0, false, errInvalidAddr
	}
	if r.closed.Load() {
		return 0, 0, false, ErrClosed
	}
	// An IPv4-mapped address is an IPv4 address: look it up in the IPv4
	// subtree, whether or not the database aliases ::ffff:0:0/96 to it.
	ip = ip.Unmap()
	var node uint32
	var bits int
	if ip.Is4() {
		a := ip.As4()
		lo := uint64(binary.BigEndian.Uint32(a[:]))
		switch {
		case r.meta.IPVersion == 4:
			// In an IPv4 tree the address takes the last 32 of the 128
			// bits the walk counts.
			node, bits = r.walkCached(&r.v4Nodes, 0, 0, lo, 96, uint32(lo)>>16)
			bits -= 96
		case r.ipv4Start < r.nodeCount:
			node, bits = r.walkCached(&r.v4Nodes, r.ipv4Start, 0, lo, 96, uint32(lo)>>16)
		default:
			node, bits = r.ipv4Start, r.ipv4Depth
		}
	} else {
		if r.meta.IPVersion == 4 {
			return 0, 0, false, nil
		}
		a := ip.As16()
		hi := binary.BigEndian.Uint64(a[:8])
		node, bits = r.walkCached(&r.v6Nodes, 0, hi, binary.BigEndian.Uint64(a[8:]), 0, uint32(hi>>32))
	}
	switch {
	case node == r.nodeCount:
		return 0, bits, false, nil
	case node < r.nodeCount:
		return 0, 0, false, corrupt("search tree for %s is deeper than the address", ip)
	}
	off, err := r.dataOffset(node)
	if err != nil {
		return 0, 0, false, corrupt("search tree for %s: %v", ip, err)
	}
	return off, bits, true, nil
}

// dataOffset converts a record value above nodeCount into an offset in the
// data section. Values nodeCount+1 to nodeCount+15 point into the separator.
func (r *Reader) dataOffset(v uint32) (int, error) {
	d := uint64(v) - uint64(r.nodeCount)
	if d < 16 {
		return 0, fmt.Errorf("record value %d points into the separator after the tree", v)
	}
	if d-16 >= uint64(len(r.data)) {
		return 0, fmt.Errorf("record value %d points %d bytes into a %d-byte data section", v, d-16, len(r.data))
	}
	return int(d - 16), nil
}

// walkCached is walk for an address whose next 16 (IPv4) or 32 (IPv6) bits
// from bit are key: the node they lead to comes from c when it is there.
func (r *Reader) walkCached(c *nodeCache, node uint32, hi, lo uint64, bit int, key uint32) (uint32, int) {
	stop := bit + c.bits
	if n, ok := c.get(key); ok {
		return r.walkTo(n, hi, lo, stop, 128)
	}
	n, b := r.walkTo(node, hi, lo, bit, stop)
	if b == stop && n < r.nodeCount {
		c.put(key, n)
		return r.walkTo(n, hi, lo, stop, 128)
	}
	return n, b
}
