package mmdb

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
)

// refFind walks the tree bit by bit, without the IPv4 start node or the
// caches: the reference for findNetwork.
func refFind(r *Reader, ip netip.Addr) (value uint32, bits int) {
	ip = ip.Unmap()
	var a []byte
	if r.meta.IPVersion == 4 {
		if !ip.Is4() {
			return r.nodeCount, 0
		}
		a4 := ip.As4()
		a = a4[:]
	} else {
		a16 := ip.As16()
		if ip.Is4() {
			// IPv4 addresses live in ::/96, not at ::ffff:0:0/96.
			a16 = [16]byte{}
			a4 := ip.As4()
			copy(a16[12:], a4[:])
		}
		a = a16[:]
	}
	node := uint32(0)
	for bits = 0; bits < len(a)*8 && node < r.nodeCount; bits++ {
		node = r.record(node, byte(bitOf(a, bits)))
	}
	if ip.Is4() && r.meta.IPVersion == 6 {
		bits = max(0, bits-96)
	}
	return node, bits
}

// TestCaches compares lookups through the node and code caches, with many
// addresses that share their first bits (so the caches hit) and more than
// the caches hold (so slots are replaced), against the reference walk and a
// fresh Reader, also from several goroutines.
func TestCaches(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	countries := []string{"US", "de", "FR", "XYZ", "", "JP"}
	var nets []network
	for i := range 3000 {
		rec := map[string]any{"country": map[string]any{"iso_code": countries[i%len(countries)]}}
		if i%7 == 0 {
			rec = map[string]any{"continent": "none"}
		}
		a := netip.AddrFrom4([4]byte{byte(rng.IntN(8)), byte(rng.IntN(256)), byte(rng.IntN(256)), 0})
		nets = append(nets, network{netip.PrefixFrom(a, 12+rng.IntN(13)).Masked(), rec})
		var b [16]byte
		b[0], b[1], b[2], b[3], b[4] = 0x20, 0x01, byte(rng.IntN(4)), byte(rng.IntN(256)), byte(rng.IntN(256))
		nets = append(nets, network{netip.PrefixFrom(netip.AddrFrom16(b), 20+rng.IntN(25)).Masked(), rec})
	}
	var ips []netip.Addr
	for range 20000 {
		ips = append(ips, netip.AddrFrom4([4]byte{byte(rng.IntN(9)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}))
		var b [16]byte
		b[0], b[1], b[2], b[3], b[4], b[5], b[15] = 0x20, 0x01, byte(rng.IntN(5)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))
		ips = append(ips, netip.AddrFrom16(b))
	}
	var nets4 []network
	for _, nw := range nets {
		if nw.prefix.Addr().Is4() {
			nets4 = append(nets4, nw)
		}
	}
	for _, o := range []writerOptions{{ipVersion: 6, recordSize: 28, aliasIPv4: true, dedup: true}, {ipVersion: 6, recordSize: 24}, {ipVersion: 4, recordSize: 32}} {
		t.Run(o.String(), func(t *testing.T) {
			n := nets
			if o.ipVersion == 4 {
				n = nets4
			}
			db := buildDB(t, o, n)
			r, err := FromBytes(db)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for g := range 3 {
				wg.Go(func() {
					for i := range ips {
						ip := ips[(i*(g+1))%len(ips)]
						off, bits, ok, err := r.findNetwork(ip)
						v, wbits := refFind(r, ip)
						wantOK := v > r.nodeCount
						woff, _ := r.dataOffset(v)
						if ip.Is4() && o.ipVersion == 6 {
							bits = max(0, bits-96)
						}
						if err != nil || ok != wantOK || bits != wbits || ok && off != woff {
							t.Errorf("%s: %d/%d %v %v; reference %d/%d %v", ip, off, bits, ok, err, woff, wbits, wantOK)
							return
						}
						if !ok {
							continue
						}
						cc, err := r.Country(ip)
						budget := maxItems
						raw, werr := r.data.isoCode(off, "country", &budget)
						if err != nil || werr != nil || cc != isoStringOrEmpty(raw) {
							t.Errorf("%s: Country %q %v, want %q %v", ip, cc, err, raw, werr)
							return
						}
						s, sok, err := r.LookupString(ip, "country", "iso_code")
						if err != nil || sok != (raw != nil) || s != string(raw) {
							t.Errorf("%s: LookupString %q %v %v, want %q", ip, s, sok, err, raw)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

func isoStringOrEmpty(b []byte) string {
	if b == nil {
		return ""
	}
	return isoString(b)
}

// skipSlow is skip without its fast paths: every field through header.
func (s section) skipSlow(off int, budget *int) (int, error) {
	for pending := 1; pending > 0; pending-- {
		if *budget <= 0 {
			return 0, errAt(off, "record has more than %d values", maxItems)
		}
		*budget--
		h, err := s.header(off)
		if err != nil {
			return 0, err
		}
		switch h.kind {
		case kindMap, kindArray:
			n := h.size
			if h.kind == kindMap {
				n *= 2
			}
			if n > len(s)-h.start-(pending-1) {
				return 0, errAt(off, "too many entries")
			}
			pending += n
			off = h.start
		default:
			off = h.end()
		}
	}
	return off, nil
}

// TestSkipFastPath checks that the fast paths of skip and key agree with
// the general decoding at every offset of data sections holding every type,
// and of mangled copies of them.
func TestSkipFastPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, o := range variants()[:3] {
		r, err := FromBytes(buildDB(t, o, testNetworks(o.ipVersion == 6)))
		if err != nil {
			t.Fatal(err)
		}
		sections := []section{r.data}
		for range 10 {
			m := append(section(nil), r.data...)
			for range 10 {
				m[rng.IntN(len(m))] = byte(rng.IntN(256))
			}
			sections = append(sections, m)
		}
		for _, s := range sections {
			for off := range len(s) + 1 {
				b1, b2 := maxItems, maxItems
				want, werr := s.skipSlow(off, &b1)
				got, err := s.skip(off, &b2)
				// The fast path does not check where a skipped pointer
				// points, so it may succeed where the slow one fails.
				if werr == nil && (err != nil || got != want || b1 != b2) {
					t.Fatalf("skip(%d) = %d, %v; want %d (budgets %d, %d)", off, got, err, want, b2, b1)
				}
				if err == nil && got > len(s) {
					t.Fatalf("skip(%d) = %d past the %d-byte section", off, got, len(s))
				}
				k, next, err := s.key(off)
				h, herr := s.resolve(off)
				if herr == nil && h.kind == kindString {
					hn, _ := s.header(off)
					if err != nil || string(k) != string(s[h.start:h.end()]) || next != hn.end() {
						t.Fatalf("key(%d) = %q, %d, %v; want %q, %d", off, k, next, err, s[h.start:h.end()], hn.end())
					}
				} else if err == nil {
					t.Fatalf("key(%d) = %q, but the field is not a string (%v)", off, k, herr)
				}
			}
		}
	}
}

func TestPackCode(t *testing.T) {
	codes := []string{""}
	for _, a := range codeChars {
		codes = append(codes, string(a))
		for _, b := range codeChars {
			codes = append(codes, string(a)+string(b))
			for _, c := range codeChars {
				codes = append(codes, string(a)+string(b)+string(c))
			}
		}
	}
	seen := map[uint16]string{}
	for _, c := range codes {
		v, ok := packCode([]byte(c))
		if c == "" {
			// An empty code is not packed; an absent one (nil) is.
			if ok {
				t.Fatalf("packCode(%q) = %d", c, v)
			}
			continue
		}
		if !ok || v == noCode || unpackCode(v) != c {
			t.Fatalf("packCode(%q) = %d, %v; unpacks to %q", c, v, ok, unpackCode(v))
		}
		if prev, dup := seen[v]; dup {
			t.Fatalf("%q and %q both pack to %d", prev, c, v)
		}
		seen[v] = c
	}
	if v, ok := packCode(nil); !ok || v != noCode || unpackCode(v) != "" {
		t.Errorf("packCode(nil) = %d, %v", v, ok)
	}
	for _, c := range []string{"us", "ABCD", "A-1", "É", "A B"} {
		if v, ok := packCode([]byte(c)); ok {
			t.Errorf("packCode(%q) = %d", c, v)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		for _, v := range []uint16{1, 500, 50652} {
			unpackCode(v)
		}
	}); n != 0 {
		t.Errorf("unpackCode allocates %v times", n)
	}
}
