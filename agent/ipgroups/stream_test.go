package ipgroups

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"openflare/agent/controlplane"
	"openflare/agent/protocol"
)

// sortAll runs the sorter over in and returns what it gives back.
func sortAll(t *testing.T, s *sorter, in [][]byte) [][]byte {
	t.Helper()
	for _, rec := range in {
		if err := s.add(rec); err != nil {
			t.Fatal(err)
		}
	}
	var out [][]byte
	if err := s.each(func(rec []byte) error {
		out = append(out, bytes.Clone(rec))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// The sorter gives back exactly its input, duplicates kept, in byte-wise
// order, whether the input fits one chunk or spans many runs on disk,
// arrives sorted, reversed or shuffled, and across resets; no chunk holds
// more than chunkBytes.
func TestSorter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var big [][]byte
	for len(big) < 300_000 {
		rec := fmt.Appendf(nil, "%d.%d.%d.%d/%d", rng.IntN(256), rng.IntN(256), rng.IntN(256), rng.IntN(256), rng.IntN(33))
		big = append(big, rec)
		if rng.IntN(10) == 0 {
			big = append(big, rec) // a duplicate
		}
	}
	sorted := slices.Clone(big)
	slices.SortFunc(sorted, bytes.Compare)
	reversed := slices.Clone(sorted)
	slices.Reverse(reversed)
	cases := []struct {
		name string
		in   [][]byte
		runs bool
	}{
		{"empty", nil, false},
		{"one chunk", [][]byte{[]byte("b"), {}, []byte("a"), []byte("b"), {0xff}, []byte("ab")}, false},
		{"shuffled, many runs", big, true},
		{"sorted, many runs", sorted, true},
		{"reversed, many runs", reversed, true},
		{"empty records", make([][]byte, 400_000), true},
	}
	s := &sorter{dir: t.TempDir()}
	defer s.close()
	for _, c := range cases {
		if err := s.reset(); err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(c.in)
		slices.SortFunc(want, bytes.Compare)
		got := sortAll(t, s, c.in)
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Errorf("%s: %d records back of %d, or out of order", c.name, len(got), len(want))
		}
		if (len(s.spans) > 0) != c.runs {
			t.Errorf("%s: %d runs on disk", c.name, len(s.spans))
		}
		if cap(s.buf) > chunkBytes || 4*len(s.at)+len(s.buf) > chunkBytes {
			t.Errorf("%s: chunk of %d bytes and %d records", c.name, cap(s.buf), len(s.at))
		}
	}
}

// mixedList is n entries as a subscription list might hold them: IPv4
// addresses, IPv4 networks and IPv6 networks, in no order, some twice,
// with a few the Lua syntax refuses.
func mixedList(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 7))
	list := make([]string, 0, n)
	for len(list) < n {
		var e string
		switch k := rng.IntN(100); {
		case k < 45:
			e = fmt.Sprintf("%d.%d.%d.%d", 1+rng.IntN(223), rng.IntN(256), rng.IntN(256), rng.IntN(256))
		case k < 75:
			e = fmt.Sprintf("%d.%d.%d.0/%d", 1+rng.IntN(223), rng.IntN(256), rng.IntN(256), 16+rng.IntN(9))
		case k < 99:
			e = fmt.Sprintf("2001:db8:%x:%x::/%d", rng.IntN(1<<16), rng.IntN(1<<16), 48+rng.IntN(17))
		default:
			e = fmt.Sprintf("010.0.0.%d", rng.IntN(256)) // leading zero: never matches
		}
		list = append(list, e)
		if rng.IntN(20) == 0 {
			list = append(list, e)
		}
	}
	return list
}

// A group of 120 000 mixed entries (2 MiB) in no order, with duplicates, sorts on
// disk, verifies, lands sorted with its duplicates (the checksum covers
// them), and compiles to ranges that match exactly what net/netip says
// the entries cover.
func TestLargeUnsortedGroupLands(t *testing.T) {
	g3 := group(3, true, "198.51.100.7")
	s, dir := seed(t, g3)
	list := mixedList(120_000, 1)
	g := group(4, true, list...)
	res, err := s.Reconcile(context.Background(), refs(3, 4), reply(g))
	if err != nil || !slices.Equal(res.Landed, []uint64{4}) || len(res.Rejected) != 0 {
		t.Fatalf("%+v, %v", res, err)
	}
	assertSnapshot(t, dir, g3, g)
	if len(s.Failures()) != 0 {
		t.Fatalf("failures %v", s.Failures())
	}
	_, groups, err := decodeCompiled(readFile(t, filepath.Join(dir, CompiledName)))
	if err != nil {
		t.Fatal(err)
	}
	compiled := groups[1]
	// What net/netip says the entries the Lua syntax accepts cover.
	var nets []netip.Prefix
	for _, e := range accepted(list) {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			p, err = netip.ParsePrefix(e + "/32")
		}
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		nets = append(nets, p.Masked())
	}
	covered := func(a netip.Addr) bool {
		return slices.ContainsFunc(nets, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, p := range nets[:1000] {
		if !compiled.contains(p.Addr()) {
			t.Fatalf("%s not matched", p)
		}
	}
	for range 500 {
		var a netip.Addr
		if rng.IntN(2) == 0 {
			a = netip.AddrFrom4([4]byte{byte(1 + rng.IntN(223)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
		} else {
			p := nets[rng.IntN(len(nets))].Addr().As16()
			p[15] ^= byte(rng.IntN(256)) // near a member
			a = netip.AddrFrom16(p).Unmap()
		}
		if got, want := compiled.contains(a), covered(a); got != want {
			t.Fatalf("%s: compiled %v, net/netip %v", a, got, want)
		}
	}
}

// Input already sorted as the checksum sorts it (the order a server that
// keeps its lists sorted sends) lands the same, without a merge.
func TestSortedGroupLands(t *testing.T) {
	s, dir := seed(t, group(3, true, "198.51.100.7"))
	list := mixedList(150_000, 2)
	slices.Sort(list)
	g := group(3, true, list...)
	if res, err := push(s, []protocol.WAFIPGroup{g}); err != nil || !slices.Equal(res.Landed, []uint64{3}) {
		t.Fatalf("%+v, %v", res, err)
	}
	assertSnapshot(t, dir, g)
}

// Hostile or broken input lands nothing and leaves the snapshot as it was:
// a nesting bomb, a stream cut short and a shape the reply cannot have
// fail the decode; an entry too long, a non-string entry and a checksum
// that does not verify reject their group alone, reported by id.
func TestHostileGroupsLandNothing(t *testing.T) {
	g3, g4 := group(3, true, "198.51.100.7"), group(4, true, "192.0.2.4")
	good, _ := json.Marshal(group(4, true, "192.0.2.40"))
	bad := group(3, true, "203.0.113.9")
	bad.Checksum = strings.Repeat("e", 64)
	badJSON, _ := json.Marshal(bad)
	cases := []struct {
		name, array string
		decodeErr   string // the decode fails, naming this
		rejected    uint64 // else this group is rejected, naming reason
		reason      string
	}{
		{"nesting bomb in an entry", `[{"id":3,"ip_list":[` + strings.Repeat("[", 100_000), "exceeded max depth", 0, ""},
		{"nesting bomb beside the list", `[{"id":3,"x":` + strings.Repeat("[", 100_000), "nested deeper than 10000 levels", 0, ""},
		{"nesting bomb as an element", `[` + strings.Repeat("[", 100_000), "nested deeper than 10000 levels", 0, ""},
		{"cut short", `[` + string(good)[:len(good)/2], "unexpected EOF", 0, ""},
		{"not an array", `{"id":3}`, "where an array belongs", 0, ""},
		{"entry too long", `[{"id":3,"enabled":true,"ip_list":["` + strings.Repeat("9", maxEntry+1) + `"],"checksum":"x"},` + string(good) + `]`, "", 3, "over the 1024-byte limit for an entry"},
		{"entry not a string", `[{"id":3,"enabled":true,"ip_list":["10.0.0.1",7],"checksum":"x"}]`, "", 3, "element 1 is not a string"},
		{"bad checksum", `[` + string(badJSON) + `]`, "", 3, "checksum mismatch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, dir := seed(t, g3, g4)
			before := snapshotFiles(t, dir)
			res, err := pushJSON(s, c.array)
			if c.decodeErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.decodeErr) {
					t.Fatalf("err %v, want %q", err, c.decodeErr)
				}
				assertUntouched(t, dir, before)
				return
			}
			if err != nil || len(res.Rejected) != 1 || res.Rejected[0].ID != c.rejected || !strings.Contains(res.Rejected[0].Reason, c.reason) {
				t.Fatalf("%+v, %v", res, err)
			}
			if f := s.Failures(); len(f) != 1 || f[0].ID != c.rejected || !strings.Contains(f[0].Reason, c.reason) {
				t.Fatalf("failures %v", f)
			}
			if len(res.Landed) == 0 {
				assertUntouched(t, dir, before)
			} else {
				assertSnapshot(t, dir, g3, group(4, true, "192.0.2.40"))
			}
		})
	}
}

// A 1 GiB heartbeat reply of IP-group entries is refused at the reply's cap,
// with the endpoint and the cap named, long before the server has sent it
// all; nothing of it lands and the snapshot stays as it was.
func TestEndlessReplyLandsNothing(t *testing.T) {
	s, dir := seed(t, group(3, true, "198.51.100.7"))
	before := snapshotFiles(t, dir)
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"data":{"waf_ip_groups":[{"id":3,"enabled":true,"ip_list":[`)
		chunk := []byte(strings.Repeat(`"10.1.2.3",`, 8192))
		for sent.Load() < 1<<30 {
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	c := controlplane.New(srv.URL, "token", "test", 10*time.Second)
	b := s.Batch()
	defer b.Close()
	_, err := c.Heartbeat(context.Background(), &protocol.NodePayload{}, b.Decode)
	if !errors.Is(err, controlplane.ErrTooLarge) || !strings.Contains(err.Error(), "heartbeat: reply exceeds 32 MiB") {
		t.Fatalf("err %v", err)
	}
	if n := sent.Load(); n > 64<<20 {
		t.Fatalf("%d bytes sent before the refusal", n)
	}
	assertUntouched(t, dir, before)
}

// Failures holds, by id, what the node should enforce but does not: a
// group that did not verify, one still missing, a sync that failed. A
// group leaves it when it lands or the config stops referencing it.
func TestFailures(t *testing.T) {
	g3, g4 := group(3, true, "198.51.100.7"), group(4, true, "192.0.2.4")
	s, _ := seed(t, g3)
	bad4 := g4
	bad4.Checksum = strings.Repeat("0", 64)
	if _, err := s.Reconcile(context.Background(), refs(3, 4), reply(bad4)); err == nil {
		t.Fatal("a missing group went unreported")
	}
	if f := s.Failures(); len(f) != 1 || f[0].ID != 4 || !strings.Contains(f[0].Reason, "checksum mismatch") {
		t.Fatalf("after a bad group: %v", f)
	}
	failing := func(context.Context, *protocol.IPGroupSyncRequest, func(*json.Decoder) error) error {
		return errors.New("HTTP 400: snapshot over 20 MiB")
	}
	s.Reconcile(context.Background(), refs(3, 4), failing)
	if f := s.Failures(); len(f) != 2 || f[0].ID != 3 || f[1].ID != 4 || !strings.Contains(f[1].Reason, "HTTP 400") {
		t.Fatalf("after a failed sync: %v", f)
	}
	if _, err := s.Reconcile(context.Background(), refs(3, 4), newServer(g3, g4).sync); err != nil {
		t.Fatal(err)
	}
	if f := s.Failures(); len(f) != 0 {
		t.Fatalf("after a good sync: %v", f)
	}
	bad3 := group(3, true, "10.0.0.3")
	bad3.Checksum = strings.Repeat("1", 64)
	push(s, []protocol.WAFIPGroup{bad3})
	if f := s.Failures(); len(f) != 1 || f[0].ID != 3 {
		t.Fatalf("after a bad push: %v", f)
	}
	if _, err := push(s, []protocol.WAFIPGroup{group(3, true, "10.0.0.3")}); err != nil {
		t.Fatal(err)
	}
	if f := s.Failures(); len(f) != 0 {
		t.Fatalf("after a good push: %v", f)
	}
	push(s, []protocol.WAFIPGroup{bad3})
	if _, err := s.Reconcile(context.Background(), refs(4), newServer(g4).sync); err != nil {
		t.Fatal(err)
	}
	if f := s.Failures(); len(f) != 0 {
		t.Fatalf("after group 3 was dropped: %v", f)
	}
}

// A scratch file a killed process left between creating and unlinking it
// goes at the next start, like the other temp files.
func TestOpenRemovesStaleScratch(t *testing.T) {
	_, dir := seed(t, group(3, true, "198.51.100.7"))
	stale := filepath.Join(dir, "."+SnapshotName+".tmp-scratch-123")
	os.WriteFile(stale, []byte("runs"), 0o600)
	if _, err := Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale scratch file: %v", err)
	}
}

// FuzzDecodeGroups: whatever array of groups a server sends decodes or
// fails cleanly, without a panic and with memory in proportion to it; a
// decode that succeeds lands a snapshot that is consistent on disk (JSON,
// compiled file and checksum file agree), and a failed one lands nothing.
func FuzzDecodeGroups(f *testing.F) {
	g3, _ := json.Marshal(group(3, true, "203.0.113.0/24", "198.51.100.7", "2001:db8::/32"))
	f.Add([]byte(`[` + string(g3) + `]`))
	f.Add([]byte(`[{"id":3,"ip_list":null},{"id":-1},5,null,[1,[2]],{"id":3,"ip_list":{"a":1}}]`))
	f.Fuzz(func(t *testing.T, array []byte) {
		dir := t.TempDir()
		s, err := Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Reconcile(context.Background(), refs(3, 4), reply(group(3, true, "192.0.2.3"), group(4, false))); err != nil {
			t.Fatal(err)
		}
		before := snapshotFiles(t, dir)
		b := s.newBatch(func(string) bool { return true })
		defer b.Close()
		var mem0, mem1 runtime.MemStats
		runtime.ReadMemStats(&mem0)
		err = b.Decode(json.NewDecoder(bytes.NewReader(array)))
		runtime.ReadMemStats(&mem1)
		if grew := mem1.TotalAlloc - mem0.TotalAlloc; grew > uint64(64*len(array))+(8<<20) {
			t.Fatalf("%d bytes of input allocated %d bytes", len(array), grew)
		}
		if err != nil {
			assertUntouched(t, dir, before)
			return
		}
		if _, err := s.Push(b); err != nil {
			t.Fatal(err)
		}
		assertConsistent(t, dir)
	})
}
