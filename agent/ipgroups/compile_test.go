package ipgroups

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"openflare/agent/protocol"
	"openflare/internal/rangefile"
)

// compileList compiles one enabled group holding entries and returns its
// decoded ranges.
func compileList(t testing.TB, entries ...string) compiledGroup {
	t.Helper()
	b, err := Compile(expectedSnapshot(protocol.WAFIPGroup{ID: 1, Enabled: true, IPList: entries}))
	if err != nil {
		t.Fatal(err)
	}
	_, groups, err := decodeCompiled(b)
	if err != nil {
		t.Fatal(err)
	}
	return groups[0]
}

// contains looks addr up the way waf/ip_groups.lua does: a binary search
// for the last range starting at or below it.
func (g compiledGroup) contains(addr netip.Addr) bool {
	if addr.Is4() {
		x := binary.BigEndian.Uint32(addr.AsSlice())
		i := sort.Search(len(g.V4), func(i int) bool { return g.V4[i][0] > x }) - 1
		return i >= 0 && x <= g.V4[i][1]
	}
	x := addr.As16()
	i := sort.Search(len(g.V6), func(i int) bool { return bytes.Compare(g.V6[i][0][:], x[:]) > 0 }) - 1
	return i >= 0 && bytes.Compare(x[:], g.V6[i][1][:]) <= 0
}

func v4(s string) uint32 { return binary.BigEndian.Uint32(netip.MustParseAddr(s).AsSlice()) }

func v6(s string) [16]byte { return netip.MustParseAddr(s).As16() }

// The accepted syntax is waf/ipmatch.lua's, entry for entry.
func TestParseEntrySyntax(t *testing.T) {
	accepted := map[string][2]string{ // entry → lowest and highest address
		"192.0.2.1":             {"192.0.2.1", "192.0.2.1"},
		"0.0.0.0":               {"0.0.0.0", "0.0.0.0"},
		"10.1.2.3/8":            {"10.0.0.0", "10.255.255.255"},
		"1.2.3.4/0":             {"0.0.0.0", "255.255.255.255"},
		"1.2.3.4/32":            {"1.2.3.4", "1.2.3.4"},
		"1.2.3.4/31":            {"1.2.3.4", "1.2.3.5"},
		"::":                    {"::", "::"},
		"::/0":                  {"::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
		"::1":                   {"::1", "::1"},
		"1::":                   {"1::", "1::"},
		"2001:db8::1/32":        {"2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"},
		"2001:0DB8:0:0:0:0:0:1": {"2001:db8::1", "2001:db8::1"},
		"::ffff:192.0.2.1":      {"::ffff:192.0.2.1", "::ffff:192.0.2.1"},
		"1:2:3:4:5:6:1.2.3.4":   {"1:2:3:4:5:6:102:304", "1:2:3:4:5:6:102:304"},
		"1:2:3:4:5:6:7::":       {"1:2:3:4:5:6:7:0", "1:2:3:4:5:6:7:0"},
		"::2:3:4:5:6:7:8":       {"0:2:3:4:5:6:7:8", "0:2:3:4:5:6:7:8"},
		"0000:00:0::0001":       {"::1", "::1"},
		"fe80::/10":             {"fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
		"2001:db8::/127":        {"2001:db8::", "2001:db8::1"},
		"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128": {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
	}
	for s, want := range accepted {
		e, ok := parseEntry(s)
		if !ok {
			t.Errorf("%q refused", s)
			continue
		}
		lo, hi := netip.MustParseAddr(want[0]), netip.MustParseAddr(want[1])
		if lo.Is4() != !e.v6 {
			t.Errorf("%q: family v6=%v", s, e.v6)
			continue
		}
		if lo.Is4() {
			glo, ghi := v4Range(e.v4, e.plen)
			if glo != v4(want[0]) || ghi != v4(want[1]) {
				t.Errorf("%q: range %08x-%08x, want %s-%s", s, glo, ghi, want[0], want[1])
			}
			continue
		}
		glo, ghi := v6Range(e.a6, e.plen)
		if glo != toU128(lo.As16()) || ghi != toU128(hi.As16()) {
			t.Errorf("%q: range %x-%x, want %s-%s", s, glo, ghi, want[0], want[1])
		}
	}
	refused := []string{
		"", " 1.2.3.4", "1.2.3.4 ", "01.2.3.4", "1.2.3.04", "1.2.3.00", "1.2.3", "1.2.3.4.5", "1..2.3",
		"256.1.1.1", "1.2.3.4/33", "1.2.3.4/08", "1.2.3.4/00", "1.2.3.4/", "/8", "1.2.3.4/+8",
		"1.2.3.4/-1", "1.2.3.4/1a", "1.2.3.4/8/8", "1.2.3.4/ 8", "0x1.2.3.4", "1.2.3.4/0128",
		"::/129", "::/0128", ":::", "1:::2", "1::2::3", "1:2:3:4:5:6:7:8::", "1:2:3:4:5:6:7::8",
		"::1:2:3:4:5:6:7:8", "12345::", "1:2:3:4:5:6:7", "1:2:3:4:5:6:7:8:9", "fe80::1%eth0",
		"::1.2.3.4:5", "1.2.3.4::", "::ffff:01.2.3.4", "::1.2.3", "1:2:3:4:5:6:7:1.2.3.4",
		":1::", "1:", ":1", "1:2:3:4:5:6:7:8:", "g::", "::g", "[::1]", "::1/", "1::1.2.3.4/33x",
		"1.2.3.4\x00", "１.2.3.4",
	}
	for _, s := range refused {
		if _, ok := parseEntry(s); ok {
			t.Errorf("%q accepted", s)
		}
	}
}

func toU128(b [16]byte) rangefile.U128 {
	return rangefile.U128{Hi: binary.BigEndian.Uint64(b[:8]), Lo: binary.BigEndian.Uint64(b[8:])}
}

func TestCompileMergesRanges(t *testing.T) {
	g := compileList(t,
		"10.0.0.0/24", "10.0.1.0/24", "10.0.0.5", "10.0.3.0/24", "bogus", "10.0.3.7/32",
		"255.255.255.255", "255.255.255.254/31", "0.0.0.0",
		"2001:db8::/33", "2001:db8:8000::/33", "::ffff:192.0.2.1",
		"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", "::",
	)
	wantV4 := [][2]uint32{
		{0, 0},
		{v4("10.0.0.0"), v4("10.0.1.255")},
		{v4("10.0.3.0"), v4("10.0.3.255")},
		{v4("255.255.255.254"), v4("255.255.255.255")},
	}
	if !slices.Equal(g.V4, wantV4) {
		t.Errorf("IPv4 ranges %x, want %x", g.V4, wantV4)
	}
	wantV6 := [][2][16]byte{
		{v6("::"), v6("::")},
		{v6("::ffff:192.0.2.1"), v6("::ffff:192.0.2.1")},
		{v6("2001:db8::"), v6("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")},
		{v6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"), v6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")},
	}
	if !slices.Equal(g.V6, wantV6) {
		t.Errorf("IPv6 ranges %x, want %x", g.V6, wantV6)
	}
	// IPv4 and IPv4-mapped IPv6 are separate families.
	if g.contains(netip.MustParseAddr("192.0.2.1")) {
		t.Error("::ffff:192.0.2.1 matched 192.0.2.1")
	}
	if !g.contains(netip.MustParseAddr("::ffff:192.0.2.1")) {
		t.Error("::ffff:192.0.2.1 did not match itself")
	}
	// A /0 covers the whole family, and nested ranges vanish into it.
	all := compileList(t, "10.0.0.0/8", "0.0.0.0/0", "10.1.0.0/16", "::1", "::/0", "2001:db8::/32")
	if len(all.V4) != 1 || all.V4[0] != [2]uint32{0, ^uint32(0)} || len(all.V6) != 1 || all.V6[0] != [2][16]byte{v6("::"), v6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")} {
		t.Errorf("/0 ranges: %x %x", all.V4, all.V6)
	}
}

func TestCompileHeaderAndGroups(t *testing.T) {
	snapshot := []byte(`{"groups":{` +
		`"1099511627776":{"id":1099511627776,"enabled":true,"ip_list":["198.51.100.7"]},` +
		`"3":{"id":3,"name":"x","type":"manual","enabled":true,"ip_list":["203.0.113.0/24","198.51.100.7"],"checksum":"c"},` +
		`"4":{"id":4,"enabled":false,"ip_list":["192.0.2.1"]},` +
		`"5":{"id":5,"enabled":true,"ip_list":null},` +
		`"6":{"id":6,"enabled":true,"ip_list":"192.0.2.1"},` +
		`"7":{"id":7,"enabled":true,"ip_list":{"a":["192.0.2.1"]}},` +
		`"8":{"id":8,"enabled":0,"ip_list":[1,null,true,["192.0.2.1"],{"a":"192.0.2.2"},"192.0.2.3"]},` +
		`"9":{"id":9,"ip_list":["192.0.2.1"]},` +
		`"10":{"id":10,"enabled":null,"ip_list":["192.0.2.1"]},` +
		`"11":{"id":11,"enabled":true,"ip_list":["192.0.2.1"],"ip_list":["192.0.2.9"]},` +
		`"12":{"enabled":{"nested":[1,{"x":[]}]},"ip_list":["192.0.2.12"],"extra":[[{"ip_list":[]}]]},` +
		// Hand-edited: white space and escapes, as cjson would read them.
		"\"13\" : {\n \"enabled\" : true ,\r\n\t\"ip_list\" : [ \"\\u0031\\u0039\\u0032.0.2.13\" , \"192.0.2.14\\/32\", \"x\\\"]\" ] , \"n\": -1.5e3 } ," +
		`"14":{"enabled":true,"ip\u005flist":["192.0.2.15"]}` +
		`}}`)
	b, err := Compile(snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:8]) != "OFIPGBIN" || native.Uint32(b[8:]) != 1 || native.Uint32(b[12:]) != 0x01020304 {
		t.Fatalf("header % x", b[:16])
	}
	label, groups, err := decodeCompiled(b)
	if err != nil {
		t.Fatal(err)
	}
	if label != sha(snapshot) {
		t.Errorf("label %s, want the snapshot's sha256 %s", label, sha(snapshot))
	}
	one := func(s string) [][2]uint32 { return [][2]uint32{{v4(s), v4(s)}} }
	want := []compiledGroup{
		{ID: 3, Enabled: true, V4: [][2]uint32{{v4("198.51.100.7"), v4("198.51.100.7")}, {v4("203.0.113.0"), v4("203.0.113.255")}}},
		{ID: 4},
		{ID: 5, Enabled: true},
		{ID: 6, Enabled: true},
		{ID: 7, Enabled: true},
		{ID: 8, Enabled: true, V4: one("192.0.2.3")},
		{ID: 9},
		{ID: 10},
		{ID: 11, Enabled: true, V4: one("192.0.2.9")},
		{ID: 12, Enabled: true, V4: one("192.0.2.12")},
		{ID: 13, Enabled: true, V4: [][2]uint32{{v4("192.0.2.13"), v4("192.0.2.14")}}},
		{ID: 14, Enabled: true, V4: one("192.0.2.15")},
		{ID: 1 << 40, Enabled: true, V4: one("198.51.100.7")},
	}
	if fmt.Sprint(groups) != fmt.Sprint(want) {
		t.Errorf("groups\n got %v\nwant %v", groups, want)
	}

	empty, err := Compile([]byte(`{"groups":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(empty) != headerSize || native.Uint32(empty[groupCountWord:]) != 0 {
		t.Errorf("empty snapshot compiles to %d bytes", len(empty))
	}
	if _, err := Compile([]byte(`{"groups":{"1":{"ip_list":[}}}`)); err == nil {
		t.Error("broken JSON compiled")
	}
}

// The compiled file follows the JSON through every write, and Open
// rebuilds one that is missing or stale.
func TestCompiledFileFollowsSnapshot(t *testing.T) {
	a := group(3, true, "192.0.2.0/24")
	s, dir := seed(t, a)
	assertConsistent(t, dir)

	before := snapshotFiles(t, dir)
	if res, err := push(s, []protocol.WAFIPGroup{a}); err != nil || !res.Unchanged {
		t.Fatalf("push unchanged: %+v %v", res, err)
	}
	assertUntouched(t, dir, before)

	b := group(3, true, "198.51.100.0/24")
	if _, err := push(s, []protocol.WAFIPGroup{b}); err != nil {
		t.Fatal(err)
	}
	assertConsistent(t, dir)

	// A crash after the JSON write: the compiled file still describes the
	// old JSON. And an agent that predates the file: none at all.
	stale := readFile(t, filepath.Join(dir, CompiledName))
	if _, err := push(s, []protocol.WAFIPGroup{a}); err != nil {
		t.Fatal(err)
	}
	for _, damage := range []func(){
		func() { os.WriteFile(filepath.Join(dir, CompiledName), stale, 0o644) },
		func() { os.Remove(filepath.Join(dir, CompiledName)) },
		func() { os.WriteFile(filepath.Join(dir, CompiledName), []byte("OFIPGBIN"), 0o644) },
		func() {
			os.WriteFile(filepath.Join(dir, CompiledName), bytes.Replace(stale, []byte{1, 0, 0, 0}, []byte{2, 0, 0, 0}, 1), 0o644)
		},
	} {
		damage()
		if _, err := Open(dir, nil); err != nil {
			t.Fatal(err)
		}
		assertConsistent(t, dir)
	}
	before = snapshotFiles(t, dir)
	if _, err := Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	assertUntouched(t, dir, before)
}

// randomEntry returns an entry near one of a few clusters, so that ranges
// overlap, nest and touch; now and then it is malformed.
func randomEntry(r *rand.Rand) string {
	switch r.IntN(10) {
	case 0:
		return []string{"", "1.2.3", "::g", "01.2.3.4", "1.2.3.4/33", "::/129", "1:::2"}[r.IntN(7)]
	case 1, 2, 3:
		var b [16]byte
		copy(b[:], []byte{0x20, 0x01, 0x0d, 0xb8})
		if r.IntN(4) == 0 {
			b = [16]byte{10: 0xff, 11: 0xff} // IPv4-mapped
		}
		for i := 12 + r.IntN(4); i < 16; i++ {
			b[i] = byte(r.IntN(4))
		}
		bits := 128 - r.IntN(20)
		if r.IntN(20) == 0 {
			bits = r.IntN(129)
		}
		return netip.PrefixFrom(netip.AddrFrom16(b), bits).String()
	default:
		a := netip.AddrFrom4([4]byte{10, 0, byte(r.IntN(3)), byte(r.IntN(256))})
		bits := 32 - r.IntN(10)
		if r.IntN(40) == 0 {
			bits = r.IntN(33)
		}
		if r.IntN(3) == 0 {
			return a.String()
		}
		return netip.PrefixFrom(a, bits).String()
	}
}

// netipContains is the reference: net/netip containment over the entries
// net/netip accepts.
func netipContains(entries []string, addr netip.Addr) bool {
	for _, e := range entries {
		var p netip.Prefix
		var err error
		if strings.Contains(e, "/") {
			p, err = netip.ParsePrefix(e)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(e); err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err == nil && p.Addr().Zone() == "" && p.Masked().Contains(addr) {
			return true
		}
	}
	return false
}

func TestCompiledMatchesNetip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		entries := make([]string, 1+r.IntN(60))
		for i := range entries {
			entries[i] = randomEntry(r)
		}
		g := compileList(t, entries...)
		for range 200 {
			e, ok := parseEntry(randomEntry(r))
			if !ok {
				continue
			}
			var addr netip.Addr
			if e.v6 {
				lo, hi := v6Range(e.a6, e.plen)
				addr = pick6(r, lo, hi)
			} else {
				lo, hi := v4Range(e.v4, e.plen)
				addr = netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, []uint32{lo, hi, lo - 1, hi + 1}[r.IntN(4)])))
			}
			if got, want := g.contains(addr), netipContains(accepted(entries), addr); got != want {
				t.Fatalf("round %d: %s in %q: compiled %v, net/netip %v", round, addr, entries, got, want)
			}
		}
	}
}

// pick6 returns a bound of [lo, hi] or a neighbour just outside it.
func pick6(r *rand.Rand, lo, hi rangefile.U128) netip.Addr {
	v := []rangefile.U128{lo, hi}[r.IntN(2)]
	switch r.IntN(3) {
	case 0:
		if n, ok := hi.Next(); ok {
			v = n
		}
	case 1:
		if lo != (rangefile.U128{}) {
			v = rangefile.U128{Hi: lo.Hi, Lo: lo.Lo - 1}
			if lo.Lo == 0 {
				v.Hi--
			}
		}
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], v.Hi)
	binary.BigEndian.PutUint64(b[8:], v.Lo)
	// AddrFrom16 keeps a mapped address in the IPv6 family.
	return netip.AddrFrom16(b)
}

// FuzzCompiledContains checks parser and compiler against net/netip: the
// syntax both accept must give the same containment, and an entry only
// this parser accepts is a bug (the Lua syntax is a subset, bar zones).
func FuzzCompiledContains(f *testing.F) {
	f.Add("10.0.0.0/8", "10.255.255.255/32", "::ffff:10.0.0.1", "10.0.0.1")
	f.Add("2001:db8::/32", "2001:db9::", "1:2:3:4:5:6:7::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")
	f.Add("0.0.0.0/0", "::/0", "fe80::1%eth0", "255.255.255.255")
	f.Add("1.2.3.4/08", "01.2.3.4", "::1.2.3.4", "::102:304")
	f.Fuzz(func(t *testing.T, e1, e2, e3, addrText string) {
		entries := []string{e1, e2, e3}
		for _, e := range entries {
			if _, ok := parseEntry(e); ok && !netipAccepts(e) {
				t.Fatalf("%q accepted here, refused by net/netip", e)
			}
		}
		addr, err := netip.ParseAddr(addrText)
		if err != nil || addr.Zone() != "" {
			return
		}
		g := compileList(t, entries...)
		if got, want := g.contains(addr), netipContains(accepted(entries), addr); got != want {
			t.Fatalf("%s in %q: compiled %v, net/netip %v", addr, entries, got, want)
		}
	})
}

// accepted keeps the entries this parser takes: net/netip also takes
// zoned addresses, which the Lua syntax refuses.
func accepted(entries []string) []string {
	var out []string
	for _, e := range entries {
		if _, ok := parseEntry(e); ok {
			out = append(out, e)
		}
	}
	return out
}

func netipAccepts(e string) bool {
	if strings.Contains(e, "/") {
		_, err := netip.ParsePrefix(e)
		return err == nil
	}
	_, err := netip.ParseAddr(e)
	return err == nil
}

func BenchmarkCompile1M(b *testing.B) {
	list := bigList(1_000_000, 0)
	snapshot := expectedSnapshot(protocol.WAFIPGroup{ID: 1, Enabled: true, IPList: list, Checksum: "x"})
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Compile(snapshot); err != nil {
			b.Fatal(err)
		}
	}
}
