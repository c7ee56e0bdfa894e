package mmdb

import (
	"net/netip"
	"strings"
	"testing"
)

// fuzzAddrs are looked up in every fuzzed database: both ends of both
// address families, the addresses of the seed networks, and the IPv4-mapped
// and 6to4 forms.
var fuzzAddrs = []netip.Addr{
	mustAddr("0.0.0.0"),
	mustAddr("1.2.3.4"),
	mustAddr("1.2.3.200"),
	mustAddr("10.0.0.1"),
	mustAddr("192.168.1.1"),
	mustAddr("255.255.255.255"),
	mustAddr("::"),
	mustAddr("::ffff:1.2.3.4"),
	mustAddr("2001:db8::1"),
	mustAddr("2002:102:304::"),
	mustAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
}

// FuzzOpen gives the reader arbitrary files, starting from valid databases
// of several shapes: nothing may panic, hang or allocate without bound, and
// a small database that Verify accepts must answer every lookup.
func FuzzOpen(f *testing.F) {
	f.Add(smallDB(f))
	for _, o := range []writerOptions{
		{ipVersion: 4, recordSize: 24, dedup: true},
		{ipVersion: 6, recordSize: 32},
	} {
		f.Add(buildDB(f, o, testNetworks(o.ipVersion == 6)[:6]))
	}
	f.Add(tinyDB(f, []byte{0xe1, 0x47, 'c', 'o', 'u', 'n', 't', 'r', 'y', 0x20, 0x00}))
	f.Add(tinyDB(f, []byte{0x02, 0x04, 0x20, 0x00, 0x20, 0x00}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, verr := exercise(b)
		// Verify decodes every data record of a small tree completely, so
		// once it passes no lookup may fail. (With more than 64 nodes the
		// shared verification budget might run out before every record.)
		if r == nil || verr != nil || r.nodeCount > 64 {
			return
		}
		for _, ip := range fuzzAddrs {
			if _, err := r.Lookup(ip); err != nil {
				t.Fatalf("Verify passed but Lookup(%s) failed: %v", ip, err)
			}
		}
	})
}

// FuzzLookup looks up arbitrary addresses and paths in arbitrary files.
func FuzzLookup(f *testing.F) {
	for _, o := range []writerOptions{
		{ipVersion: 4, recordSize: 28, dedup: true},
		{ipVersion: 6, recordSize: 24, dedup: true, aliasIPv4: true},
	} {
		db := buildDB(f, o, testNetworks(o.ipVersion == 6))
		f.Add(db, []byte{1, 2, 3, 4}, "country/iso_code")
		f.Add(db, mustAddr("2001:db8::1").AsSlice(), "subdivisions/-1/names/ja")
		f.Add(db, []byte{192, 168, 1, 1}, "array/2/0")
	}
	f.Add(smallDB(f), []byte{1, 2, 3, 4}, "")
	f.Fuzz(func(t *testing.T, db, addr []byte, path string) {
		r, err := FromBytes(db)
		if err != nil {
			return
		}
		ip, ok := netip.AddrFromSlice(addr)
		if !ok {
			return
		}
		var p []string
		if path != "" {
			p = strings.Split(path, "/")
		}
		r.LookupString(ip, p...)
		r.LookupPath(ip, p...)
		r.Country(ip)
		r.CountryAndSubdivision(ip)
		if _, off, ok, err := r.LookupNetwork(ip); ok && err == nil {
			r.DecodePath(off, p...)
			r.StringAt(off, p...)
		}
		// Lookups at arbitrary offsets of the data section.
		for _, b := range addr {
			off := Offset(b) * Offset(len(addr))
			r.DecodePath(off, p...)
			r.CodesAt(off)
		}
	})
}
