package controlplane

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"openflare/agent/protocol"
)

func TestIPGroupChecksumVectors(t *testing.T) {
	got := IPGroupChecksum(protocol.WAFIPGroup{ID: 3, Name: "n", Type: "manual", Enabled: true, IPList: []string{"203.0.113.0/24", "198.51.100.7"}})
	if want := "bf15bab3faa1796111cf1518a2ffa05c1e295fac692ec4bc8d3383769435e278"; got != want {
		t.Errorf("vector 1: %s, want %s", got, want)
	}
	const disabled = "7b3c3819f271562ec3e24e241f94a0fa17866c3d1d5fb6ec61d7d78309d515e1"
	if got := IPGroupChecksum(protocol.WAFIPGroup{ID: 4, Enabled: false, IPList: []string{}}); got != disabled {
		t.Errorf("vector 2: %s, want %s", got, disabled)
	}
	if got := IPGroupChecksum(protocol.WAFIPGroup{ID: 4}); got != disabled {
		t.Errorf("null list: %s, want %s", got, disabled)
	}
}

// ipGroupSource references groups 3 and 4 through an ip_match node and
// group 5 (which does not exist) through a legacy list.
func ipGroupSource() string {
	rg := IPMatchRuleGroup(2, "ban", 3, 4)
	return strings.Replace(Source{
		Routes: []Route{{ID: 1, SiteName: "demo", Domains: []string{"demo.example.com"}, OriginURL: "http://10.0.0.5:8080"}},
		WAF:    &WAF{RuleGroups: []RuleGroup{DefaultRuleGroup(), rg}},
	}.JSON(), `"is_global":false,`, `"is_global":false,"ip_blacklist_group_ids":[5],`, 1)
}

func setupIPGroups(t *testing.T) (*Server, string, map[uint64]protocol.WAFIPGroup) {
	t.Helper()
	s := startServer(t)
	_, tok := s.AddNode("n")
	groups := map[uint64]protocol.WAFIPGroup{}
	for _, g := range []protocol.WAFIPGroup{
		{ID: 3, Name: "blocklist", Enabled: true, IPList: []string{"203.0.113.0/24", "198.51.100.7"}},
		{ID: 4, Name: "off", Enabled: false, IPList: []string{"192.0.2.1"}},
		{ID: 9, Name: "unreferenced", Enabled: true, IPList: []string{"192.0.2.9"}},
	} {
		groups[g.ID] = s.SetIPGroup(g)
	}
	s.PublishWithChecksum(ipGroupSource(), nil, "c")
	return s, tok, groups
}

func TestSetIPGroupShipsDisabledAsEmpty(t *testing.T) {
	_, _, groups := setupIPGroups(t)
	g3, g4 := groups[3], groups[4]
	if g3.Type != "manual" || g3.Checksum != "bf15bab3faa1796111cf1518a2ffa05c1e295fac692ec4bc8d3383769435e278" {
		t.Fatalf("group 3 %+v", g3)
	}
	if g4.IPList == nil || len(g4.IPList) != 0 || g4.Checksum != "7b3c3819f271562ec3e24e241f94a0fa17866c3d1d5fb6ec61d7d78309d515e1" {
		t.Fatalf("disabled group 4 %+v: want ip_list [] and the vector checksum", g4)
	}
}

func TestHeartbeatShipsOnlyChangedReferencedGroups(t *testing.T) {
	s, tok, groups := setupIPGroups(t)
	ids := func(gs []protocol.WAFIPGroup) []uint64 {
		var out []uint64
		for _, g := range gs {
			out = append(out, g.ID)
		}
		return out
	}
	hb, _ := heartbeat(t, s, tok, payload("v1"))
	if got := ids(hb.WAFIPGroups); !reflect.DeepEqual(got, []uint64{3, 4}) {
		t.Fatalf("no local checksums: groups %v, want [3 4]", got)
	}
	if !reflect.DeepEqual(hb.WAFIPGroups[0], groups[3]) {
		t.Fatalf("group 3 shipped as %+v, want %+v", hb.WAFIPGroups[0], groups[3])
	}
	p := payload("v1")
	p.WAFIPGroupChecksums = map[string]string{"3": groups[3].Checksum, "4": "stale", "9": "stale"}
	hb, _ = heartbeat(t, s, tok, p)
	if got := ids(hb.WAFIPGroups); !reflect.DeepEqual(got, []uint64{4}) {
		t.Fatalf("group 3 up to date: groups %v, want [4]", got)
	}
	p.WAFIPGroupChecksums["4"] = groups[4].Checksum
	_, r := heartbeat(t, s, tok, p)
	if strings.Contains(string(r.env.Data), "waf_ip_groups") {
		t.Fatalf("all up to date: reply %s still has waf_ip_groups", r.env.Data)
	}
}

func TestIPGroupSync(t *testing.T) {
	s, tok, groups := setupIPGroups(t)
	sync := func(req any) []protocol.WAFIPGroup {
		t.Helper()
		var rep protocol.IPGroupSyncReply
		wantOK(t, call(t, s, http.MethodPost, protocol.PathIPGroupSync, tok, req), &rep)
		return rep.Groups
	}
	if got := sync(protocol.IPGroupSyncRequest{}); len(got) != 2 || got[0].ID != 3 || got[1].ID != 4 {
		t.Fatalf("empty ids: %+v, want the referenced groups 3 and 4", got)
	}
	got := sync(protocol.IPGroupSyncRequest{IDs: []uint64{9, 3, 77, 9}, Checksums: map[string]string{"3": groups[3].Checksum}})
	if len(got) != 1 || !reflect.DeepEqual(got[0], groups[9]) {
		t.Fatalf("ids [9 3 77]: %+v, want only group 9", got)
	}
	r := call(t, s, http.MethodPost, protocol.PathIPGroupSync, tok, protocol.IPGroupSyncRequest{IDs: []uint64{3}, Checksums: map[string]string{"3": groups[3].Checksum}})
	if !strings.Contains(string(r.env.Data), `"groups":[]`) {
		t.Fatalf("nothing changed: %s, want groups []", r.env.Data)
	}
	wantError(t, call(t, s, http.MethodPost, protocol.PathIPGroupSync, tok, `{"ids":"3"}`), http.StatusBadRequest, msgBind)
	wantError(t, call(t, s, http.MethodPost, protocol.PathIPGroupSync, "bad", `{}`), http.StatusUnauthorized, msgBadAgentToken)
}

func TestIPGroupChecksumOverrideShipsAWrongChecksum(t *testing.T) {
	s, tok, groups := setupIPGroups(t)
	s.SetIPGroupChecksumOverride(3, "0000")
	p := payload("v1")
	p.WAFIPGroupChecksums = map[string]string{"3": "0000", "4": groups[4].Checksum}
	hb, _ := heartbeat(t, s, tok, p)
	if len(hb.WAFIPGroups) != 1 || hb.WAFIPGroups[0].Checksum != "0000" {
		t.Fatalf("groups %+v: want group 3 again, with the wrong checksum", hb.WAFIPGroups)
	}
	s.SetIPGroupChecksumOverride(3, "")
	p.WAFIPGroupChecksums["3"] = groups[3].Checksum
	if hb, _ := heartbeat(t, s, tok, p); len(hb.WAFIPGroups) != 0 {
		t.Fatalf("override cleared: groups %+v, want none", hb.WAFIPGroups)
	}
}

func TestNullIPListShipsNull(t *testing.T) {
	s, tok, _ := setupIPGroups(t)
	g := s.SetIPGroup(protocol.WAFIPGroup{ID: 3, Name: "empty", Enabled: true})
	if g.Checksum != IPGroupChecksum(protocol.WAFIPGroup{ID: 3, Enabled: true, IPList: []string{}}) {
		t.Fatalf("checksum of a null list %s", g.Checksum)
	}
	_, r := heartbeat(t, s, tok, payload("v1"))
	if !strings.Contains(string(r.env.Data), `"name":"empty","type":"manual","enabled":true,"ip_list":null`) {
		t.Fatalf("reply %s: want group 3 with ip_list null", r.env.Data)
	}
}

func TestIPGroupSnapshotLimit(t *testing.T) {
	s, tok, _ := setupIPGroups(t)
	// The server neither validates nor deduplicates entries, so one huge
	// entry repeated is enough.
	huge := strings.Repeat("x", 1<<20)
	big := make([]string, 21)
	for i := range big {
		big[i] = huge
	}
	s.SetIPGroup(protocol.WAFIPGroup{ID: 3, Name: "huge", Enabled: true, IPList: big})
	wantError(t, call(t, s, http.MethodPost, protocol.PathHeartbeat, tok, payload("v1")), http.StatusBadRequest, msgIPGroupTooLarge)
	if n := s.Nodes()[0]; n.Heartbeats != 1 || n.Version != "v1" {
		t.Fatalf("node %+v: runtime fields should be saved before the group step fails", n)
	}
	wantError(t, call(t, s, http.MethodPost, protocol.PathIPGroupSync, tok, protocol.IPGroupSyncRequest{IDs: []uint64{9}}), http.StatusBadRequest, msgIPGroupTooLarge)
}

func TestUnparsableActiveSourceFailsHeartbeats(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	s.PublishWithChecksum(`{"waf":{"rule_groups":[{"graph":{"nodes":{"x":{"type":"ip_match","config":{"ip_group_ids":"1"}}}}}]}}`, nil, "c")
	wantError(t, call(t, s, http.MethodPost, protocol.PathHeartbeat, tok, payload("v1")), http.StatusBadRequest, msgIPGroupParse)
	wantError(t, call(t, s, http.MethodPost, protocol.PathIPGroupSync, tok, `{}`), http.StatusBadRequest, msgIPGroupParse)
}

func TestReferencedGroupIDs(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want []uint64
		err  bool
	}{
		{`[{"id":1}]`, nil, false},
		{`{"routes":[]}`, nil, false},
		{`{"waf":{"rule_groups":[{"ip_whitelist_group_ids":[7,2],"ip_blacklist_group_ids":[2],"graph":{"nodes":{"a":{"type":"ip_match","config":null},"b":{"type":"ip_match","config":{"ips":["1.2.3.4"],"ip_group_ids":[9,7]}},"c":{"type":"geo_match","config":{"ip_group_ids":"not read"}}}}}]}}`, []uint64{2, 7, 9}, false},
		{`{"waf":`, nil, true},
	} {
		got, err := referencedGroupIDs(tc.src)
		if (err != nil) != tc.err || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("referencedGroupIDs(%s) = %v, %v; want %v (error %v)", tc.src, got, err, tc.want, tc.err)
		}
	}
}

func TestStoredGroupSizeIsTheShippedJSONLength(t *testing.T) {
	s := New()
	for _, g := range []protocol.WAFIPGroup{
		{ID: 1, Name: "a<b>&", Enabled: true, IPList: []string{"192.0.2.1", "<x>", "é\u2028"}},
		{ID: 22, Name: "null list", Enabled: true},
		{ID: 333, Name: "off", IPList: []string{"192.0.2.1"}},
		{ID: 4, Type: "subscription", Enabled: true, IPList: []string{}},
	} {
		shipped := s.SetIPGroup(g)
		b, err := json.Marshal(shipped)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.groups[g.ID].size; got != len(b) {
			t.Errorf("group %d: stored size %d, JSON length %d", g.ID, got, len(b))
		}
	}
}
