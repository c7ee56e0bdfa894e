package luaassets

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"openflare/agent/ipgroups"
	"openflare/testing/testsupport"
)

// snapshotPickup is how long every worker may take to adopt a new snapshot
// without a reload: the lock holder reads the files within one 1 s tick and
// every other worker adopts on its own next tick, well inside 5 s.
const snapshotPickup = 5 * time.Second

// ipGroup is a WAFIPGroup as the agent stores it in waf_ip_groups.json.
func ipGroup(id int, enabled bool, ips []string) obj {
	return obj{"id": id, "name": fmt.Sprintf("g%d", id), "type": "manual", "enabled": enabled, "ip_list": ips, "checksum": strings.Repeat("0", 64)}
}

// encodeGroups is waf_ip_groups.json for groups, its checksum label and its
// compiled form, as agent/ipgroups writes them.
func encodeGroups(t testing.TB, groups map[string]obj) (data []byte, label string, compiled []byte) {
	t.Helper()
	data, err := json.Marshal(obj{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	if compiled, err = ipgroups.Compile(data); err != nil {
		t.Fatal(err)
	}
	return data, string(compiled[16:80]), compiled
}

// writeGroups writes waf_ip_groups.json, waf_ip_groups.bin and then the
// checksum file, as the agent does, and returns the checksum and the time
// the checksum file landed.
func (r *rig) writeGroups(groups map[string]obj) (string, time.Time) {
	r.t.Helper()
	data, label, compiled := encodeGroups(r.t, groups)
	r.writeAtomic(ipgroups.SnapshotName, data)
	r.writeAtomic(ipgroups.CompiledName, compiled)
	r.writeAtomic(ipgroups.ChecksumName, []byte(label+"\n"))
	return label, time.Now()
}

// bigGroupList returns 100 000 distinct entries: /32s spread over
// 10.0.0.0/8, a few CIDRs of both families, and blockedIP.
func bigGroupList() []string {
	extra := []string{blockedIP, "172.16.0.0/12", "192.168.7.0/24", "10.0.0.0/30", "2001:db8::/32", "fd00::/8", "2001:db8:1::5", "203.0.113.77"}
	list := make([]string, 0, 100000)
	list = append(list, extra...)
	for i := 0; len(list) < cap(list); i++ {
		// An odd multiplier permutes the 24-bit host space.
		n := (i*40503 + 12345) & 0xffffff
		list = append(list, fmt.Sprintf("10.%d.%d.%d", n>>16, n>>8&0xff, n&0xff))
	}
	return list
}

// §11 cases 14 and 15, then a 100 000-entry group, a compiled file that
// does not carry the checksum and an oversized one, all without a reload.
func TestIPGroupSnapshots(t *testing.T) {
	r := newRig(t)
	r.writeWAF(obj{
		"rule_groups": []obj{group(1, true, allowGraph()), group(2, false, ipGraph(obj{"ip_group_ids": []int{3}}, 403, "grp"))},
		"bindings":    []obj{binding("demo", 2)},
	})
	r.start(r.wafServer("demo") + `
    server {
        listen 80;
        server_name lua.test;
        location = /dict-keys {
            content_by_lua_block {
                ngx.print(table.concat(ngx.shared.openflare_waf_ip_groups:get_keys(0), ","))
            }
        }
        # What the agent's self-test server does after a snapshot landed.
        location = /publish {
            content_by_lua_block { require("waf.runtime").publish_snapshots() }
        }
        location = /hold-refresh-lock {
            content_by_lua_block { ngx.shared.openflare_waf_ip_groups:set("ip_groups_refresh_lock", true, 60) }
        }
        location = /release-refresh-lock {
            content_by_lua_block { ngx.shared.openflare_waf_ip_groups:delete("ip_groups_refresh_lock") }
        }
    }
`)
	workers := r.nginx.WorkerPIDs()
	slices.Sort(workers)

	// adopted waits until every worker has logged the adoption of checksum.
	adopted := func(checksum string) {
		t.Helper()
		r.waitAdopted("adopted IP group snapshot "+checksum, len(workers))
	}

	t.Run("case15 no snapshot on disk", func(t *testing.T) {
		r.expect(r.get(blockedIP, "demo.test", "/"), 200, "origin-ok", "")
	})

	t.Run("case14 snapshot change without reload", func(t *testing.T) {
		sum, _ := r.writeGroups(map[string]obj{"3": ipGroup(3, true, []string{"127.0.0.0/24"})})
		adopted(sum)
		r.expect(r.get(blockedIP, "demo.test", "/"), 403, "grp\n", "text/html; charset=utf-8")

		sum, _ = r.writeGroups(map[string]obj{"3": ipGroup(3, false, []string{})})
		adopted(sum)
		r.expect(r.get(blockedIP, "demo.test", "/"), 200, "origin-ok", "")
	})

	t.Run("live at the next request once the agent publishes", func(t *testing.T) {
		// With the refresh lock held no worker's tick publishes what
		// lands: only the agent's request does, and every worker then
		// adopts it before its next lookup, not at its next tick.
		r.get(otherIP, "lua.test", "/hold-refresh-lock")
		defer r.get(otherIP, "lua.test", "/release-refresh-lock")
		sum, _ := r.writeGroups(map[string]obj{"3": ipGroup(3, true, []string{"127.0.0.0/24"})})
		if got := r.get(otherIP, "lua.test", "/publish"); got.status != 200 || !strings.Contains(got.body, "ip_groups "+sum+"\n") {
			t.Fatalf("publish: %d %q", got.status, got.body)
		}
		for range 4 * len(workers) {
			r.expect(r.get(blockedIP, "demo.test", "/"), 403, "grp\n", "")
		}
	})

	t.Run("100000-entry group", func(t *testing.T) {
		sum, written := r.writeGroups(map[string]obj{
			"3": ipGroup(3, true, bigGroupList()),
			"4": ipGroup(4, true, []string{otherIP}), // not referenced by the graph
		})
		testsupport.WaitFor(t, snapshotPickup, "the first block of "+blockedIP, func() bool {
			return r.get(blockedIP, "demo.test", "/").status == http.StatusForbidden
		})
		t.Logf("100 000-entry snapshot: checksum file written → first 403 for %s after %v", blockedIP, time.Since(written).Round(time.Millisecond))
		adopted(sum)
		t.Logf("100 000-entry snapshot: adopted by all %d workers after %v", len(workers), time.Since(written).Round(time.Millisecond))
		for range 10 {
			r.expect(r.get(blockedIP, "demo.test", "/"), 403, "grp\n", "")
			r.expect(r.get(otherIP, "demo.test", "/"), 200, "origin-ok", "")
		}
	})

	t.Run("compiled file with another label is not adopted", func(t *testing.T) {
		// Group 3 off, in a snapshot no earlier step wrote.
		data, sum, compiled := encodeGroups(t, map[string]obj{"3": ipGroup(3, false, []string{}), "8": ipGroup(8, true, []string{otherIP})})
		wrong := bytes.Clone(compiled)
		copy(wrong[16:80], strings.Repeat("f", 64))
		// As a crash between the compiled and the checksum write, in the
		// other order, would leave it.
		r.writeAtomic(ipgroups.SnapshotName, data)
		r.writeAtomic(ipgroups.CompiledName, wrong)
		r.writeAtomic(ipgroups.ChecksumName, []byte(sum+"\n"))
		testsupport.WaitFor(t, snapshotPickup, "the label warning", func() bool {
			return r.countLines("IP group snapshot "+sum+" not published") > 0
		})
		time.Sleep(1500 * time.Millisecond) // a tick more for every worker
		if n := r.countLines("adopted IP group snapshot " + sum); n != 0 {
			t.Fatalf("snapshot %s adopted by %d workers", sum, n)
		}
		r.expect(r.get(blockedIP, "demo.test", "/"), 403, "grp\n", "")

		// The agent's repair at start rewrites the compiled file alone; the
		// workers keep checking and take it without a new checksum file.
		r.writeAtomic(ipgroups.CompiledName, compiled)
		adopted(sum)
		r.expect(r.get(blockedIP, "demo.test", "/"), 200, "origin-ok", "")
	})

	t.Run("oversized compiled file is refused", func(t *testing.T) {
		_, sum, compiled := encodeGroups(t, map[string]obj{"3": ipGroup(3, true, []string{"127.0.0.0/8"})})
		// A sparse file one byte over the limit, with a valid header.
		path := filepath.Join(r.runtimeDir, ".oversized")
		if err := os.WriteFile(path, compiled, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, ipgroups.MaxCompiledBytes+1); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path, filepath.Join(r.runtimeDir, ipgroups.CompiledName)); err != nil {
			t.Fatal(err)
		}
		r.writeAtomic(ipgroups.ChecksumName, []byte(sum+"\n"))
		testsupport.WaitFor(t, snapshotPickup, "the oversize warning", func() bool {
			return r.countLines(fmt.Sprintf("exceeds the maximum of %d bytes", ipgroups.MaxCompiledBytes)) > 0
		})
		if r.countLines("adopted IP group snapshot "+sum) != 0 {
			t.Error("the oversized snapshot was adopted")
		}
		r.expect(r.get(blockedIP, "demo.test", "/"), 200, "origin-ok", "")
	})

	t.Run("the shared dict holds no snapshot bytes", func(t *testing.T) {
		got := strings.Split(r.get(otherIP, "lua.test", "/dict-keys").body, ",")
		slices.Sort(got)
		if want := []string{"ip_groups_refresh_lock", "ip_groups_version"}; !slices.Equal(got, want) && !slices.Equal(got, want[1:]) {
			t.Errorf("dict keys %q, want at most %q", got, want)
		}
	})

	after := r.nginx.WorkerPIDs()
	slices.Sort(after)
	if !slices.Equal(workers, after) {
		t.Errorf("worker pids changed from %v to %v: the snapshot must be picked up without a reload", workers, after)
	}
}

// groupsProbe answers POST {label, cases:[{ids, addr, entry}]} with, per
// case, what the adopted snapshot, the compiled file mapped and the
// compiled file read into a string say, plus (when entry is set) what
// waf.ipmatch says of that entry alone.
const groupsProbe = `
local cjson = require("cjson.safe")
local ipg = require("waf.ip_groups")
local ipmatch = require("waf.ipmatch")

ngx.req.read_body()
local req = cjson.decode(ngx.req.get_body_data())
local mapped, merr = ipg._load(req.label, "map")
local read, rerr = ipg._load(req.label, "read")
if not mapped or not read then
    ngx.status = 500
    ngx.say("load: ", tostring(merr), " / ", tostring(rerr))
    return
end
local out = {}
for i, c in ipairs(req.cases) do
    local ids = c.ids
    if ids == cjson.null then
        ids = nil
    end
    local r = {
        adopted = ipg.match(ids, ipmatch.parse(c.addr)),
        mapped = ipg._match_in(mapped, ids, ipmatch.parse(c.addr)),
        read = ipg._match_in(read, ids, ipmatch.parse(c.addr)),
    }
    if c.entry then
        r.ipmatch = ipmatch.match(ipmatch.compile({ c.entry }), ipmatch.parse(c.addr))
    end
    out[i] = r
end
ngx.say(cjson.encode({ can_map = ipg._can_map, results = out }))
`

type groupCase struct {
	IDs   any     `json:"ids"`
	Addr  string  `json:"addr"`
	Entry *string `json:"entry,omitempty"`
}

type groupResult struct {
	Adopted, Mapped, Read bool
	IPMatch               *bool `json:"ipmatch"`
}

// probeGroups adopts groups in every worker and runs cases through
// groupsProbe.
func probeGroups(t *testing.T, groups map[string]obj, cases []groupCase) []groupResult {
	t.Helper()
	r := newRig(t)
	r.writeWAF(obj{"rule_groups": []obj{}, "bindings": []obj{}})
	probe := filepath.Join(t.TempDir(), "groups_probe.lua")
	if err := os.WriteFile(probe, []byte(groupsProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	r.start(`
    server {
        listen 80;
        server_name lua.test;
        client_max_body_size 64m;
        client_body_buffer_size 64m;
        location = /groups { content_by_lua_file ` + probe + `; }
    }
`)
	label, _ := r.writeGroups(groups)
	r.waitAdopted("adopted IP group snapshot "+label, len(r.nginx.WorkerPIDs()))
	if n := r.countLines("adopted IP group snapshot " + label + " ("); n > 0 && r.countLines(", mapped)") == 0 {
		t.Error("the snapshot was not mapped on this 64-bit Linux host")
	}
	body, err := json.Marshal(map[string]any{"label": label, "cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	resp := send(t, otherIP, http.MethodPost, "http://127.0.0.1/groups", "lua.test", nil, bytes.NewReader(body))
	var got struct {
		CanMap  bool          `json:"can_map"`
		Results []groupResult `json:"results"`
	}
	if err := json.Unmarshal([]byte(resp.body), &got); err != nil || len(got.Results) != len(cases) {
		t.Fatalf("probe answered %d %.300q (%v)", resp.status, resp.body, err)
	}
	if !got.CanMap {
		t.Error("mapping is unavailable on this 64-bit Linux host")
	}
	return got.Results
}

// Lookups at the edges of ranges, in both families, through every way a
// worker can hold the compiled file.
func TestIPGroupMatching(t *testing.T) {
	groups := map[string]obj{
		"3":             ipGroup(3, true, []string{"10.0.0.0/24", "10.0.1.0/24", "192.0.2.7", "2001:db8::/48", "::ffff:198.51.100.1", "bogus", "203.0.113.0/31", "2001:db8:5::1"}),
		"4":             ipGroup(4, false, []string{"10.0.0.0/8"}),
		"5":             ipGroup(5, true, []string{}),
		"6":             ipGroup(6, true, []string{"0.0.0.0/0"}),
		"7":             ipGroup(7, true, []string{"::/0"}),
		"1099511627776": {"id": int64(1099511627776), "enabled": true, "ip_list": []string{"198.51.100.9"}},
	}
	type tc struct {
		ids  any
		addr string
		want bool
	}
	three := []int{3}
	cases := []tc{
		{three, "10.0.0.0", true}, {three, "10.0.1.255", true}, {three, "10.0.0.77", true},
		{three, "9.255.255.255", false}, {three, "10.0.2.0", false},
		{three, "192.0.2.7", true}, {three, "192.0.2.6", false}, {three, "192.0.2.8", false},
		{three, "203.0.113.0", true}, {three, "203.0.113.1", true}, {three, "203.0.113.2", false}, {three, "203.0.112.255", false},
		{three, "2001:db8::", true}, {three, "2001:db8::1", true}, {three, "2001:db8:0:ffff:ffff:ffff:ffff:ffff", true},
		{three, "2001:db8:1::", false}, {three, "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", false},
		{three, "2001:db8:5::1", true}, {three, "2001:db8:5::", false}, {three, "2001:db8:5::2", false},
		{three, "2001:0DB8:0:0:0:0:0:1", true},
		// IPv4 and IPv4-mapped IPv6 stay apart.
		{three, "::ffff:198.51.100.1", true}, {three, "::ffff:c633:6401", true}, {three, "198.51.100.1", false},
		{three, "::ffff:10.0.0.1", false},
		{[]int{4}, "10.0.0.1", false},
		{[]int{5}, "10.0.0.1", false},
		{[]int{99}, "10.0.0.1", false},
		{[]int{99, 4, 5, 3}, "10.0.0.1", true},
		{[]int{6}, "0.0.0.0", true}, {[]int{6}, "255.255.255.255", true}, {[]int{6}, "::1", false},
		{[]int{7}, "::", true}, {[]int{7}, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true}, {[]int{7}, "1.2.3.4", false},
		{[]string{"3"}, "10.0.0.1", true},
		{[]uint64{1099511627776}, "198.51.100.9", true}, {[]uint64{1099511627776}, "198.51.100.8", false},
		{"3", "10.0.0.1", false}, {nil, "10.0.0.1", false}, {map[string]int{"a": 3}, "10.0.0.1", false},
		{three, "bogus", false}, {three, "", false}, {three, "10.0.0.1 ", false},
	}
	in := make([]groupCase, len(cases))
	for i, c := range cases {
		in[i] = groupCase{IDs: c.ids, Addr: c.addr}
	}
	for i, got := range probeGroups(t, groups, in) {
		c := cases[i]
		if got.Adopted != c.want || got.Mapped != c.want || got.Read != c.want {
			t.Errorf("ids %v, address %q: adopted %v, mapped %v, read %v; want %v", c.ids, c.addr, got.Adopted, got.Mapped, got.Read, c.want)
		}
	}
}

// TestEntrySyntaxMatchesLua runs tricky and random entries through the Go
// compiler (agent/ipgroups) and through waf.ipmatch, which defines the
// syntax, and requires the same answer for addresses at and around each
// entry's range.
func TestEntrySyntaxMatchesLua(t *testing.T) {
	entries := []string{
		"192.0.2.1", "0.0.0.0", "10.1.2.3/8", "1.2.3.4/0", "1.2.3.4/32", "1.2.3.4/31", "255.255.255.255/32",
		"::", "::/0", "::1", "1::", "2001:db8::1/32", "2001:0DB8:0:0:0:0:0:1", "::ffff:192.0.2.1",
		"::ffff:192.0.2.0/120", "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8",
		"0000:00:0::0001", "fe80::/10", "2001:db8::/127", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128",
		"", " 1.2.3.4", "1.2.3.4 ", "01.2.3.4", "1.2.3.04", "1.2.3.00", "1.2.3", "1.2.3.4.5", "1..2.3",
		"256.1.1.1", "1.2.3.4/33", "1.2.3.4/08", "1.2.3.4/00", "1.2.3.4/", "/8", "1.2.3.4/+8",
		"1.2.3.4/-1", "1.2.3.4/1a", "1.2.3.4/8/8", "1.2.3.4/ 8", "0x1.2.3.4", "1.2.3.4/0128",
		"::/129", "::/0128", ":::", "1:::2", "1::2::3", "1:2:3:4:5:6:7:8::", "1:2:3:4:5:6:7::8",
		"::1:2:3:4:5:6:7:8", "12345::", "1:2:3:4:5:6:7", "1:2:3:4:5:6:7:8:9", "fe80::1%eth0",
		"::1.2.3.4:5", "1.2.3.4::", "::ffff:01.2.3.4", "::1.2.3", "1:2:3:4:5:6:7:1.2.3.4",
		":1::", "1:", ":1", "1:2:3:4:5:6:7:8:", "g::", "::g", "[::1]", "::1/", "1.2.3.4\x00",
		"::1.2.3.4", "1::1.2.3.4/96", "1:2:3:4:5:6:7:8/64", "1.2.3.4/1",
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for range 150 {
		entries = append(entries, randomEntry(rng))
	}
	probes := []string{
		"0.0.0.0", "255.255.255.255", "1.2.3.4", "192.0.2.1", "10.0.0.0", "10.255.255.255", "11.0.0.0",
		"::", "::1", "::ffff:192.0.2.1", "::ffff:102:304", "::102:304", "2001:db8::", "2001:db8::1",
		"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::", "fe80::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
	}
	groups := map[string]obj{}
	var cases []groupCase
	for i, e := range entries {
		id := i + 1
		groups[fmt.Sprint(id)] = ipGroup(id, true, []string{e})
		addrs := slices.Clone(probes)
		addrs = append(addrs, around(e)...)
		for _, a := range addrs {
			cases = append(cases, groupCase{IDs: []int{id}, Addr: a, Entry: &entries[i]})
		}
	}
	results := probeGroups(t, groups, cases)
	bad := 0
	for i, got := range results {
		c := cases[i]
		if got.IPMatch == nil || got.Adopted != *got.IPMatch || got.Mapped != *got.IPMatch || got.Read != *got.IPMatch {
			if bad++; bad <= 20 {
				t.Errorf("entry %q, address %s: ipmatch %v, compiled: adopted %v mapped %v read %v", *c.Entry, c.Addr, deref(got.IPMatch), got.Adopted, got.Mapped, got.Read)
			}
		}
	}
	t.Logf("%d entries, %d lookups compared", len(entries), len(results))
}

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

// around returns the first and last address of an entry's network and the
// neighbours just outside, as far as net/netip can read the entry.
func around(e string) []string {
	p, err := netip.ParsePrefix(e)
	if err != nil {
		a, aerr := netip.ParseAddr(strings.SplitN(e, "%", 2)[0])
		if aerr != nil {
			return nil
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	first := p.Masked().Addr()
	last := first
	for n := p.Bits(); n < first.BitLen(); n++ {
		b := last.AsSlice()
		b[n/8] |= 0x80 >> (n % 8)
		last, _ = netip.AddrFromSlice(b)
	}
	out := []string{first.String(), last.String()}
	if prev := first.Prev(); prev.IsValid() {
		out = append(out, prev.String())
	}
	if next := last.Next(); next.IsValid() {
		out = append(out, next.String())
	}
	return out
}

// randomEntry returns an entry near one of a few clusters in either family,
// sometimes IPv4-mapped, sometimes malformed.
func randomEntry(r *rand.Rand) string {
	switch r.IntN(8) {
	case 0:
		return []string{"1.2.3", "::g", "01.2.3.4", "1.2.3.4/33", "::/129", "1:::2", "10.0.0.1/08"}[r.IntN(7)]
	case 1, 2, 3:
		b := [16]byte{0x20, 0x01, 0x0d, 0xb8}
		if r.IntN(4) == 0 {
			b = [16]byte{10: 0xff, 11: 0xff}
		}
		for i := 12 + r.IntN(4); i < 16; i++ {
			b[i] = byte(r.IntN(256))
		}
		return netip.PrefixFrom(netip.AddrFrom16(b), 96+r.IntN(33)).String()
	default:
		a := netip.AddrFrom4([4]byte{byte(1 + r.IntN(250)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
		if r.IntN(3) == 0 {
			return a.String()
		}
		return netip.PrefixFrom(a, r.IntN(33)).String()
	}
}
