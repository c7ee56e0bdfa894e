package rangefile

import "sort"

// U128 is an IPv6 address or bound, most significant half first.
type U128 struct{ Hi, Lo uint64 }

func (a U128) Less(b U128) bool { return a.Hi < b.Hi || a.Hi == b.Hi && a.Lo < b.Lo }

// Next returns a+1, and false when a is the largest value.
func (a U128) Next() (U128, bool) {
	switch {
	case a.Lo != ^uint64(0):
		return U128{a.Hi, a.Lo + 1}, true
	case a.Hi != ^uint64(0):
		return U128{a.Hi + 1, 0}, true
	}
	return a, false
}

// Prev returns a-1; a must not be zero.
func (a U128) Prev() U128 {
	if a.Lo != 0 {
		return U128{a.Hi, a.Lo - 1}
	}
	return U128{a.Hi - 1, ^uint64(0)}
}

// Range is an inclusive range of addresses. Both writers keep their
// 128-bit ranges as Range and merge them with Merge: each range type of
// their own would compile a copy of the generic sort into the binary,
// which has to fit the flash of small edge boxes.
type Range struct{ Lo, Hi U128 }

// Join extends r by s and reports true when the two overlap or touch, so
// that they are one range of a file; s must not start before r.
func (r *Range) Join(s Range) bool {
	if after, ok := r.Hi.Next(); ok && after.Less(s.Lo) {
		return false
	}
	if r.Hi.Less(s.Hi) {
		r.Hi = s.Hi
	}
	return true
}

// byLo orders ranges by their start; ranges of equal Lo join in either
// order.
type byLo []Range

func (s byLo) Len() int           { return len(s) }
func (s byLo) Less(i, j int) bool { return s[i].Lo.Less(s[j].Lo) }
func (s byLo) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }

// Merge sorts rs and joins its overlapping and adjacent ranges in place,
// returning them as a file holds them: ascending, disjoint, not adjacent.
func Merge(rs []Range) []Range {
	// sort.Sort rather than slices.SortFunc: one more instantiation of
	// pdqsort for a 32-byte element costs the binary 7 KiB.
	sort.Sort(byLo(rs))
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].Join(r) {
			continue
		}
		out = append(out, r)
	}
	return out
}
