// Package geosnap compiles the data plane's geo snapshot, waf_geo.bin: for
// every country and region code the active WAF config's geo_match nodes
// name, the address ranges the GeoIP databases map to it.
//
// Neither Debian nor OpenWrt packages resty.maxminddb, and MMDB parsing
// already lives in Go (internal/mmdb), so the nginx workers never read a
// database: they match the client address against these ranges with the
// same binary search as IP groups (waf/ranges.lua), and adopt a new file
// without a reload. A lookup then costs what an IP-group lookup costs,
// whatever the database.
//
// The result follows DATAPLANE 4 address by address: where the City
// database has a record, its country.iso_code and its region
// (subdivisions[0].iso_code, as "CC-SUB" unless it already reads "XX-…")
// decide; elsewhere the Country database's country.iso_code does, and it
// never yields a region. Codes compare upper-cased.
package geosnap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"openflare/internal/mmdb"
	"openflare/internal/rangefile"
)

// The file has internal/rangefile's layout, as waf_ip_groups.bin does,
// with its own magic "OFGEOBIN". Its label names the codes and databases
// it was compiled from (labelOf); its flags say which databases those were
// (FlagCity, FlagCountry). Each set's id is its name's bytes, zero-padded
// to 8: "c" and a country code ("cUS"), or "r" and a region ("rUS-CA").
const (
	Name = "waf_geo.bin"

	magic = "OFGEOBIN"

	FlagCity    = 1
	FlagCountry = 2

	// MaxBytes bounds the file; waf/geo.lua refuses larger ones.
	MaxBytes = 64 << 20
)

// v4Top is the last address of ::/96, the IPv4 space.
var v4Top = rangefile.U128{Lo: 1<<32 - 1}

// rangeOf is a network's range in the one 128-bit space of the lists:
// IPv6 as is, IPv4 as ::a.b.c.d, where an IPv6 database keeps its IPv4
// subtree and where mmdb.Networks reports IPv4 networks.
func rangeOf(p netip.Prefix) rangefile.Range {
	if p.Addr().Is4() {
		a := p.Addr().As4()
		lo := uint64(binary.BigEndian.Uint32(a[:]))
		return rangefile.Range{Lo: rangefile.U128{Lo: lo}, Hi: rangefile.U128{Lo: lo | (1<<(32-p.Bits()) - 1)}}
	}
	a := p.Addr().As16()
	lo := rangefile.U128{Hi: binary.BigEndian.Uint64(a[:8]), Lo: binary.BigEndian.Uint64(a[8:])}
	hi := lo
	if host := 128 - p.Bits(); host >= 64 {
		hi.Lo = ^uint64(0)
		if host > 64 {
			hi.Hi |= 1<<(host-64) - 1
		}
	} else if host > 0 {
		hi.Lo |= 1<<host - 1
	}
	return rangefile.Range{Lo: lo, Hi: hi}
}

// list is a set of ranges kept sorted and merged while the input ascends,
// as a tree walk's does (a sort repairs it otherwise). It grows in chunks
// rather than by doubling one slice: a walk of a whole database fills
// lists of unknown length, and doubling copies would briefly need twice
// their memory.
type list struct {
	chunks   [][]rangefile.Range
	n        int
	unsorted bool
}

const (
	firstChunk = 64
	maxChunk   = 4096
)

func (l *list) add(s rangefile.Range) {
	if c := len(l.chunks); c > 0 {
		tail := l.chunks[c-1]
		last := &tail[len(tail)-1]
		if s.Lo.Less(last.Lo) {
			l.unsorted = true
		} else if last.Join(s) {
			return
		}
	}
	c := len(l.chunks)
	if c == 0 || len(l.chunks[c-1]) == cap(l.chunks[c-1]) {
		size := firstChunk
		if c > 0 {
			size = min(2*cap(l.chunks[c-1]), maxChunk)
		}
		l.chunks = append(l.chunks, make([]rangefile.Range, 0, size))
		c++
	}
	l.chunks[c-1] = append(l.chunks[c-1], s)
	l.n++
}

// flat returns the ranges ascending, disjoint and not adjacent, in one
// slice.
func (l *list) flat() []rangefile.Range {
	out := make([]rangefile.Range, 0, l.n)
	for _, c := range l.chunks {
		out = append(out, c...)
	}
	if !l.unsorted {
		return out
	}
	return rangefile.Merge(out)
}

// each calls f with the ranges in ascending order.
func (l *list) each(f func(rangefile.Range)) {
	if l.unsorted {
		for _, s := range l.flat() {
			f(s)
		}
		return
	}
	for _, c := range l.chunks {
		for _, s := range c {
			f(s)
		}
	}
}

// without calls f with the parts of s that cover (ascending, merged) does
// not contain.
func without(s rangefile.Range, cover []rangefile.Range, f func(rangefile.Range)) {
	i, _ := slices.BinarySearchFunc(cover, s.Lo, func(c rangefile.Range, x rangefile.U128) int {
		if c.Hi.Less(x) {
			return -1
		}
		return 1
	})
	cur := s.Lo
	for ; i < len(cover) && !s.Hi.Less(cover[i].Lo); i++ {
		if cur.Less(cover[i].Lo) {
			f(rangefile.Range{Lo: cur, Hi: cover[i].Lo.Prev()})
		}
		next, ok := cover[i].Hi.Next()
		if !ok || s.Hi.Less(next) {
			return
		}
		cur = next
	}
	f(rangefile.Range{Lo: cur, Hi: s.Hi})
}

// Sources are the databases to compile from; either may be nil (missing
// or unusable).
type Sources struct {
	City, Country *mmdb.Reader
}

// region is the region code of a City record as DATAPLANE 4 builds it.
func region(country, sub string) string {
	switch {
	case sub == "":
		return ""
	case len(sub) > 2 && isUpper(sub[0]) && isUpper(sub[1]) && sub[2] == '-':
		return sub
	case country == "":
		return ""
	}
	return country + "-" + sub
}

func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }

// SourceError is a database that could not be walked.
type SourceError struct {
	Database string // "city" or "country"
	Err      error
}

func (e *SourceError) Error() string {
	return "geo snapshot: walk the " + e.Database + " database: " + e.Err.Error()
}

func (e *SourceError) Unwrap() error { return e.Err }

// Compile builds the file for codes from src, labelled label (Label).
func Compile(src Sources, codes Codes, label string) ([]byte, error) {
	if len(label) != rangefile.LabelLen {
		return nil, fmt.Errorf("geo snapshot: label %q is not %d characters", label, rangefile.LabelLen)
	}
	sets := map[string]*list{}
	for _, c := range codes.Countries {
		sets["c"+c] = &list{}
	}
	for _, r := range codes.Regions {
		sets["r"+r] = &list{}
	}
	var flags uint32
	// Pages of the databases already walked are handed back every so
	// many networks, so the walk's resident set stays small whatever the
	// database's size (mmdb.Reader.ReleasePages).
	const releaseEvery = 1 << 15
	walked := 0
	release := func(r *mmdb.Reader) {
		if walked++; walked%releaseEvery == 0 {
			r.ReleasePages()
		}
	}
	// The space the City database answers for: the Country database
	// decides only outside it.
	var cover list
	if src.City != nil {
		flags |= FlagCity
		err := src.City.CountryNetworks(func(p netip.Prefix, country, sub string) bool {
			release(src.City)
			s := rangeOf(p)
			cover.add(s)
			if l := sets["c"+country]; l != nil && country != "" {
				l.add(s)
			}
			if r := region(country, sub); r != "" {
				if l := sets["r"+r]; l != nil {
					l.add(s)
				}
			}
			return true
		})
		if err != nil {
			return nil, &SourceError{Database: "city", Err: err}
		}
	}
	if src.Country != nil {
		flags |= FlagCountry
		covered := cover.flat()
		err := src.Country.CountryNetworks(func(p netip.Prefix, country, _ string) bool {
			release(src.Country)
			if l := sets["c"+country]; l != nil && country != "" {
				without(rangeOf(p), covered, l.add)
			}
			return true
		})
		if err != nil {
			return nil, &SourceError{Database: "country", Err: err}
		}
	}
	return encode(sets, flags, label)
}

// encode writes the file. IPv4 ranges are also given as their
// IPv4-mapped IPv6 ranges: internal/mmdb, like MaxMind's databases, answers
// ::ffff:a.b.c.d as a.b.c.d, while the workers keep the two families apart.
// The file is sized before it is written, so it is never copied to grow.
func encode(sets map[string]*list, flags uint32, label string) ([]byte, error) {
	names := make([]string, 0, len(sets))
	size := rangefile.HeaderSize + rangefile.RecordSize*len(sets)
	for n, l := range sets {
		if len(n) > 8 {
			return nil, fmt.Errorf("geo snapshot: code %q is longer than 7 characters", n[1:])
		}
		names = append(names, n)
		// At most: every range's IPv4 part and its mirror, plus its IPv6
		// part.
		size += l.n * (rangefile.V4RangeSize + 2*rangefile.V6RangeSize)
	}
	slices.Sort(names)
	buf, err := rangefile.New(magic, label, len(names), flags, min(size, MaxBytes))
	if err != nil {
		return nil, fmt.Errorf("geo snapshot: %w", err)
	}
	for i, name := range names {
		rec := rangefile.Record{Enabled: true, Off4: len(buf)}
		copy(rec.ID[:], name)
		var v6 list
		sets[name].each(func(s rangefile.Range) {
			if !v4Top.Less(s.Lo) {
				part := s
				if v4Top.Less(part.Hi) {
					part.Hi = v4Top
				}
				buf = rangefile.AppendV4(buf, uint32(part.Lo.Lo), uint32(part.Hi.Lo))
				rec.N4++
				v6.add(rangefile.Range{Lo: rangefile.U128{Lo: 0xffff<<32 | part.Lo.Lo}, Hi: rangefile.U128{Lo: 0xffff<<32 | part.Hi.Lo}})
			}
			if v4Top.Less(s.Hi) {
				part := s
				if !v4Top.Less(part.Lo) {
					part.Lo, _ = v4Top.Next()
				}
				v6.add(part)
			}
		})
		rec.Off6 = len(buf)
		v6.each(func(s rangefile.Range) {
			buf = rangefile.AppendV6(buf, s)
			rec.N6++
		})
		rec.Put(buf, i)
		if len(buf) > MaxBytes {
			return nil, fmt.Errorf("geo snapshot: exceeds %d bytes", MaxBytes)
		}
	}
	return buf, nil
}

// nameOf is the set name of a record id.
func nameOf(id [8]byte) string { return string(bytes.TrimRight(id[:], "\x00")) }

// codesOf are the codes of set names.
func codesOf(names []string) Codes {
	var c Codes
	for _, n := range names {
		switch {
		case len(n) < 2:
		case n[0] == 'c':
			c.Countries = append(c.Countries, n[1:])
		case n[0] == 'r':
			c.Regions = append(c.Regions, n[1:])
		}
	}
	return c.normal()
}
