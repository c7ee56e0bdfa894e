package controlplane

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"openflare/agent/protocol"
)

var (
	nodeIDPattern = regexp.MustCompile(`^node-[0-9a-f]{32}$`)
	tokenPattern  = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

func TestRegisterWithDiscoveryTokenCreatesANodeEachCall(t *testing.T) {
	s := startServer(t)
	var first, second protocol.RegisterReply
	r1 := call(t, s, http.MethodPost, protocol.PathRegister, s.DiscoveryToken(), payload("v1.0.0"))
	wantOK(t, r1, &first)
	p := payload("v1.0.0")
	p.Name = "  "
	wantOK(t, call(t, s, http.MethodPost, protocol.PathRegister, s.DiscoveryToken(), p), &second)

	if !strings.Contains(string(r1.env.Data), `"access_token"`) || strings.Contains(string(r1.env.Data), `"agent_token"`) {
		t.Fatalf("register data %s: want access_token only", r1.env.Data)
	}
	for _, rr := range []protocol.RegisterReply{first, second} {
		if !nodeIDPattern.MatchString(rr.NodeID) || !tokenPattern.MatchString(rr.AccessToken) {
			t.Fatalf("reply %+v: want node-<32 hex> and a 32-hex token", rr)
		}
	}
	if first.NodeID == second.NodeID || first.AccessToken == second.AccessToken {
		t.Fatalf("two discovery registrations share an identity: %+v %+v", first, second)
	}
	if first.Name != "edge-test" || second.Name != second.NodeID {
		t.Fatalf("names %q %q: want the payload name, then the node id", first.Name, second.Name)
	}
	nodes := s.Nodes()
	if len(nodes) != 2 || nodes[0].Token != first.AccessToken || nodes[0].IP != "198.51.100.23" {
		t.Fatalf("nodes = %+v", nodes)
	}
}

func TestRegisterWithNodeTokenKeepsNodeAndAdminName(t *testing.T) {
	s := startServer(t)
	id, tok := s.AddNode("admin-name")
	p := payload("v1.0.0")
	p.Name = "agent-name"
	p.NodeID = "node-ffffffffffffffffffffffffffffffff"
	var rr protocol.RegisterReply
	wantOK(t, call(t, s, http.MethodPost, protocol.PathRegister, tok, p), &rr)
	if rr.NodeID != id || rr.AccessToken != tok || rr.Name != "admin-name" {
		t.Fatalf("reply %+v: want %s, the same token and the admin name", rr, id)
	}
	nodes := s.Nodes()
	if len(nodes) != 1 || nodes[0].Name != "admin-name" || nodes[0].Version != "v1.0.0" || nodes[0].LastPayload.NodeID != id {
		t.Fatalf("nodes = %+v", nodes)
	}
}

func TestRegisterRejectsBadTokens(t *testing.T) {
	s := startServer(t)
	wantError(t, call(t, s, http.MethodPost, protocol.PathRegister, "nope", payload("v1")), http.StatusUnauthorized, msgBadRegisterToken)
	wantError(t, call(t, s, http.MethodPost, protocol.PathRegister, "", payload("v1")), http.StatusUnauthorized, msgBadRegisterToken)
	s.SetDiscoveryToken("")
	wantError(t, call(t, s, http.MethodPost, protocol.PathRegister, "", payload("v1")), http.StatusUnauthorized, msgBadRegisterToken)
	wantError(t, call(t, s, http.MethodPost, protocol.PathRegister, s.DiscoveryToken(), payload("   ")), http.StatusUnauthorized, msgBadRegisterToken)
	if n := len(s.Nodes()); n != 0 {
		t.Fatalf("%d nodes created by rejected calls", n)
	}
}

func TestRegisterValidation(t *testing.T) {
	s := startServer(t)
	wantError(t, call(t, s, http.MethodPost, protocol.PathRegister, s.DiscoveryToken(), payload(" ")), http.StatusBadRequest, msgVersionRequired)
	wantError(t, call(t, s, http.MethodPost, protocol.PathRegister, s.DiscoveryToken(), `{"version":1}`), http.StatusBadRequest, msgBind)
	if n := len(s.Nodes()); n != 0 {
		t.Fatalf("%d nodes created by invalid calls", n)
	}
}

func TestOldServerRepliesWithAgentToken(t *testing.T) {
	s := startServer(t)
	s.SetOldServer(true)
	r := call(t, s, http.MethodPost, protocol.PathRegister, s.DiscoveryToken(), payload("v1"))
	var rr protocol.RegisterReply
	wantOK(t, r, &rr)
	if rr.AgentToken == "" || strings.Contains(string(r.env.Data), "access_token") || rr.Token() != s.Nodes()[0].Token {
		t.Fatalf("old-server register data %s: want agent_token only", r.env.Data)
	}
}

func TestHeartbeatValidation(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	wantError(t, call(t, s, http.MethodPost, protocol.PathHeartbeat, "bad", payload("v1")), http.StatusUnauthorized, msgBadAgentToken)
	wantError(t, call(t, s, http.MethodPost, protocol.PathHeartbeat, "", payload("v1")), http.StatusUnauthorized, msgBadAgentToken)
	wantError(t, call(t, s, http.MethodPost, protocol.PathHeartbeat, tok, payload("  ")), http.StatusBadRequest, msgVersionRequired)
	wantError(t, call(t, s, http.MethodPost, protocol.PathHeartbeat, tok, `{"version":"v1","schema_version":"two"}`), http.StatusBadRequest, msgBind)
	wantError(t, call(t, s, http.MethodPost, protocol.PathHeartbeat, tok, `not json`), http.StatusBadRequest, msgBind)
	if b := s.Heartbeats(); len(b) != 0 {
		t.Fatalf("rejected heartbeats were recorded: %+v", b)
	}
}

func TestHeartbeatUpdatesNodeAndReplies(t *testing.T) {
	s := startServer(t)
	id, tok := s.AddNode("")
	p := payload(" v1.2.3 ")
	p.CurrentVersion = "20260101-001"
	p.LastError = "boom"
	p.OpenRestyStatus = "weird"
	hb, r := heartbeat(t, s, tok, p)

	if !strings.Contains(string(r.env.Data), `"active_config":null`) || strings.Contains(string(r.env.Data), "waf_ip_groups") {
		t.Fatalf("reply %s: want active_config null and no waf_ip_groups", r.env.Data)
	}
	want := protocol.AgentSettings{HeartbeatInterval: 3000, WebsocketUpgradeEnabled: true, UpdateRepo: "Rain-kl/OpenFlare", UpdateChannel: "stable"}
	if hb.AgentSettings != want {
		t.Fatalf("settings %+v, want %+v", hb.AgentSettings, want)
	}
	var rec nodeRecord
	if err := json.Unmarshal(hb.Node, &rec); err != nil || rec.NodeID != id || rec.Status != "online" {
		t.Fatalf("node record %s (%v)", hb.Node, err)
	}
	n := s.Nodes()[0]
	if n.Name != "edge-test" || n.Version != "v1.2.3" || n.CurrentVersion != "20260101-001" || n.LastError != "boom" ||
		n.OpenRestyStatus != protocol.StatusUnknown || n.Heartbeats != 1 || n.LastSeen.IsZero() {
		t.Fatalf("node = %+v", n)
	}
	// match may call the server: it runs without the server's lock.
	beat, err := s.WaitHeartbeat(testContext(t), func(b Beat) bool { return b.NodeID == s.Nodes()[0].NodeID })
	if err != nil || beat.Channel != ChannelHTTP || beat.Payload.NodeID != id || beat.Payload.Version != " v1.2.3 " {
		t.Fatalf("beat %+v (%v)", beat, err)
	}
}

func TestOneShotSettingsAreClearedAfterOneReply(t *testing.T) {
	s := startServer(t)
	id, tok := s.AddNode("n")
	_, other := s.AddNode("other")
	s.UpdateSettings("", func(st *protocol.AgentSettings) { st.HeartbeatInterval = 5000 })
	s.UpdateSettings(id, func(st *protocol.AgentSettings) {
		st.AutoUpdate = true
		st.UpdateNow = true
		st.UpdateChannel = "preview"
		st.UpdateTag = "v9.9.9"
		st.RestartOpenRestyNow = true
	})
	first, _ := heartbeat(t, s, tok, payload("v1"))
	want := protocol.AgentSettings{HeartbeatInterval: 5000, WebsocketUpgradeEnabled: true, AutoUpdate: true,
		UpdateRepo: "Rain-kl/OpenFlare", UpdateNow: true, UpdateChannel: "preview", UpdateTag: "v9.9.9", RestartOpenRestyNow: true}
	if first.AgentSettings != want {
		t.Fatalf("first reply settings %+v, want %+v", first.AgentSettings, want)
	}
	second, _ := heartbeat(t, s, tok, payload("v1"))
	want.UpdateNow, want.UpdateChannel, want.UpdateTag, want.RestartOpenRestyNow = false, "stable", "", false
	if second.AgentSettings != want {
		t.Fatalf("second reply settings %+v, want %+v", second.AgentSettings, want)
	}
	s.UpdateSettings("", func(st *protocol.AgentSettings) { st.WebsocketUpgradeEnabled = false })
	third, _ := heartbeat(t, s, tok, payload("v1"))
	if third.AgentSettings.WebsocketUpgradeEnabled || !third.AgentSettings.AutoUpdate {
		t.Fatalf("third reply settings %+v: want the new global value and the node's auto_update", third.AgentSettings)
	}
	o, _ := heartbeat(t, s, other, payload("v1"))
	if o.AgentSettings.AutoUpdate || o.AgentSettings.UpdateNow || o.AgentSettings.HeartbeatInterval != 5000 {
		t.Fatalf("other node settings %+v: per-node settings leaked", o.AgentSettings)
	}
}

func TestRotateTokenRejectsTheOldToken(t *testing.T) {
	s := startServer(t)
	id, old := s.AddNode("n")
	tok := s.RotateToken(id)
	if tok == old || !tokenPattern.MatchString(tok) {
		t.Fatalf("new token %q", tok)
	}
	wantError(t, call(t, s, http.MethodPost, protocol.PathHeartbeat, old, payload("v1")), http.StatusUnauthorized, msgBadAgentToken)
	heartbeat(t, s, tok, payload("v1"))
	if s.RotateToken("node-unknown") != "" {
		t.Fatal("rotating an unknown node returned a token")
	}
}

func TestHeartbeatIPFromLoopbackPeer(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	for _, tc := range []struct{ reported, want string }{
		{"10.0.0.9", "10.0.0.9"},
		{"", "127.0.0.1"},
		{"not-an-ip", "127.0.0.1"},
		{"203.0.113.5", "203.0.113.5"},
	} {
		p := payload("v1")
		p.IP = tc.reported
		heartbeat(t, s, tok, p)
		if got := s.Nodes()[0].IP; got != tc.want {
			t.Errorf("reported %q: ip %q, want %q", tc.reported, got, tc.want)
		}
	}
}

func TestResolveIP(t *testing.T) {
	for _, tc := range []struct{ reported, peer, want, err string }{
		{"198.51.100.7", "203.0.113.1:5000", "198.51.100.7", ""},
		{"10.1.2.3", "203.0.113.1:5000", "203.0.113.1", ""},
		{"10.1.2.3", "192.168.1.1:5000", "10.1.2.3", ""},
		{"fe80::1", "[2001:db8::1]:80", "2001:db8::1", ""},
		{"::ffff:198.51.100.7", "127.0.0.1:1", "198.51.100.7", ""},
		{" ", "[::1]:9", "::1", ""},
		{"", "garbage", "", msgIPRequired},
		{"x", "garbage", "", msgIPInvalid},
		{"10.0.0.1", "garbage", "10.0.0.1", ""},
	} {
		got, aerr := resolveIP(tc.reported, tc.peer)
		msg := ""
		if aerr != nil {
			msg = aerr.msg
		}
		if got != tc.want || msg != tc.err {
			t.Errorf("resolveIP(%q, %q) = %q, %q; want %q, %q", tc.reported, tc.peer, got, msg, tc.want, tc.err)
		}
	}
}

func TestLongTextsAreCut(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	p := payload("v1")
	p.LastError = strings.Repeat("错", maxTextRunes+10)
	heartbeat(t, s, tok, p)
	if got := []rune(s.Nodes()[0].LastError); len(got) != maxTextRunes {
		t.Fatalf("last_error kept %d runes, want %d", len(got), maxTextRunes)
	}
}
