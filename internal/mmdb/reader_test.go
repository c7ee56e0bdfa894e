package mmdb

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func names(en string) map[string]any {
	return map[string]any{"en": en, "de": en + " (de)", "ja": "名前 " + en}
}

// cityRecord is shaped like a GeoLite2 City record.
func cityRecord(country, subdivision, city string) map[string]any {
	c := map[string]any{"geoname_id": u32(6252001), "iso_code": country, "names": names("Country " + country)}
	return map[string]any{
		"city":               map[string]any{"geoname_id": u32(5391959), "names": names(city)},
		"continent":          map[string]any{"code": "NA", "geoname_id": u32(6255149), "names": names("North America")},
		"country":            c,
		"location":           map[string]any{"accuracy_radius": u16(10), "latitude": 37.7749, "longitude": -122.4194, "time_zone": "America/Los_Angeles"},
		"postal":             map[string]any{"code": "94107"},
		"registered_country": c,
		"subdivisions": []any{
			map[string]any{"geoname_id": u32(5332921), "iso_code": subdivision, "names": names("Sub " + subdivision)},
			map[string]any{"geoname_id": u32(5332922), "iso_code": "ZZZ", "names": names("Second")},
		},
	}
}

// countryRecord is shaped like a GeoLite2 Country record.
func countryRecord(country string) map[string]any {
	c := map[string]any{"geoname_id": u32(3017382), "iso_code": country, "names": names("Country " + country)}
	return map[string]any{
		"continent":          map[string]any{"code": "EU", "geoname_id": u32(6255148), "names": names("Europe")},
		"country":            c,
		"registered_country": c,
	}
}

func bigOnes(bits int) *big.Int {
	return new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(bits)), big.NewInt(1))
}

// scalarRecord holds every type of the specification.
func scalarRecord() map[string]any {
	return map[string]any{
		"string":  "héllo wörld",
		"empty":   "",
		"bytes":   []byte{0, 1, 2, 255},
		"nobytes": []byte{},
		"double":  math.Pi,
		"negzero": math.Copysign(0, -1),
		"float":   float32(1.5),
		"u16":     u16(math.MaxUint16),
		"u16zero": u16(0),
		"u32":     u32(math.MaxUint32),
		"u32mid":  u32(70000),
		"i32neg":  i32(-5),
		"i32min":  i32(math.MinInt32),
		"i32pos":  i32(7),
		"u64":     u64(math.MaxUint64),
		"u128":    bigOnes(128),
		"u128mid": big.NewInt(300),
		"u128nil": new(big.Int),
		"true":    true,
		"false":   false,
		"array":   []any{u16(1), "two", []any{3.0, []any{}}, map[string]any{}},
		"size28":  strings.Repeat("a", 28),
		"size29":  strings.Repeat("b", 29),
		"size284": strings.Repeat("c", 284),
		"size285": strings.Repeat("d", 285),
		"size300": strings.Repeat("e", 300),
	}
}

// nested returns depth maps nested in each other.
func nested(depth int) any {
	var v any = "bottom"
	for range depth {
		v = map[string]any{"a": v}
	}
	return v
}

// want converts a writer value into what Lookup returns; *big.Int becomes
// its decimal string on both sides (see normalize) so DeepEqual works.
func want(v any) any {
	switch v := v.(type) {
	case u16:
		return uint64(v)
	case u32:
		return uint64(v)
	case u64:
		return uint64(v)
	case i32:
		return int64(v)
	case float32:
		return float64(v)
	case map[string]any:
		m := map[string]any{}
		for k, x := range v {
			m[k] = want(x)
		}
		return m
	case []any:
		a := []any{}
		for _, x := range v {
			a = append(a, want(x))
		}
		return a
	}
	return normalize(v)
}

// normalize replaces *big.Int values by strings, recursively.
func normalize(v any) any {
	switch v := v.(type) {
	case *big.Int:
		return "uint128:" + v.String()
	case map[string]any:
		m := map[string]any{}
		for k, x := range v {
			m[k] = normalize(x)
		}
		return m
	case []any:
		a := []any{}
		for _, x := range v {
			a = append(a, normalize(x))
		}
		return a
	}
	return v
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func mustAddr(s string) netip.Addr     { return netip.MustParseAddr(s) }

// testNetworks returns the networks of the functional tests; IPv6 networks
// only with v6.
func testNetworks(v6 bool) []network {
	nets := []network{
		{mustPrefix("1.0.0.0/8"), cityRecord("US", "CA", "San Francisco")},
		{mustPrefix("1.2.3.0/24"), cityRecord("DE", "BY", "München")},
		{mustPrefix("1.2.3.128/25"), cityRecord("gb", "eng", "London")},
		{mustPrefix("10.0.0.0/16"), countryRecord("FR")},
		{mustPrefix("10.1.0.0/16"), countryRecord("FR")},
		{mustPrefix("10.2.0.0/16"), map[string]any{"continent": map[string]any{"code": "AN"}}},
		{mustPrefix("10.3.0.0/16"), map[string]any{"country": map[string]any{"iso_code": "IT"}, "subdivisions": []any{}}},
		{mustPrefix("192.168.1.1/32"), scalarRecord()},
		{mustPrefix("203.0.113.0/24"), nested(20)},
		{mustPrefix("255.255.255.255/32"), "last"},
	}
	if v6 {
		nets = append(nets,
			network{mustPrefix("2001:db8::/32"), cityRecord("JP", "13", "Tokyo")},
			network{mustPrefix("2001:db8:1::/48"), countryRecord("NL")},
			network{mustPrefix("2a00::/12"), scalarRecord()},
			network{mustPrefix("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"), map[string]any{"name": "last6"}},
		)
	}
	return nets
}

type lookupCase struct {
	addr        string
	record      any // writer value; nil when not found
	country     string
	subdivision string
}

func lookupCases(v6, alias bool) []lookupCase {
	sf := cityRecord("US", "CA", "San Francisco")
	mu := cityRecord("DE", "BY", "München")
	lo := cityRecord("gb", "eng", "London")
	fr := countryRecord("FR")
	cases := []lookupCase{
		{"0.0.0.0", nil, "", ""},
		{"1.0.0.0", sf, "US", "CA"},
		{"1.1.1.1", sf, "US", "CA"},
		{"1.2.2.255", sf, "US", "CA"},
		{"1.2.3.0", mu, "DE", "BY"},
		{"1.2.3.127", mu, "DE", "BY"},
		{"1.2.3.128", lo, "GB", "ENG"},
		{"1.2.3.255", lo, "GB", "ENG"},
		{"1.2.4.0", sf, "US", "CA"},
		{"1.255.255.255", sf, "US", "CA"},
		{"2.0.0.0", nil, "", ""},
		{"9.255.255.255", nil, "", ""},
		{"10.0.0.1", fr, "FR", ""},
		{"10.1.255.255", fr, "FR", ""},
		{"10.2.0.1", map[string]any{"continent": map[string]any{"code": "AN"}}, "", ""},
		{"10.3.0.1", map[string]any{"country": map[string]any{"iso_code": "IT"}, "subdivisions": []any{}}, "IT", ""},
		{"10.4.0.0", nil, "", ""},
		{"192.168.1.0", nil, "", ""},
		{"192.168.1.1", scalarRecord(), "", ""},
		{"192.168.1.2", nil, "", ""},
		{"203.0.113.9", nested(20), "", ""},
		{"255.255.255.254", nil, "", ""},
		// IPv4-mapped addresses are looked up as IPv4.
		{"::ffff:1.2.3.4", mu, "DE", "BY"},
		{"::ffff:10.0.0.1", fr, "FR", ""},
		{"::ffff:2.0.0.0", nil, "", ""},
	}
	if !v6 {
		return append(cases,
			lookupCase{"2001:db8::1", nil, "", ""},
			lookupCase{"::1.2.3.4", nil, "", ""},
		)
	}
	cases = append(cases,
		lookupCase{"2001:db8::1", cityRecord("JP", "13", "Tokyo"), "JP", "13"},
		lookupCase{"2001:db8:ffff::1", cityRecord("JP", "13", "Tokyo"), "JP", "13"},
		lookupCase{"2001:db8:1::1", countryRecord("NL"), "NL", ""},
		lookupCase{"2001:db9::", nil, "", ""},
		lookupCase{"2a0f:ffff::1", scalarRecord(), "", ""},
		lookupCase{"2a10::", nil, "", ""},
		lookupCase{"::", nil, "", ""},
		lookupCase{"::1", nil, "", ""},
		// ::/96 is where the IPv4 space lives in an IPv6 tree.
		lookupCase{"::1.2.3.4", mu, "DE", "BY"},
		lookupCase{"fe80::1%eth0", nil, "", ""},
		lookupCase{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", map[string]any{"name": "last6"}, "", ""},
	)
	if alias {
		return append(cases,
			lookupCase{"2002:102:304::1", mu, "DE", "BY"},
			lookupCase{"2002:a00:1::", fr, "FR", ""},
		)
	}
	return append(cases, lookupCase{"2002:102:304::1", nil, "", ""})
}

// variants are the database shapes every functional test runs against.
func variants() []writerOptions {
	var vs []writerOptions
	for _, size := range []int{24, 28, 32} {
		for _, dedup := range []bool{false, true} {
			vs = append(vs,
				writerOptions{ipVersion: 4, recordSize: size, dedup: dedup},
				writerOptions{ipVersion: 6, recordSize: size, dedup: dedup},
				writerOptions{ipVersion: 6, recordSize: size, dedup: dedup, aliasIPv4: true, breadthFirst: size == 24},
			)
		}
	}
	return vs
}

func (o writerOptions) String() string {
	return fmt.Sprintf("v%d-rs%d-dedup=%v-alias=%v-bfs=%v", o.ipVersion, o.recordSize, o.dedup, o.aliasIPv4, o.breadthFirst)
}

func TestLookups(t *testing.T) {
	for _, o := range variants() {
		t.Run(o.String(), func(t *testing.T) {
			db := buildDB(t, o, testNetworks(o.ipVersion == 6))
			r, err := FromBytes(db)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Verify(); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			for _, c := range lookupCases(o.ipVersion == 6, o.aliasIPv4) {
				ip := mustAddr(c.addr)
				got, err := r.Lookup(ip)
				if err != nil {
					t.Fatalf("Lookup(%s): %v", ip, err)
				}
				var exp any
				if c.record != nil {
					exp = want(c.record)
				}
				if !reflect.DeepEqual(normalize(got), exp) {
					t.Errorf("Lookup(%s) = %#v, want %#v", ip, got, exp)
				}
				cc, err := r.Country(ip)
				if err != nil || cc != c.country {
					t.Errorf("Country(%s) = %q, %v; want %q", ip, cc, err, c.country)
				}
				cc, sub, err := r.CountryAndSubdivision(ip)
				if err != nil || cc != c.country || sub != c.subdivision {
					t.Errorf("CountryAndSubdivision(%s) = %q, %q, %v; want %q, %q", ip, cc, sub, err, c.country, c.subdivision)
				}
			}
		})
	}
}

func TestMetadata(t *testing.T) {
	for _, o := range variants() {
		db := buildDB(t, o, testNetworks(o.ipVersion == 6))
		r, err := FromBytes(db)
		if err != nil {
			t.Fatal(err)
		}
		m := r.Metadata()
		if m.DatabaseType != "OpenFlare-Test-City" || m.IPVersion != uint(o.ipVersion) || m.RecordSize != uint(o.recordSize) ||
			m.BuildEpoch != 1_700_000_000 || m.BinaryFormatMajorVersion != 2 || m.BinaryFormatMinorVersion != 0 ||
			!reflect.DeepEqual(m.Languages, []string{"en", "de"}) ||
			!reflect.DeepEqual(m.Description, map[string]string{"en": "test database", "de": "Testdatenbank"}) {
			t.Errorf("%v: metadata %+v", o, m)
		}
		if want := uint64(len(r.tree)) * 4 / uint64(o.recordSize); uint64(m.NodeCount) != want || m.NodeCount < 32 {
			t.Errorf("%v: node count %d, tree of %d bytes", o, m.NodeCount, len(r.tree))
		}
		// The caller's copy is its own.
		m.Languages[0], m.Description["en"] = "xx", "xx"
		if m2 := r.Metadata(); m2.Languages[0] != "en" || m2.Description["en"] != "test database" {
			t.Errorf("Metadata shares its slices and maps")
		}
	}
}

// TestOptionalMetadata checks that languages and description may be absent
// and that a wider unsigned type than the spec's is accepted.
func TestOptionalMetadata(t *testing.T) {
	db := buildDB(t, writerOptions{ipVersion: 4, recordSize: 24, meta: func(m map[string]any) {
		delete(m, "languages")
		delete(m, "description")
		m["record_size"] = u64(24)
		m["binary_format_minor_version"] = u32(7)
	}}, testNetworks(false))
	r, err := FromBytes(db)
	if err != nil {
		t.Fatal(err)
	}
	m := r.Metadata()
	if m.Languages != nil || m.Description != nil || m.RecordSize != 24 || m.BinaryFormatMinorVersion != 7 {
		t.Errorf("metadata %+v", m)
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "test.mmdb")
	db := buildDB(t, writerOptions{ipVersion: 6, recordSize: 28, dedup: true, aliasIPv4: true}, testNetworks(true))
	if err := os.WriteFile(path, db, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if cc, err := r.Country(mustAddr("1.2.3.4")); cc != "DE" || err != nil {
		t.Errorf("Country = %q, %v", cc, err)
	}

	if _, err := Open(filepath.Join(dir, "missing.mmdb")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
	big := filepath.Join(dir, "big.mmdb")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, MaxFileSize+1); err != nil { // sparse
		t.Fatal(err)
	}
	if _, err := Open(big); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("oversized file: %v", err)
	}
	bad := filepath.Join(dir, "bad.mmdb")
	if err := os.WriteFile(bad, db[:len(db)-1], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad); !errors.Is(err, ErrInvalidDatabase) || !strings.Contains(err.Error(), bad) {
		t.Errorf("truncated file: %v", err)
	}
}

func TestInvalidAddress(t *testing.T) {
	r, err := FromBytes(buildDB(t, writerOptions{ipVersion: 6, recordSize: 24}, testNetworks(true)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lookup(netip.Addr{}); err == nil {
		t.Error("Lookup of the zero Addr succeeded")
	}
	if _, err := r.Country(netip.Addr{}); err == nil {
		t.Error("Country of the zero Addr succeeded")
	}
	if _, _, err := r.CountryAndSubdivision(netip.Addr{}); err == nil {
		t.Error("CountryAndSubdivision of the zero Addr succeeded")
	}
}

// TestPayloadSizes covers the one-, two- and three-byte size extensions and
// every pointer width, with the pointers decoded where the writer would not
// put them.
func TestPayloadSizes(t *testing.T) {
	rec := map[string]any{"s65820": strings.Repeat("f", 65820), "s65821": strings.Repeat("g", 65821), "s70000": strings.Repeat("h", 70000)}
	r, err := FromBytes(buildDB(t, writerOptions{ipVersion: 4, recordSize: 24}, []network{{mustPrefix("0.0.0.0/0"), rec}}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Lookup(mustAddr("8.8.8.8"))
	if err != nil || !reflect.DeepEqual(got, want(rec)) {
		t.Errorf("Lookup: %v", err)
	}

	// A section with strings at offsets 100, 3000 and 600000, reached by
	// pointers of every size, including the 32-bit form for a small value.
	const at = 600000
	s := make(section, at, at+100)
	s = append(s, appendHeader(nil, kindString, 5)...)
	s = append(s, "hello"...)
	copy(s[100:], "\x41x") // a one-byte string
	copy(s[3000:], "\x41y")
	ptrs := [][]byte{
		appendPointer(nil, 100),  // 0x20|v>>8, v: 11 bits
		appendPointer(nil, 3000), // 19 bits + 2048
		appendPointer(nil, at),   // 27 bits + 526336
		{0x38, 0, 0, 0, 100},
		{0x3f, 0, 0, 0, 100}, // the value bits of the control byte are ignored
	}
	wantStr := []string{"x", "y", "hello", "x", "x"}
	for i, p := range ptrs {
		if len(p) != min(i, 3)+2 {
			t.Fatalf("writer: pointer % x has the wrong size", p)
		}
		copy(s[10:], p)
		d := decoder{s: s, build: true, items: maxItems, bytes: maxBytes}
		v, next, err := d.value(10, 0)
		if err != nil || v != wantStr[i] || next != 10+len(p) {
			t.Errorf("pointer % x: %v, %d, %v", p, v, next, err)
		}
	}
}

// TestCodes covers the shapes Country and CountryAndSubdivision accept and
// reject.
func TestCodes(t *testing.T) {
	cases := []struct {
		record  any
		country string
		sub     string
		err     string
	}{
		{cityRecord("US", "CA", "x"), "US", "CA", ""},
		{cityRecord("us", "tx", "x"), "US", "TX", ""},
		{cityRecord("U", "a1", "x"), "U", "A1", ""},
		{cityRecord("XYZ", "Ä1", "x"), "XYZ", "Ä1", ""},
		{countryRecord("SE"), "SE", "", ""},
		{map[string]any{}, "", "", ""},
		{map[string]any{"country": map[string]any{}}, "", "", ""},
		{map[string]any{"subdivisions": []any{map[string]any{"iso_code": "NY"}}}, "", "NY", ""},
		{"just a string", "", "", "not a map"},
		{map[string]any{"country": "US"}, "", "", "not a map"},
		{map[string]any{"country": map[string]any{"iso_code": u16(1)}}, "", "", "iso_code is a uint16"},
		{map[string]any{"subdivisions": map[string]any{}}, "", "", "subdivisions is a map"},
		{map[string]any{"subdivisions": []any{"CA"}}, "", "", "not a map"},
	}
	for _, c := range cases {
		r, err := FromBytes(buildDB(t, writerOptions{ipVersion: 4, recordSize: 24, dedup: true}, []network{{mustPrefix("0.0.0.0/1"), c.record}}))
		if err != nil {
			t.Fatal(err)
		}
		ip := mustAddr("1.2.3.4")
		cc, sub, err := r.CountryAndSubdivision(ip)
		if c.err != "" {
			if !errors.Is(err, ErrInvalidDatabase) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: err %v, want %q", c.record, err, c.err)
			}
			continue
		}
		if err != nil || cc != c.country || sub != c.sub {
			t.Errorf("%v: %q %q %v", c.record, cc, sub, err)
		}
		if cc, err := r.Country(ip); err != nil || cc != c.country {
			t.Errorf("%v: Country %q %v", c.record, cc, err)
		}
	}
}

// TestCountryAllocations checks the promise of the hot path: a two-letter
// code costs no allocation.
func TestCountryAllocations(t *testing.T) {
	r, err := FromBytes(buildDB(t, writerOptions{ipVersion: 6, recordSize: 28, dedup: true, aliasIPv4: true}, testNetworks(true)))
	if err != nil {
		t.Fatal(err)
	}
	v4, v6 := mustAddr("1.2.3.4"), mustAddr("2001:db8::1")
	if n := testing.AllocsPerRun(100, func() {
		if cc, err := r.Country(v4); cc != "DE" || err != nil {
			t.Fatal(cc, err)
		}
		if cc, sub, err := r.CountryAndSubdivision(v6); cc != "JP" || sub != "13" || err != nil {
			t.Fatal(cc, sub, err)
		}
	}); n > 1 {
		t.Errorf("%v allocations per lookup pair", n)
	}
}

// TestIPv4StartTerminal covers IPv6 trees where the walk along ::/96 ends
// early, at data or at "no data": every IPv4 address then gets that answer.
func TestIPv4StartTerminal(t *testing.T) {
	for _, c := range []struct {
		nets []network
		want any
	}{
		{[]network{{mustPrefix("::/64"), countryRecord("AQ")}, {mustPrefix("2001:db8::/32"), countryRecord("JP")}}, countryRecord("AQ")},
		{[]network{{mustPrefix("2001:db8::/32"), countryRecord("JP")}}, nil},
	} {
		for _, size := range []int{24, 28, 32} {
			r, err := FromBytes(buildDB(t, writerOptions{ipVersion: 6, recordSize: size}, c.nets))
			if err != nil {
				t.Fatal(err)
			}
			if r.ipv4Start < r.nodeCount {
				t.Fatalf("IPv4 start %d is a node of %d", r.ipv4Start, r.nodeCount)
			}
			if err := r.Verify(); err != nil {
				t.Fatal(err)
			}
			for _, a := range []string{"0.0.0.0", "1.2.3.4", "::ffff:8.8.8.8", "255.255.255.255"} {
				got, err := r.Lookup(mustAddr(a))
				var exp any
				if c.want != nil {
					exp = want(c.want)
				}
				if err != nil || !reflect.DeepEqual(got, exp) {
					t.Errorf("Lookup(%s) = %v, %v; want %v", a, got, err, exp)
				}
			}
			if cc, err := r.Country(mustAddr("2001:db8::1")); cc != "JP" || err != nil {
				t.Errorf("Country(2001:db8::1) = %q, %v", cc, err)
			}
		}
	}
}

// TestConcurrent runs lookups from several goroutines, for the race
// detector: a Reader is shared by every request handler.
func TestConcurrent(t *testing.T) {
	r, err := FromBytes(buildDB(t, writerOptions{ipVersion: 6, recordSize: 28, dedup: true, aliasIPv4: true}, testNetworks(true)))
	if err != nil {
		t.Fatal(err)
	}
	cases := lookupCases(true, true)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				for _, c := range cases {
					if cc, sub, err := r.CountryAndSubdivision(mustAddr(c.addr)); err != nil || cc != c.country || sub != c.subdivision {
						t.Errorf("%s: %q %q %v", c.addr, cc, sub, err)
						return
					}
				}
				if err := r.Verify(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
