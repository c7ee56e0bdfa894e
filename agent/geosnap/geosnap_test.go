package geosnap

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"openflare/internal/mmdb"
	"openflare/internal/rangefile"
	"openflare/testing/geodb"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// The test databases: the City one answers for part of the space, the
// Country one for more, and disagrees with City where both answer (City
// must win there).
var (
	cityNets = []geodb.Network{
		{Prefix: pfx("1.0.0.0/16"), Country: "US", Subdivision: "CA"},
		{Prefix: pfx("1.1.0.0/16"), Country: "US", Subdivision: "NY"},
		{Prefix: pfx("1.2.0.0/15"), Country: "US", Subdivision: "CA"},
		{Prefix: pfx("2.0.0.0/8"), Country: "DE", Subdivision: "BY"},
		{Prefix: pfx("5.0.0.0/24"), Country: "FR", Subdivision: "FR-IDF"},
		{Prefix: pfx("6.0.0.0/24"), Country: "", Subdivision: "ZZ"},
		{Prefix: pfx("2001:db8::/32"), Country: "GB", Subdivision: "ENG"},
		{Prefix: pfx("2001:db8:1::/48"), Country: "GB", Subdivision: "SCT"},
	}
	countryNets = []geodb.Network{
		{Prefix: pfx("1.0.0.0/8"), Country: "US"},
		{Prefix: pfx("2.0.0.0/7"), Country: "FR"},
		{Prefix: pfx("4.0.0.0/8"), Country: "JP"},
		{Prefix: pfx("6.0.0.0/16"), Country: "JP"},
		{Prefix: pfx("2001:db8::/31"), Country: "FR"},
		{Prefix: pfx("2a00::/16"), Country: "IT"},
	}
	allCodes = Codes{
		Countries: []string{"DE", "FR", "GB", "IT", "JP", "US"},
		Regions:   []string{"DE-BY", "FR-IDF", "GB-ENG", "GB-SCT", "US-CA", "US-NY", "US-TX"},
	}
)

type dbFiles struct{ city, country, city4 string }

var (
	dbOnce sync.Once
	dbDir  string
	dbErr  error
)

// testDBs writes the databases once per run with MaxMind's writer.
func testDBs(t *testing.T) dbFiles {
	t.Helper()
	if why := geodb.Available(); why != "" {
		t.Skip(why)
	}
	dbOnce.Do(func() {
		if dbDir, dbErr = os.MkdirTemp("", "geosnap-test-"); dbErr != nil {
			return
		}
		for _, w := range []struct {
			name string
			o    geodb.Options
			nets []geodb.Network
		}{
			{"city.mmdb", geodb.Options{Type: "GeoLite2-City", Epoch: 1_700_000_000}, cityNets},
			{"country.mmdb", geodb.Options{Type: "GeoLite2-Country", Epoch: 1_700_000_000}, countryNets},
			{"city4.mmdb", geodb.Options{Type: "GeoLite2-City", Epoch: 1_700_000_000, IPv4Only: true}, cityNets[:6]},
		} {
			if dbErr = geodb.Write(filepath.Join(dbDir, w.name), w.o, w.nets); dbErr != nil {
				return
			}
		}
	})
	if dbErr != nil {
		t.Fatal(dbErr)
	}
	return dbFiles{filepath.Join(dbDir, "city.mmdb"), filepath.Join(dbDir, "country.mmdb"), filepath.Join(dbDir, "city4.mmdb")}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if dbDir != "" {
		os.RemoveAll(dbDir)
	}
	os.Exit(code)
}

func open(t testing.TB, path string) *mmdb.Reader {
	t.Helper()
	if path == "" {
		return nil
	}
	r, err := mmdb.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// sets decodes a compiled file into name → ranges, independently of the
// writer: each range as a pair of 16-byte addresses (IPv4 as ::a.b.c.d
// with a v4 mark).
type fileRange struct {
	v4     bool
	lo, hi [16]byte
}

func decode(t *testing.T, b []byte) (flags uint32, sets map[string][]fileRange) {
	t.Helper()
	w := func(off int) uint32 { return binary.NativeEndian.Uint32(b[off:]) }
	if len(b) < 88 || string(b[:8]) != "OFGEOBIN" || w(8) != 1 || w(12) != 0x01020304 {
		t.Fatalf("header % x", b[:min(len(b), 16)])
	}
	flags = w(84)
	sets = map[string][]fileRange{}
	for i := range int(w(80)) {
		rec := 88 + 32*i
		name := strings.TrimRight(string(b[rec:rec+8]), "\x00")
		n4, off4, n6, off6 := int(w(rec+12)), int(w(rec+16)), int(w(rec+20)), int(w(rec+24))
		var rs []fileRange
		for j := range n4 {
			var lo, hi [16]byte
			binary.BigEndian.PutUint32(lo[12:], w(off4+8*j))
			binary.BigEndian.PutUint32(hi[12:], w(off4+8*j+4))
			rs = append(rs, fileRange{true, lo, hi})
		}
		for j := range n6 {
			var lo, hi [16]byte
			for k := range 4 {
				binary.BigEndian.PutUint32(lo[4*k:], w(off6+32*j+4*k))
				binary.BigEndian.PutUint32(hi[4*k:], w(off6+32*j+16+4*k))
			}
			rs = append(rs, fileRange{false, lo, hi})
		}
		sets[name] = rs
	}
	return flags, sets
}

// in reports whether ip is in the set, families apart as the workers keep
// them.
func in(rs []fileRange, ip netip.Addr) bool {
	var a [16]byte
	if ip.Is4() {
		a4 := ip.As4()
		copy(a[12:], a4[:])
	} else {
		a = ip.As16()
	}
	for _, r := range rs {
		if r.v4 == ip.Is4() && bytes.Compare(r.lo[:], a[:]) <= 0 && bytes.Compare(a[:], r.hi[:]) <= 0 {
			return true
		}
	}
	return false
}

// want is DATAPLANE 4 for one address, from single lookups: City first,
// then Country; a region from City only.
func want(t *testing.T, src Sources, ip netip.Addr) (country, reg string) {
	t.Helper()
	if src.City != nil {
		_, off, ok, err := src.City.LookupNetwork(ip)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			c, sub, err := src.City.CodesAt(off)
			if err != nil {
				t.Fatal(err)
			}
			return c, region(c, sub)
		}
	}
	if src.Country != nil {
		c, err := src.Country.Country(ip)
		if err != nil {
			t.Fatal(err)
		}
		return c, ""
	}
	return "", ""
}

// samples are the edges of every test network, their neighbours, and the
// same as IPv4-mapped IPv6.
func samples() []netip.Addr {
	var out []netip.Addr
	for _, n := range slices.Concat(cityNets, countryNets) {
		p := n.Prefix.Masked()
		first := p.Addr()
		last := first
		for range 1 << min(p.Addr().BitLen()-p.Bits(), 20) {
			last = last.Next()
		}
		out = append(out, first, first.Prev(), first.Next(), last, last.Next(), last.Prev())
	}
	out = append(out, netip.MustParseAddr("9.9.9.9"), netip.MustParseAddr("2001:db8:1::42"), netip.MustParseAddr("2a00:1::1"))
	var mapped []netip.Addr
	for _, a := range out {
		if a.Is4() {
			mapped = append(mapped, netip.AddrFrom16(a.As16()))
		}
	}
	return slices.DeleteFunc(append(out, mapped...), func(a netip.Addr) bool { return !a.IsValid() })
}

func TestCompileFollowsLookups(t *testing.T) {
	dbs := testDBs(t)
	for _, c := range []struct {
		name      string
		src       Sources
		wantFlags uint32
	}{
		{"city and country", Sources{City: open(t, dbs.city), Country: open(t, dbs.country)}, FlagCity | FlagCountry},
		{"city only", Sources{City: open(t, dbs.city)}, FlagCity},
		{"country only", Sources{Country: open(t, dbs.country)}, FlagCountry},
		{"IPv4 city tree and country", Sources{City: open(t, dbs.city4), Country: open(t, dbs.country)}, FlagCity | FlagCountry},
		{"no database", Sources{}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := Compile(c.src, allCodes, strings.Repeat("a", 64))
			if err != nil {
				t.Fatal(err)
			}
			flags, sets := decode(t, b)
			if flags != c.wantFlags {
				t.Errorf("flags %b, want %b", flags, c.wantFlags)
			}
			for _, ip := range samples() {
				country, reg := want(t, c.src, ip)
				for _, code := range allCodes.Countries {
					if got := in(sets["c"+code], ip); got != (code == country) {
						t.Errorf("%s in country %s: %v, lookups say country %q", ip, code, got, country)
					}
				}
				for _, code := range allCodes.Regions {
					if got := in(sets["r"+code], ip); got != (code == reg) {
						t.Errorf("%s in region %s: %v, lookups say region %q", ip, code, got, reg)
					}
				}
			}
		})
	}
}

// The reference lookups above agree with libmaxminddb's mmdblookup on the
// same files.
func TestReferenceAgreesWithMmdblookup(t *testing.T) {
	dbs := testDBs(t)
	if _, err := exec.LookPath("mmdblookup"); err != nil {
		t.Skip("mmdblookup not installed (Debian package mmdb-bin)")
	}
	for _, file := range []string{dbs.city, dbs.country} {
		r := open(t, file)
		for _, ip := range samples() {
			got, err := r.Country(ip)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := exec.Command("mmdblookup", "--file", file, "--ip", ip.String(), "country", "iso_code").CombinedOutput()
			var lib string
			if i := strings.Index(string(out), `"`); i >= 0 {
				lib = strings.SplitN(string(out[i+1:]), `"`, 2)[0]
			}
			if got != lib {
				t.Errorf("%s %s: internal/mmdb %q, mmdblookup %q (%s)", filepath.Base(file), ip, got, lib, bytes.TrimSpace(out))
			}
		}
	}
}

func TestCodesOf(t *testing.T) {
	doc := `{"rule_groups":[
	  {"id":1,"graph":{"entry":"s","nodes":{
	    "s":{"type":"start","next":{"next":"g"}},
	    "g":{"type":"geo_match","config":{"countries":["us","DE",7,null,"","TOOLONGX"],"regions":["us-ca"]}},
	    "h":{"type":"geo_match","config":{"countries":"US","regions":["DE-BY","us-ca"]}},
	    "i":{"type":"ip_match","config":{"countries":["XX"]}}}}},
	  {"id":2,"graph":"broken"},
	  {"id":3,"graph":{"nodes":{"g":{"type":"geo_match","config":{"countries":["fr"]}}}}}
	],"bindings":null}`
	got, err := CodesOf([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := Codes{Countries: []string{"DE", "FR", "US"}, Regions: []string{"DE-BY", "US-CA"}}
	if !slices.Equal(got.Countries, want.Countries) || !slices.Equal(got.Regions, want.Regions) {
		t.Errorf("codes %v, want %v", got, want)
	}
	for _, doc := range []string{`{}`, `{"rule_groups":null}`, `{"rule_groups":{"a":1}}`, `{"rule_groups":[1,"x"]}`} {
		if got, err := CodesOf([]byte(doc)); err != nil || !got.Empty() {
			t.Errorf("%s: %v %v, want no codes", doc, got, err)
		}
	}
	if _, err := CodesOf([]byte(`{"rule_groups":`)); err == nil {
		t.Error("a truncated document gave no error")
	}
}

func geoConfig(countries ...string) []byte {
	q := make([]string, len(countries))
	for i, c := range countries {
		q[i] = `"` + c + `"`
	}
	return []byte(`{"rule_groups":[{"id":2,"enabled":true,"graph":{"entry":"s","nodes":{"s":{"type":"start","next":{"next":"g"}},` +
		`"g":{"type":"geo_match","config":{"countries":[` + strings.Join(q, ",") + `]},"next":{"true":"a","false":"a"}},"a":{"type":"allow"}}}}]}`)
}

func TestBuilder(t *testing.T) {
	dbs := testDBs(t)
	dir := t.TempDir()
	city := filepath.Join(dir, "GeoLite2-City.mmdb")
	country := filepath.Join(dir, "GeoLite2-Country.mmdb")
	b := &Builder{Dir: dir, CityPath: city, CountryPath: country}
	snapshot := filepath.Join(dir, Name)
	writeConfig := func(doc []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, WAFConfigFile), doc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := func(keep, wantChanged bool) Status {
		t.Helper()
		changed, err := b.Build(keep)
		if err != nil {
			t.Fatal(err)
		}
		if changed != wantChanged {
			t.Fatalf("changed %v, want %v", changed, wantChanged)
		}
		return b.Status()
	}
	holds := func(countries ...string) {
		t.Helper()
		data, err := os.ReadFile(snapshot)
		if err != nil {
			t.Fatal(err)
		}
		_, sets := decode(t, data)
		var got []string
		for n := range sets {
			got = append(got, n[1:])
		}
		slices.Sort(got)
		if !slices.Equal(got, countries) {
			t.Fatalf("snapshot holds %q, want %q", got, countries)
		}
	}

	// No WAF config, or one without geo_match: no file.
	build(false, false)
	writeConfig([]byte(`{"rule_groups":[]}`))
	build(false, false)
	if _, err := os.Stat(snapshot); !os.IsNotExist(err) {
		t.Fatalf("snapshot without geo rules: %v", err)
	}

	// Rules but no database: a file that says so (the rules take their
	// false edge), and the status names the problem.
	writeConfig(geoConfig("US"))
	st := build(false, true)
	if len(st.Databases) != 0 || st.Codes.Empty() {
		t.Errorf("status %+v, want codes and no database", st)
	}
	if data, _ := os.ReadFile(snapshot); len(data) < 88 || binary.NativeEndian.Uint32(data[84:]) != 0 {
		t.Errorf("snapshot without databases has flags set")
	}

	// The databases arrive (by rename, as agent/geoip installs them).
	for _, c := range [][2]string{{dbs.city, city}, {dbs.country, country}} {
		data, err := os.ReadFile(c[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(c[1]+".tmp", data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(c[1]+".tmp", c[1]); err != nil {
			t.Fatal(err)
		}
	}
	st = build(false, true)
	if !slices.Equal(st.Databases, []string{"city", "country"}) || len(st.Problems) != 0 {
		t.Errorf("status %+v, want both databases", st)
	}
	holds("US")
	// Nothing changed: nothing compiled.
	build(false, false)
	// A new process (the agent restarted) finds the file up to date and
	// knows which databases it came from.
	b = &Builder{Dir: dir, CityPath: city, CountryPath: country}
	if st := build(false, false); !slices.Equal(st.Databases, []string{"city", "country"}) {
		t.Errorf("status after a restart %+v, want both databases", st)
	}

	// During an apply the old codes are kept beside the new ones; the
	// next build without keep drops them.
	writeConfig(geoConfig("DE", "FR"))
	build(true, true)
	holds("DE", "FR", "US")
	build(false, true)
	holds("DE", "FR")

	// A database replaced by rename is a new snapshot.
	data, _ := os.ReadFile(dbs.country)
	os.WriteFile(country+".tmp", data, 0o644)
	os.Rename(country+".tmp", country)
	build(false, true)

	// A database that does not open is left out and named.
	os.WriteFile(city+".tmp", []byte("not a database"), 0o644)
	os.Rename(city+".tmp", city)
	st = build(false, true)
	if !slices.Equal(st.Databases, []string{"country"}) || len(st.Problems) != 1 || !strings.Contains(st.Problems[0], city) {
		t.Errorf("status %+v, want the country database and a problem naming %s", st, city)
	}

	// The rules go away: so does the file.
	writeConfig([]byte(`{"rule_groups":[]}`))
	build(false, true)
	if _, err := os.Stat(snapshot); !os.IsNotExist(err) {
		t.Fatalf("snapshot after the rules went: %v", err)
	}
}

// The range list and the subtraction against a bitmap of a small space,
// with input in order (as a walk gives it), out of order, overlapping and
// adjacent, across chunk boundaries.
func TestListAndWithout(t *testing.T) {
	const space = 1 << 14
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var l, cover list
		var want, covered [space]bool
		ordered := round%2 == 0
		lo := uint64(0)
		for range rng.IntN(3000) {
			if !ordered {
				lo = uint64(rng.IntN(space - 64))
			} else if lo += uint64(rng.IntN(8)); lo >= space-64 {
				break
			}
			hi := lo + uint64(rng.IntN(6))
			l.add(rangefile.Range{Lo: rangefile.U128{Lo: lo}, Hi: rangefile.U128{Lo: hi}})
			for a := lo; a <= hi; a++ {
				want[a] = true
			}
		}
		for range rng.IntN(40) {
			a := uint64(rng.IntN(space - 200))
			b := a + uint64(rng.IntN(200))
			cover.add(rangefile.Range{Lo: rangefile.U128{Lo: a}, Hi: rangefile.U128{Lo: b}})
			for x := a; x <= b; x++ {
				covered[x] = true
			}
		}
		var got, rest [space]bool
		prev := rangefile.Range{}
		first := true
		l.each(func(s rangefile.Range) {
			if !first {
				if after, _ := prev.Hi.Next(); !after.Less(s.Lo) {
					t.Fatalf("round %d: spans %v and %v overlap, touch or descend", round, prev, s)
				}
			}
			first, prev = false, s
			for a := s.Lo.Lo; a <= s.Hi.Lo; a++ {
				got[a] = true
			}
			without(s, cover.flat(), func(p rangefile.Range) {
				for a := p.Lo.Lo; a <= p.Hi.Lo; a++ {
					rest[a] = true
				}
			})
		})
		for a := range space {
			if got[a] != want[a] {
				t.Fatalf("round %d: address %d in list %v, want %v", round, a, got[a], want[a])
			}
			if rest[a] != (want[a] && !covered[a]) {
				t.Fatalf("round %d: address %d left after subtracting: %v, want %v", round, a, rest[a], want[a] && !covered[a])
			}
		}
	}
}
