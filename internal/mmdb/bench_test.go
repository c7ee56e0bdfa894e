package mmdb

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// benchDB is a database shaped like GeoLite2 City: 60 000 IPv4 and 40 000
// IPv6 networks over 1 000 distinct deduplicated records, 28-bit records,
// IPv4 aliased at ::ffff:0:0/96 and 2002::/16. v4 and v6 are addresses
// inside its networks.
func benchDB(tb testing.TB) ([]byte, [2][]netip.Addr) {
	bench.Do(func() { bench.db, bench.addrs = buildBenchDB(tb) })
	return bench.db, bench.addrs
}

var bench struct {
	sync.Once
	db    []byte
	addrs [2][]netip.Addr
}

func buildBenchDB(tb testing.TB) ([]byte, [2][]netip.Addr) {
	rng := rand.New(rand.NewPCG(1, 2))
	countries := []string{"US", "DE", "FR", "GB", "JP", "CN", "BR", "IN", "RU", "NL", "SE", "IT", "ES", "CA", "AU", "PL", "CH", "AT", "BE", "KR"}
	records := make([]any, 1000)
	for i := range records {
		records[i] = cityRecord(countries[i%len(countries)], fmt.Sprintf("S%d", i%37), fmt.Sprintf("City %d", i))
	}
	var nets []network
	var addrs [2][]netip.Addr
	for range 60_000 {
		a := netip.AddrFrom4([4]byte{byte(1 + rng.IntN(222)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
		p := netip.PrefixFrom(a, 16+rng.IntN(9)).Masked()
		nets = append(nets, network{p, records[rng.IntN(len(records))]})
		addrs[0] = append(addrs[0], a)
	}
	for range 40_000 {
		var b [16]byte
		b[0], b[1] = 0x20|byte(rng.IntN(16)), byte(rng.IntN(256))
		if b[0] == 0x20 && b[1] == 0x02 {
			b[1] = 0x03 // 2002::/16 is an alias of the IPv4 space
		}
		for i := 2; i < 16; i++ {
			b[i] = byte(rng.IntN(256))
		}
		a := netip.AddrFrom16(b)
		p := netip.PrefixFrom(a, 24+rng.IntN(25)).Masked()
		nets = append(nets, network{p, records[rng.IntN(len(records))]})
		addrs[1] = append(addrs[1], a)
	}
	db := buildDB(tb, writerOptions{ipVersion: 6, recordSize: 28, dedup: true, aliasIPv4: true}, nets)
	return db, addrs
}

func benchReader(b *testing.B) (*Reader, [2][]netip.Addr) {
	db, addrs := benchDB(b)
	r, err := FromBytes(db)
	if err != nil {
		b.Fatal(err)
	}
	return r, addrs
}

// BenchmarkCountry looks up addresses of a working set of 1 000 (a WAF sees
// the same clients again and again, so the tree paths stay in the CPU
// cache) and, as "cold", of all 100 000 networks in turn, which is bound by
// cache misses in a tree of some 900 000 nodes.
func BenchmarkCountry(b *testing.B) {
	r, addrs := benchReader(b)
	for i, name := range []string{"IPv4", "IPv6", "IPv4-cold", "IPv6-cold"} {
		b.Run(name, func(b *testing.B) {
			ips := addrs[i%2]
			if i < 2 {
				ips = ips[:1000]
			}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				cc, err := r.Country(ips[n%len(ips)])
				if err != nil || cc == "" {
					b.Fatal(cc, err)
				}
				n++
			}
		})
	}
}

func BenchmarkCountryAndSubdivision(b *testing.B) {
	r, addrs := benchReader(b)
	ips := addrs[0]
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if _, _, err := r.CountryAndSubdivision(ips[n%len(ips)]); err != nil {
			b.Fatal(err)
		}
		n++
	}
}

func BenchmarkLookup(b *testing.B) {
	r, addrs := benchReader(b)
	ips := addrs[0]
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if v, err := r.Lookup(ips[n%len(ips)]); err != nil || v == nil {
			b.Fatal(v, err)
		}
		n++
	}
}

func BenchmarkVerify(b *testing.B) {
	r, _ := benchReader(b)
	b.ReportMetric(float64(r.nodeCount), "nodes")
	for b.Loop() {
		if err := r.Verify(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBenchDB checks the benchmark database itself, and that Verify of it
// stays fast.
func TestBenchDB(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 100 000-network database")
	}
	db, addrs := benchDB(t)
	r, err := FromBytes(db)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes, %d nodes, Verify %v", len(db), r.nodeCount, time.Since(start))
	for _, ips := range addrs {
		for _, ip := range ips[:1000] {
			if cc, err := r.Country(ip); err != nil || cc == "" {
				t.Fatalf("Country(%s) = %q, %v", ip, cc, err)
			}
		}
	}
}

// BenchmarkLookupString is the general form of the country lookup: a tree
// walk and the decoding of one path. country.iso_code shares Country's
// per-record cache; "path" looks up subdivisions.0.iso_code instead, which
// is decoded every time (the last value of the City record's map).
func BenchmarkLookupString(b *testing.B) {
	r, addrs := benchReader(b)
	for i, name := range []string{"IPv4", "IPv6", "IPv4-cold", "IPv6-cold", "IPv4-path"} {
		b.Run(name, func(b *testing.B) {
			ips := addrs[i%2]
			if i < 2 || i == 4 {
				ips = ips[:1000]
			}
			path := []string{"country", "iso_code"}
			if i == 4 {
				path = []string{"subdivisions", "0", "iso_code"}
			}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				cc, ok, err := r.LookupString(ips[n%len(ips)], path...)
				if err != nil || !ok || cc == "" {
					b.Fatal(cc, ok, err)
				}
				n++
			}
		})
	}
}

// BenchmarkNetworks walks the whole tree; networks/s is the figure the geo
// snapshot compiler depends on.
func BenchmarkNetworks(b *testing.B) {
	r, _ := benchReader(b)
	b.ReportAllocs()
	total := 0
	for b.Loop() {
		if err := r.Networks(func(netip.Prefix, Offset) bool { total++; return true }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "networks/s")
}

// BenchmarkCountryNetworks is BenchmarkNetworks with the country and
// subdivision codes of every network.
func BenchmarkCountryNetworks(b *testing.B) {
	r, _ := benchReader(b)
	b.ReportAllocs()
	total := 0
	for b.Loop() {
		if err := r.CountryNetworks(func(_ netip.Prefix, cc, _ string) bool {
			if cc == "" {
				b.Fatal("no country")
			}
			total++
			return true
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "networks/s")
}
