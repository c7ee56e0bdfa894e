package ipgroups

import "openflare/internal/rangefile"

// This file is the Go twin of the entry syntax in waf/ipmatch.lua: an entry
// the Lua parser rejects must be rejected here too (it never matches), and
// an accepted one must cover the same addresses. It is deliberately a
// port of that parser, not net/netip, which accepts zones and differs in
// other corners. TestEntrySyntaxMatchesLua in agent/luaassets checks the
// two against each other inside nginx.

// text is an entry as the compiler finds it in the raw JSON ([]byte, no
// copy) or as tests write it (string).
type text interface{ ~string | ~[]byte }

func indexByte[T text](s T, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// indexGap finds "::".
func indexGap[T text](s T) int {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == ':' && s[i+1] == ':' {
			return i
		}
	}
	return -1
}

// entry is a parsed list entry: a network of one family.
type entry struct {
	v6   bool
	v4   uint32
	a6   rangefile.U128
	plen int
}

// parseV4 accepts exactly four decimal octets without leading zeros.
func parseV4[T text](s T) (uint32, bool) {
	var n uint32
	dots, octet, digits := 0, 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if digits == 0 || dots == 3 {
				return 0, false
			}
			n = n<<8 | uint32(octet)
			dots, octet, digits = dots+1, 0, 0
		case c >= '0' && c <= '9':
			if digits > 0 && octet == 0 {
				return 0, false
			}
			octet = octet*10 + int(c-'0')
			digits++
			if octet > 255 {
				return 0, false
			}
		default:
			return 0, false
		}
	}
	if dots != 3 || digits == 0 {
		return 0, false
	}
	return n<<8 | uint32(octet), true
}

func hexValue(c byte) (uint16, bool) {
	switch {
	case c >= '0' && c <= '9':
		return uint16(c - '0'), true
	case c >= 'a' && c <= 'f':
		return uint16(c-'a') + 10, true
	case c >= 'A' && c <= 'F':
		return uint16(c-'A') + 10, true
	}
	return 0, false
}

// parseGroups appends the 16-bit groups of one side of a "::". With tailV4
// the last piece may be a dotted quad standing for two groups.
func parseGroups[T text](s T, out []uint16, tailV4 bool) ([]uint16, bool) {
	if len(s) == 0 {
		return out, true
	}
	start := 0
	for {
		colon := indexByte(s[start:], ':')
		stop := len(s)
		if colon >= 0 {
			colon += start
			stop = colon
		}
		if colon < 0 && tailV4 && indexByte(s[start:], '.') >= 0 {
			v4, ok := parseV4(s[start:])
			if !ok {
				return out, false
			}
			return append(out, uint16(v4>>16), uint16(v4)), true
		}
		if stop == start || stop-start > 4 {
			return out, false
		}
		var v uint16
		for k := start; k < stop; k++ {
			h, ok := hexValue(s[k])
			if !ok {
				return out, false
			}
			v = v<<4 | h
		}
		out = append(out, v)
		if colon < 0 {
			return out, true
		}
		start = colon + 1
	}
}

func parseV6[T text](s T) (rangefile.U128, bool) {
	var headBuf, tailBuf [8]uint16
	head, tail := headBuf[:0], tailBuf[:0]
	var ok bool
	if gap := indexGap(s); gap >= 0 {
		// Lua searches for a second "::" from the gap's second colon, so
		// ":::" is refused too.
		if indexGap(s[gap+1:]) >= 0 {
			return rangefile.U128{}, false
		}
		if head, ok = parseGroups(s[:gap], head, false); !ok {
			return rangefile.U128{}, false
		}
		if tail, ok = parseGroups(s[gap+2:], tail, true); !ok || len(head)+len(tail) > 7 {
			return rangefile.U128{}, false
		}
	} else if head, ok = parseGroups(s, head, true); !ok || len(head) != 8 {
		return rangefile.U128{}, false
	}
	var groups [8]uint16
	copy(groups[:], head)
	copy(groups[8-len(tail):], tail)
	var a rangefile.U128
	for i, g := range groups {
		if i < 4 {
			a.Hi = a.Hi<<16 | uint64(g)
		} else {
			a.Lo = a.Lo<<16 | uint64(g)
		}
	}
	return a, true
}

// parsePlen accepts a decimal prefix length without leading zeros, at most max.
func parsePlen[T text](s T, max int) (int, bool) {
	if len(s) == 0 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		// Without leading zeros, four digits are already over 128.
		if i >= 3 {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n > max {
		return 0, false
	}
	return n, true
}

// parseAddr parses an address without a prefix, as ipmatch.parse does: it
// is IPv6 exactly when it holds a colon.
func parseAddr[T text](s T) (entry, bool) {
	if len(s) == 0 {
		return entry{}, false
	}
	if indexByte(s, ':') >= 0 {
		a, ok := parseV6(s)
		return entry{v6: true, a6: a, plen: 128}, ok
	}
	v, ok := parseV4(s)
	return entry{v4: v, plen: 32}, ok
}

// parseEntry parses "addr" or "addr/plen"; host bits are kept here and
// cleared by the range conversion.
func parseEntry[T text](s T) (entry, bool) {
	addr, plen := s, s[:0]
	slash := indexByte(s, '/')
	if slash >= 0 {
		addr, plen = s[:slash], s[slash+1:]
	}
	e, ok := parseAddr(addr)
	if !ok {
		return entry{}, false
	}
	if slash >= 0 {
		if e.plen, ok = parsePlen(plen, e.plen); !ok {
			return entry{}, false
		}
	}
	return e, true
}

// v4Range is the inclusive address range of a network.
func v4Range(addr uint32, plen int) (lo, hi uint32) {
	mask := uint32(^uint64(0) << (32 - plen))
	return addr & mask, addr&mask | ^mask
}

func v6Range(a rangefile.U128, plen int) (lo, hi rangefile.U128) {
	var mask rangefile.U128
	if plen <= 64 {
		mask.Hi = ^uint64(0) << (64 - plen)
	} else {
		mask.Hi = ^uint64(0)
		mask.Lo = ^uint64(0) << (128 - plen)
	}
	lo = rangefile.U128{Hi: a.Hi & mask.Hi, Lo: a.Lo & mask.Lo}
	hi = rangefile.U128{Hi: lo.Hi | ^mask.Hi, Lo: lo.Lo | ^mask.Lo}
	return lo, hi
}
