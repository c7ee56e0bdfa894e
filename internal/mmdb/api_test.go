package mmdb

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// valueAt follows path through a decoded value the way the path lookups do.
func valueAt(v any, path []string) (any, bool) {
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[p]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil {
				return nil, false
			}
			if i < 0 {
				i += len(x)
			}
			if i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

var testPaths = [][]string{
	{},
	{"country", "iso_code"},
	{"country", "names", "ja"},
	{"subdivisions", "0", "iso_code"},
	{"subdivisions", "1", "iso_code"},
	{"subdivisions", "-1", "names", "en"},
	{"subdivisions", "-3"},
	{"subdivisions", "2"},
	{"city", "names", "de"},
	{"location", "latitude"},
	{"location", "accuracy_radius"},
	{"continent", "code"},
	{"missing"},
	{"string"}, {"empty"}, {"bytes"}, {"nobytes"}, {"double"}, {"negzero"}, {"float"},
	{"u16"}, {"u16zero"}, {"u32"}, {"u32mid"}, {"i32neg"}, {"i32min"}, {"i32pos"}, {"u64"},
	{"u128"}, {"u128mid"}, {"u128nil"}, {"true"}, {"false"}, {"size285"}, {"size300"},
	{"array", "1"}, {"array", "2", "1"}, {"array", "3"}, {"array", "-4"},
	{"a", "a", "a", "a", "a", "a"},
	{"name"},
}

// TestPaths checks LookupPath, DecodePath, LookupString and StringAt against
// the whole decoded record, for every database shape and path.
func TestPaths(t *testing.T) {
	for _, o := range variants() {
		t.Run(o.String(), func(t *testing.T) {
			r, err := FromBytes(buildDB(t, o, testNetworks(o.ipVersion == 6)))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range lookupCases(o.ipVersion == 6, o.aliasIPv4) {
				ip := mustAddr(c.addr)
				rec, err := r.Lookup(ip)
				if err != nil {
					t.Fatal(err)
				}
				for _, path := range testPaths {
					exp, expOK := valueAt(rec, path)
					if rec == nil {
						expOK = false
					}
					got, ok, err := r.LookupPath(ip, path...)
					if err != nil && !errors.Is(err, ErrPathType) {
						t.Fatalf("LookupPath(%s, %q): %v", ip, path, err)
					}
					if err == nil && (ok != expOK || !reflect.DeepEqual(normalize(got), normalize(exp))) {
						t.Errorf("LookupPath(%s, %q) = %#v, %v; want %#v, %v", ip, path, got, ok, exp, expOK)
					}
					if err != nil && expOK {
						t.Errorf("LookupPath(%s, %q): %v, want %#v", ip, path, err, exp)
					}
					s, ok, err := r.LookupString(ip, path...)
					want, isString := exp.(string)
					switch {
					case expOK && isString:
						if err != nil || !ok || s != want {
							t.Errorf("LookupString(%s, %q) = %q, %v, %v; want %q", ip, path, s, ok, err, want)
						}
					case expOK:
						if !errors.Is(err, ErrPathType) || ok {
							t.Errorf("LookupString(%s, %q) of a %T: %q, %v, %v", ip, path, exp, s, ok, err)
						}
					default:
						if ok || (err != nil && !errors.Is(err, ErrPathType)) {
							t.Errorf("LookupString(%s, %q) = %q, %v, %v; want absent", ip, path, s, ok, err)
						}
					}
				}
				_, off, ok, err := r.LookupNetwork(ip)
				if err != nil || ok != (c.record != nil) {
					t.Fatalf("LookupNetwork(%s): %v, %v", ip, ok, err)
				}
				if !ok {
					continue
				}
				if v, err := r.Decode(off); err != nil || !reflect.DeepEqual(v, rec) {
					t.Errorf("Decode(%d) = %v, %v", off, v, err)
				}
				if s, ok, err := r.StringAt(off, "country", "iso_code"); err != nil || ok != (c.country != "") || !strings.EqualFold(s, c.country) {
					t.Errorf("StringAt(%d) = %q, %v, %v; want %q", off, s, ok, err, c.country)
				}
				if cc, sub, err := r.CodesAt(off); err != nil || cc != c.country || sub != c.subdivision {
					t.Errorf("CodesAt(%d) = %q, %q, %v", off, cc, sub, err)
				}
			}
		})
	}
}

func TestPathErrors(t *testing.T) {
	r, err := FromBytes(buildDB(t, writerOptions{ipVersion: 4, recordSize: 24}, testNetworks(false)))
	if err != nil {
		t.Fatal(err)
	}
	ip := mustAddr("1.2.3.4")
	for _, path := range [][]string{
		{"country", "iso_code", "x"},
		{"subdivisions", "x"},
		{"subdivisions", "1x"},
		{"location", "latitude", "0"},
	} {
		if _, _, err := r.LookupPath(ip, path...); !errors.Is(err, ErrPathType) || errors.Is(err, ErrInvalidDatabase) {
			t.Errorf("LookupPath(%q): %v", path, err)
		}
		if _, _, err := r.LookupString(ip, path...); !errors.Is(err, ErrPathType) {
			t.Errorf("LookupString(%q): %v", path, err)
		}
	}
	if _, _, err := r.LookupString(netip.Addr{}, "country"); err == nil {
		t.Error("LookupString of the zero Addr succeeded")
	}
	if _, err := r.Decode(Offset(len(r.data))); err == nil {
		t.Error("Decode past the data section succeeded")
	}
	if _, _, err := r.StringAt(1<<32-1, "x"); err == nil {
		t.Error("StringAt past the data section succeeded")
	}
	if _, _, err := r.CodesAt(Offset(len(r.data) + 1)); err == nil {
		t.Error("CodesAt past the data section succeeded")
	}
	// An offset in the middle of a value decodes as whatever is there:
	// an error or a value, never a panic.
	for off := range Offset(len(r.data)) {
		r.Decode(off)
		r.StringAt(off, "country", "iso_code")
		r.CodesAt(off)
	}
}

// networksOf returns every network of r with its record.
func networksOf(t *testing.T, r *Reader) ([]netip.Prefix, []Offset) {
	t.Helper()
	var ps []netip.Prefix
	var offs []Offset
	if err := r.Networks(func(p netip.Prefix, off Offset) bool {
		ps = append(ps, p)
		offs = append(offs, off)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return ps, offs
}

// lastAddr returns the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().AsSlice()
	for i := p.Bits(); i < len(a)*8; i++ {
		a[i/8] |= 0x80 >> (i % 8)
	}
	ip, _ := netip.AddrFromSlice(a)
	return ip
}

func TestNetworks(t *testing.T) {
	for _, o := range variants() {
		t.Run(o.String(), func(t *testing.T) {
			nets := testNetworks(o.ipVersion == 6)
			r, err := FromBytes(buildDB(t, o, nets))
			if err != nil {
				t.Fatal(err)
			}
			ps, offs := networksOf(t, r)
			// Disjoint, in address order (IPv4 first), each answering
			// LookupNetwork at both ends with itself and its record.
			for i, p := range ps {
				if !p.IsValid() || p != p.Masked() {
					t.Fatalf("network %v", p)
				}
				if p.Addr().Is6() && (o.ipVersion == 4 || strings.HasPrefix(p.String(), "::ffff:") || strings.HasPrefix(p.String(), "2002:")) {
					t.Errorf("network %v: IPv4 aliases must be skipped", p)
				}
				if i > 0 {
					prev := ps[i-1]
					if prev.Addr().Is4() == p.Addr().Is4() && lastAddr(prev).Compare(p.Addr()) >= 0 {
						t.Errorf("networks %v and %v overlap or are out of order", prev, p)
					}
				}
				for _, ip := range []netip.Addr{p.Addr(), lastAddr(p)} {
					np, off, ok, err := r.LookupNetwork(ip)
					if err != nil || !ok || np != p || off != offs[i] {
						t.Errorf("LookupNetwork(%s) = %v, %d, %v, %v; want %v, %d", ip, np, off, ok, err, p, offs[i])
					}
				}
			}
			// Every network of the writer is covered.
			for _, nw := range nets {
				p := nw.prefix
				for _, ip := range []netip.Addr{p.Addr(), lastAddr(p)} {
					if !slices.ContainsFunc(ps, func(q netip.Prefix) bool { return q.Contains(ip) }) {
						t.Errorf("%s (of %s) is in no network", ip, p)
					}
				}
			}
			// Codes agree with the per-address lookups, in a database of
			// records shaped like GeoIP ones (a record that is not a map
			// is an error, as in CountryAndSubdivision).
			nets = slices.DeleteFunc(slices.Clone(nets), func(nw network) bool {
				_, isMap := nw.record.(map[string]any)
				return !isMap
			})
			if r, err = FromBytes(buildDB(t, o, nets)); err != nil {
				t.Fatal(err)
			}
			if ps, _ = networksOf(t, r); len(ps) == 0 {
				t.Fatal("no networks")
			}
			i := 0
			if err := r.CountryNetworks(func(p netip.Prefix, cc, sub string) bool {
				if p != ps[i] {
					t.Fatalf("CountryNetworks network %d is %v, Networks says %v", i, p, ps[i])
				}
				wcc, wsub, err := r.CountryAndSubdivision(p.Addr())
				if err != nil || cc != wcc || sub != wsub {
					t.Errorf("%v: %q %q, want %q %q (%v)", p, cc, sub, wcc, wsub, err)
				}
				i++
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if i != len(ps) {
				t.Errorf("CountryNetworks yielded %d networks, Networks %d", i, len(ps))
			}
			// Stopping early.
			n := 0
			if err := r.Networks(func(netip.Prefix, Offset) bool { n++; return n < 3 }); err != nil || n != 3 {
				t.Errorf("stopping: %d, %v", n, err)
			}
			n = 0
			if err := r.CountryNetworks(func(netip.Prefix, string, string) bool { n++; return false }); err != nil || n != 1 {
				t.Errorf("stopping CountryNetworks: %d, %v", n, err)
			}
		})
	}
}

// TestLookupNetwork checks the prefixes of a few addresses by hand.
func TestLookupNetwork(t *testing.T) {
	for _, o := range []writerOptions{{ipVersion: 4, recordSize: 28}, {ipVersion: 6, recordSize: 32, aliasIPv4: true}} {
		r, err := FromBytes(buildDB(t, o, testNetworks(o.ipVersion == 6)))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			ip, net string
			ok      bool
		}{
			{"1.2.3.4", "1.2.3.0/25", true},
			{"::ffff:1.2.3.200", "1.2.3.128/25", true},
			{"192.168.1.1", "192.168.1.1/32", true},
			{"192.168.1.0", "192.168.1.0/32", false},
			{"10.0.0.1", "10.0.0.0/16", true},
		} {
			p, _, ok, err := r.LookupNetwork(mustAddr(c.ip))
			if err != nil || ok != c.ok || p.String() != c.net {
				t.Errorf("%v: LookupNetwork(%s) = %v, %v, %v; want %s, %v", o, c.ip, p, ok, err, c.net, c.ok)
			}
		}
		p, _, ok, err := r.LookupNetwork(mustAddr("2001:db8:1::5"))
		want := "2001:db8:1::/48"
		if o.ipVersion == 4 {
			want = "::/0"
		}
		if err != nil || ok != (o.ipVersion == 6) || p.String() != want {
			t.Errorf("%v: LookupNetwork(2001:db8:1::5) = %v, %v, %v", o, p, ok, err)
		}
	}
}

// TestNetworksHostile gives Networks trees that loop, nest too deep, share
// subtrees exponentially and point outside the data section.
func TestNetworksHostile(t *testing.T) {
	data := append(appendHeader(nil, kindString, 2), "ok"...)
	// 30 nodes, each with both records pointing to the next: 2^30 paths.
	var shared []uint32
	for i := uint32(0); i < 30; i++ {
		shared = append(shared, i+1, i+1)
	}
	shared[58], shared[59] = 30+16, 30+16
	var chain []uint32
	for i := uint32(0); i < 33; i++ {
		chain = append(chain, i+1, 33+16)
	}
	for _, c := range []struct {
		name    string
		records []uint32
		text    string
	}{
		{"cycle", []uint32{1, 2, 0, 2}, "visits more nodes"},
		{"self loop", []uint32{0, 1}, "visits more nodes"},
		{"33-bit chain", chain, "deeper than the address"},
		{"shared subtrees", shared, "visits more nodes"},
		{"record past the data section", []uint32{1, 2, 2, 2 + 16 + 5}, "points 5 bytes"},
	} {
		r, err := FromBytes(rawDB(t, c.records, data, nil))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = r.Networks(func(netip.Prefix, Offset) bool { return true })
		wantInvalid(t, c.name, err, c.text)
		err = r.CountryNetworks(func(netip.Prefix, string, string) bool { return true })
		if !errors.Is(err, ErrInvalidDatabase) {
			t.Errorf("%s: CountryNetworks: %v", c.name, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s took %v", c.name, d)
		}
	}
	// Records that are not maps: CountryNetworks reports the error.
	r, err := FromBytes(tinyDB(t, []byte{0xe1, 0x47, 'c', 'o', 'u', 'n', 't', 'r', 'y', 0xa1, 1}))
	if err != nil {
		t.Fatal(err)
	}
	err = r.CountryNetworks(func(netip.Prefix, string, string) bool { return true })
	wantInvalid(t, "iso_code in a number", err, "not a map")
}

// TestLookupAllocations checks the promise of the hot paths: once seen, a
// short string costs no allocation.
func TestLookupAllocations(t *testing.T) {
	r, err := FromBytes(buildDB(t, writerOptions{ipVersion: 6, recordSize: 28, dedup: true, aliasIPv4: true}, testNetworks(true)))
	if err != nil {
		t.Fatal(err)
	}
	v4, v6 := mustAddr("1.2.3.4"), mustAddr("2001:db8::1")
	if n := testing.AllocsPerRun(100, func() {
		if cc, ok, err := r.LookupString(v4, "country", "iso_code"); cc != "DE" || !ok || err != nil {
			t.Fatal(cc, ok, err)
		}
		if sub, ok, err := r.LookupString(v6, "subdivisions", "0", "iso_code"); sub != "13" || !ok || err != nil {
			t.Fatal(sub, ok, err)
		}
		if cc, sub, err := r.CountryAndSubdivision(mustAddr("1.2.3.200")); cc != "GB" || sub != "ENG" || err != nil {
			t.Fatal(cc, sub, err)
		}
		if _, _, ok, err := r.LookupNetwork(v6); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per run", n)
	}
}

func TestClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "test.mmdb")
	db := buildDB(t, writerOptions{ipVersion: 6, recordSize: 24, dedup: true, aliasIPv4: true}, testNetworks(true))
	if err := os.WriteFile(path, db, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.mapping) != len(db) {
		t.Fatalf("mapping of %d bytes for a %d-byte file", len(r.mapping), len(db))
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	// Replacing the file by rename leaves the mapping intact.
	other := filepath.Join(t.TempDir(), "other.mmdb")
	if err := os.WriteFile(other, buildDB(t, writerOptions{ipVersion: 4, recordSize: 24}, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	if cc, err := r.Country(mustAddr("1.2.3.4")); cc != "DE" || err != nil {
		t.Fatalf("after rename: %q, %v", cc, err)
	}
	// Pages handed back are read again on the next lookup.
	r.ReleasePages()
	if cc, err := r.Country(mustAddr("1.2.3.4")); cc != "DE" || err != nil {
		t.Fatalf("after ReleasePages: %q, %v", cc, err)
	}
	s, _, err := r.LookupString(mustAddr("1.2.3.4"), "city", "names", "en")
	if err != nil || s != "München" {
		t.Fatal(s, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	r.ReleasePages()    // nothing mapped any more: a no-op
	if s != "München" { // strings do not point into the mapping
		t.Errorf("string changed to %q", s)
	}
	if _, err := r.Country(mustAddr("1.2.3.4")); !errors.Is(err, ErrClosed) {
		t.Errorf("Country after Close: %v", err)
	}
	if _, _, err := r.LookupString(mustAddr("::1"), "x"); !errors.Is(err, ErrClosed) {
		t.Errorf("LookupString after Close: %v", err)
	}
	if _, err := r.Decode(0); !errors.Is(err, ErrClosed) {
		t.Errorf("Decode after Close: %v", err)
	}
	if err := r.Networks(func(netip.Prefix, Offset) bool { return true }); !errors.Is(err, ErrClosed) {
		t.Errorf("Networks after Close: %v", err)
	}
	if err := r.Verify(); !errors.Is(err, ErrClosed) {
		t.Errorf("Verify after Close: %v", err)
	}
	// A Reader from FromBytes closes too.
	r2, err := FromBytes(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Lookup(mustAddr("1.2.3.4")); !errors.Is(err, ErrClosed) {
		t.Errorf("Lookup after Close: %v", err)
	}
	// An empty file is an invalid database, not an mmap error.
	empty := filepath.Join(t.TempDir(), "empty.mmdb")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(empty); !errors.Is(err, ErrInvalidDatabase) {
		t.Errorf("empty file: %v", err)
	}
}

// TestOpenMaps checks that Open maps the file instead of copying it to the
// heap: a 32 MiB database costs the heap only the Reader and its caches.
func TestOpenMaps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.mmdb")
	data := make([]byte, 32<<20) // a data section of zeros: uint16s, never read
	db := tinyDB(t, append([]byte{0xa0}, data...))
	if err := os.WriteFile(path, db, 0o600); err != nil {
		t.Fatal(err)
	}
	data, db = nil, nil
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 1<<20 {
		t.Errorf("Open of a 32 MiB file grew the heap by %d bytes", grown)
	}
	if v, err := r.Lookup(mustAddr("1.2.3.4")); err != nil || v != uint64(0) {
		t.Errorf("Lookup = %v, %v", v, err)
	}
	runtime.KeepAlive(r)
}
