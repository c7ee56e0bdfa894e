package mmdb

import (
	"bytes"
	"fmt"
)

// Verification limits, chosen so that Verify of GeoLite2 City (about 4
// million nodes) takes well under a second on a router-class CPU while still
// decoding tens of thousands of records.
const (
	// maxSamples is about how many data records Verify decodes in full,
	// spread evenly over the tree; every other record gets its header
	// checked. Small databases are therefore decoded completely.
	maxSamples = 1 << 16
	// verifyItems bounds the values decoded over all samples, so that a
	// file whose records are expensive to decode costs coverage, not time.
	verifyItems = 1 << 24
)

// Verify checks the whole file well enough to reject a corrupt or truncated
// database before it replaces a working one:
//
//   - the 16-byte separator between the tree and the data section is zero;
//   - every record of every node is a node number, "no data", or an offset
//     inside the data section where a valid field starts;
//   - every path from the root reaches a record within 32 (IPv4) or 128
//     (IPv6) bits, so the tree has no cycle and no lookup can fail on depth;
//   - a sample of the data records, spread evenly over the address space,
//     decodes completely (every record of a small database).
//
// Its cost is linear in the size of the tree plus a bounded amount of
// decoding, and it allocates one byte per node.
func (r *Reader) Verify() error {
	if r.closed.Load() {
		return ErrClosed
	}
	var zero [16]byte
	if !bytes.Equal(r.separator, zero[:]) {
		return corrupt("the 16 bytes after the search tree are not all zero")
	}
	n, err := r.verifyRecords()
	if err != nil {
		return err
	}
	return r.verifyPaths(n)
}

var sides = [2]string{"left", "right"}

// verifyRecords checks every record of every node, and the header of every
// data record. It returns how many records point to data.
func (r *Reader) verifyRecords() (uint64, error) {
	var n uint64
	for node := uint32(0); node < r.nodeCount; node++ {
		for bit := byte(0); bit < 2; bit++ {
			v := r.record(node, bit)
			if v <= r.nodeCount {
				continue
			}
			n++
			off, err := r.dataOffset(v)
			if err != nil {
				return 0, corrupt("node %d, %s record: %v", node, sides[bit], err)
			}
			if _, err := r.data.resolve(off); err != nil {
				return 0, invalid(fmt.Sprintf("node %d, %s record", node, sides[bit]), err)
			}
		}
	}
	return n, nil
}

// sampler decides which data records Verify decodes in full: about one in
// every stride, skipping repeats of the record decoded last (neighbouring
// networks often share one), until the budget is spent.
type sampler struct {
	d      section
	stride uint64
	seen   uint64
	want   bool
	last   int
	budget int
}

func (s *sampler) check(off int) error {
	if s.seen%s.stride == 0 {
		s.want = true
	}
	s.seen++
	if !s.want || off == s.last || s.budget <= 0 {
		return nil
	}
	d := decoder{s: s.d, items: maxItems, bytes: maxBytes}
	if _, _, err := d.value(off, 0); err != nil {
		return err
	}
	s.budget -= maxItems - d.items
	s.last, s.want = off, false
	return nil
}

// verifyPaths checks that every path from the root ends within the address
// length, with a depth-first walk that remembers the height of each finished
// node (how many bits its longest path consumes). Shared subtrees, such as
// the IPv4 subtree that MaxMind's databases also reach from ::ffff:0:0/96 and
// 2002::/16, are therefore walked once, and a node met again while it is
// still on the stack is a cycle. The walk meets the data records in address
// order, so it also picks the samples to decode: dataRecords of them exist.
func (r *Reader) verifyPaths(dataRecords uint64) error {
	bits := 128
	if r.meta.IPVersion == 4 {
		bits = 32
	}
	samples := sampler{
		d:      r.data,
		stride: max(1, (dataRecords+maxSamples-1)/maxSamples),
		last:   -1,
		budget: verifyItems,
	}
	const onStack = 0xff // heights are 1..128 once known, 0 before
	heights := make([]uint8, r.nodeCount)
	type frame struct {
		node   uint32
		next   byte  // the record to look at next: 0, 1, or 2 when done
		height uint8 // the largest height of the children seen so far
	}
	stack := make([]frame, 1, bits)
	heights[0] = onStack
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		if f.next == 2 {
			h := f.height + 1
			heights[f.node] = h
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				p := &stack[len(stack)-1]
				p.height = max(p.height, h)
			}
			continue
		}
		child := r.record(f.node, f.next)
		f.next++
		if child > r.nodeCount {
			// verifyRecords has checked the offset.
			off, _ := r.dataOffset(child)
			if err := samples.check(off); err != nil {
				return invalid(fmt.Sprintf("node %d, %s record", f.node, sides[f.next-1]), err)
			}
			continue
		}
		if child == r.nodeCount {
			continue
		}
		// The child sits len(stack) bits below the root.
		switch h := heights[child]; {
		case h == onStack:
			return corrupt("search tree has a cycle through node %d", child)
		case h == 0:
			if len(stack) == bits {
				return corrupt("search tree is deeper than %d bits at node %d", bits, child)
			}
			heights[child] = onStack
			stack = append(stack, frame{node: child})
		default:
			if len(stack)+int(h) > bits {
				return corrupt("search tree is deeper than %d bits through node %d", bits, child)
			}
			f.height = max(f.height, h)
		}
	}
	return nil
}
