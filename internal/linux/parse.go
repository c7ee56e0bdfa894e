package linux

import (
	"bytes"
	"math"
	"math/bits"
)

// nextLine splits b at the first newline. The newline belongs to neither part.
func nextLine(b []byte) (line, rest []byte) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// isSpace reports the separators /proc uses between fields. Newline is not
// one of them because callers have already split lines.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}

// nextField returns the first whitespace-separated token of b and the
// remainder after it, without allocating (unlike bytes.Fields). field is
// empty when b holds no more tokens.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isSpace(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

// trimSpace trims the separators isSpace knows from both ends of b.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// parseUint parses an unsigned decimal. It reports false for an empty token,
// any non-digit (a sign included) and anything above math.MaxUint64, so the
// caller can drop that one field instead of the whole record.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// parseHex parses a 0x-prefixed hexadecimal number as /proc/cpuinfo prints
// ARM implementer and part codes.
func parseHex(b []byte) (uint64, bool) {
	if len(b) < 3 || b[0] != '0' || (b[1] != 'x' && b[1] != 'X') {
		return 0, false
	}
	var n uint64
	for _, c := range b[2:] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		if n > math.MaxUint64>>4 {
			return 0, false
		}
		n = n<<4 | uint64(d)
	}
	return n, true
}

// mulOK multiplies, returning 0 and false when the product does not fit in a
// uint64, so a counter scaled to bytes can be dropped rather than wrapped.
func mulOK(a, b uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return 0, false
	}
	return lo, true
}

// addSat adds, sticking at math.MaxUint64 instead of wrapping: a sum of
// counters that wrapped would look like a huge drop to whoever takes deltas.
func addSat(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}

// subFloor subtracts, returning 0 instead of wrapping when b > a.
func subFloor(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// mulSat multiplies, sticking at math.MaxUint64 instead of wrapping.
func mulSat(a, b uint64) uint64 {
	if p, ok := mulOK(a, b); ok {
		return p
	}
	return math.MaxUint64
}
