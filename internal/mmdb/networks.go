package mmdb

import (
	"net/netip"
)

// Networks calls yield for every network that has a record, in address
// order, with the offset of its record, until yield returns false. It is the
// input of whole-database compilations such as the data plane's geo
// snapshot; Decode, DecodePath, StringAt and CodesAt read the record at an
// offset, and since networks share records, callers should decode each
// offset once.
//
// In an IPv6 tree the networks in ::/96 are reported as IPv4 networks, and
// the aliases of that subtree (MaxMind's databases also reach it from
// ::ffff:0:0/96 and 2002::/16) are skipped, so every IPv4 network is
// reported once. A network whose record is "no data" is not reported.
//
// A malformed tree ends the walk with an error wrapping ErrInvalidDatabase:
// a record that points outside the data section, a path longer than the
// address, or more node visits than the tree has nodes allows (subtrees
// shared through hostile pointers could otherwise multiply the work
// without bound). The walk allocates only its fixed stack.
func (r *Reader) Networks(yield func(network netip.Prefix, off Offset) bool) error {
	if r.closed.Load() {
		return ErrClosed
	}
	type frame struct {
		value  uint32 // a record value: a node, "no data" or data
		depth  int    // bits from the root, counted as in a 128-bit tree
		hi, lo uint64 // the network's address
	}
	n := r.nodeCount
	v6 := r.meta.IPVersion == 6
	start := 0
	if !v6 {
		// Count IPv4 trees in IPv6 bits too, as walk does.
		start = 96
	}
	// At most one pending sibling per level, plus the two children of
	// the node being expanded.
	stack := make([]frame, 1, 128+2)
	stack[0] = frame{value: 0, depth: start}
	// A tree has nodeCount nodes, each expanded once; the margin allows
	// writers that share a few subtrees.
	budget := 2*uint64(n) + 2
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch {
		case f.value == n:
			continue
		case f.value > n:
			off, err := r.dataOffset(f.value)
			if err != nil {
				return corrupt("search tree at %s: %v", prefixOf(f.hi, f.lo, f.depth, v6), err)
			}
			if !yield(prefixOf(f.hi, f.lo, f.depth, v6), Offset(off)) {
				return nil
			}
			continue
		}
		if v6 && f.value == r.ipv4Start && r.ipv4Depth == 96 && (f.depth != 96 || f.hi != 0 || f.lo>>32 != 0) {
			continue // an alias of the IPv4 subtree at ::/96
		}
		if f.depth >= 128 {
			return corrupt("search tree is deeper than the address at node %d", f.value)
		}
		if budget == 0 {
			return corrupt("search tree visits more nodes than it has (%d): it shares subtrees or has a cycle", n)
		}
		budget--
		right := frame{value: r.record(f.value, 1), depth: f.depth + 1, hi: f.hi, lo: f.lo}
		if f.depth < 64 {
			right.hi |= 1 << (63 - f.depth)
		} else {
			right.lo |= 1 << (127 - f.depth)
		}
		stack = append(stack, right, frame{value: r.record(f.value, 0), depth: f.depth + 1, hi: f.hi, lo: f.lo})
	}
	return nil
}

// prefixOf returns the network of depth bits at hi:lo, as an IPv4 network
// when it lies in ::/96 (of an IPv6 tree) or in an IPv4 tree.
func prefixOf(hi, lo uint64, depth int, v6 bool) netip.Prefix {
	if depth >= 96 && hi == 0 && lo>>32 == 0 || !v6 {
		a := uint32(lo)
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), depth-96)
	}
	var b [16]byte
	for i := range 8 {
		b[i] = byte(hi >> (56 - 8*i))
		b[8+i] = byte(lo >> (56 - 8*i))
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), depth)
}

// CountryNetworks calls yield for every network that has a record, as
// Networks does, with the upper-case country.iso_code and
// subdivisions[0].iso_code of its record ("" when absent), until yield
// returns false. Each distinct record is decoded once.
func (r *Reader) CountryNetworks(yield func(network netip.Prefix, country, subdivision string) bool) error {
	type codes struct{ country, subdivision string }
	// Bounded (about 1 MiB), so that a database of many distinct records
	// cannot grow it without limit: a record that fell out of it is
	// decoded again, which costs a few hundred nanoseconds. Neighbouring
	// networks usually share a record, which last catches.
	const maxMemo = 1 << 14
	memo := make(map[Offset]codes)
	last, lastOff := codes{}, Offset(0)
	haveLast := false
	var derr error
	err := r.Networks(func(p netip.Prefix, off Offset) bool {
		if !haveLast || off != lastOff {
			c, ok := memo[off]
			if !ok {
				country, sub, err := r.codesAt(int(off))
				if err != nil {
					derr = invalid("codes of "+p.String(), err)
					return false
				}
				c = codes{country, sub}
				if len(memo) >= maxMemo {
					clear(memo)
				}
				memo[off] = c
			}
			last, lastOff, haveLast = c, off, true
		}
		return yield(p, last.country, last.subdivision)
	})
	if err != nil {
		return err
	}
	return derr
}
