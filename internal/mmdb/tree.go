package mmdb

import (
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
		return read28(r.tree, int(node)*7, bit)
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

// read28 reads from the node at o. The middle byte holds the top four bits of
// both records: the high nibble belongs to the left one, the low nibble to
// the right one.
func read28(t []byte, o int, bit byte) uint32 {
	b := t[o : o+7]
	if bit == 0 {
		return uint32(b[3]&0xf0)<<20 | uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
	}
	return uint32(b[3]&0x0f)<<24 | uint32(b[4])<<16 | uint32(b[5])<<8 | uint32(b[6])
}

func read32(t []byte, o int) uint32 {
	b := t[o : o+4]
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// walk follows the bits of a from bit number bit, starting at node, until it
// leaves the tree or runs out of bits, and returns the last record value.
// There is one loop per record size because this is the hot path of every
// lookup.
func (r *Reader) walk(node uint32, a *[16]byte, bit int) uint32 {
	t, n := r.tree, r.nodeCount
	switch r.recordSize {
	case 24:
		for ; bit < 128 && node < n; bit++ {
			node = read24(t, int(node)*6+int(a[bit>>3]>>(7-bit&7)&1)*3)
		}
	case 28:
		for ; bit < 128 && node < n; bit++ {
			node = read28(t, int(node)*7, a[bit>>3]>>(7-bit&7)&1)
		}
	default:
		for ; bit < 128 && node < n; bit++ {
			node = read32(t, int(node)*8+int(a[bit>>3]>>(7-bit&7)&1)*4)
		}
	}
	return node
}

// findIPv4Start follows 96 zero bits from the root of an IPv6 tree: IPv4
// addresses live in ::/96, so every IPv4 lookup would repeat that walk. The
// walk may end early at a data or "no data" record, which then answers every
// IPv4 lookup.
func (r *Reader) findIPv4Start() uint32 {
	if r.meta.IPVersion == 4 {
		return 0
	}
	node := uint32(0)
	for i := 0; i < 96 && node < r.nodeCount; i++ {
		node = r.record(node, 0)
	}
	return node
}

var errInvalidAddr = errors.New("mmdb: invalid IP address")

// find walks the search tree for ip and returns the data-section offset of
// its record, or false when the database has no data for ip.
func (r *Reader) find(ip netip.Addr) (int, bool, error) {
	if !ip.IsValid() {
		return 0, false, errInvalidAddr
	}
	// An IPv4-mapped address is an IPv4 address: look it up in the IPv4
	// subtree, whether or not the database aliases ::ffff:0:0/96 to it.
	ip = ip.Unmap()
	a := ip.As16()
	node, bit := uint32(0), 0
	if ip.Is4() {
		node, bit = r.ipv4Start, 96
	} else if r.meta.IPVersion == 4 {
		return 0, false, nil
	}
	node = r.walk(node, &a, bit)
	switch {
	case node == r.nodeCount:
		return 0, false, nil
	case node < r.nodeCount:
		return 0, false, corrupt("search tree for %s is deeper than the address", ip)
	}
	off, err := r.dataOffset(node)
	if err != nil {
		return 0, false, corrupt("search tree for %s: %v", ip, err)
	}
	return off, true, nil
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
