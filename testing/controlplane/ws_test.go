package controlplane

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"openflare/agent/protocol"
)

func TestWSStatusRepliesInOrder(t *testing.T) {
	s, tok, groups := setupIPGroups(t)
	id := s.Nodes()[0].NodeID
	active := s.Active()
	ws := mustDialWS(t, s, id, tok)

	sendWS(t, ws, protocol.WSStatus, payload("v2"))
	m := readWS(t, ws)
	var st protocol.AgentSettings
	if m.Type != protocol.WSSettings || json.Unmarshal(m.Payload, &st) != nil || st.HeartbeatInterval != 3000 {
		t.Fatalf("first message %s %s, want settings", m.Type, m.Payload)
	}
	m = readWS(t, ws)
	var ref protocol.ConfigRef
	if m.Type != protocol.WSActiveConfig || json.Unmarshal(m.Payload, &ref) != nil || ref != *active {
		t.Fatalf("second message %s %s, want active_config %+v", m.Type, m.Payload, active)
	}
	m = readWS(t, ws)
	var gs []protocol.WAFIPGroup
	if m.Type != protocol.WSWAFIPGroups || json.Unmarshal(m.Payload, &gs) != nil || len(gs) != 2 || gs[0].Checksum != groups[3].Checksum {
		t.Fatalf("third message %s %s, want waf_ip_groups [3 4]", m.Type, m.Payload)
	}
	beat, err := s.WaitHeartbeat(testContext(t), func(b Beat) bool { return b.Channel == ChannelWS })
	if err != nil || beat.NodeID != id || beat.Payload.Version != "v2" || s.Nodes()[0].Version != "v2" {
		t.Fatalf("beat %+v (%v)", beat, err)
	}

	// With every group up to date, no waf_ip_groups follows.
	p := payload("v2")
	p.WAFIPGroupChecksums = map[string]string{"3": groups[3].Checksum, "4": groups[4].Checksum}
	sendWS(t, ws, protocol.WSStatus, p)
	sendWS(t, ws, protocol.WSPing, nil)
	if m := readWS(t, ws); m.Type != protocol.WSSettings {
		t.Fatalf("got %s, want settings", m.Type)
	}
	if m := readWS(t, ws); m.Type != protocol.WSActiveConfig {
		t.Fatalf("got %s, want active_config", m.Type)
	}
	if m := readWS(t, ws); m.Type != protocol.WSPong || m.Payload != nil {
		t.Fatalf("got %s %s, want a bare pong (no waf_ip_groups before it)", m.Type, m.Payload)
	}
}

func TestWSIgnoresInvalidMessages(t *testing.T) {
	s := startServer(t)
	id, tok := s.AddNode("n")
	ws := mustDialWS(t, s, id, tok)
	for _, frame := range []string{
		string(wsFrame(protocol.WSStatus, payload(" "))),
		`{"type":"status","payload":{"version":7}}`,
		`{"type":"status"}`,
		"garbage \x00 not json",
		`{"type":"mystery","payload":[1,2]}`,
		`{"type":"pong"}`,
	} {
		if err := websocket.Message.Send(ws, frame); err != nil {
			t.Fatal(err)
		}
	}
	if err := websocket.Message.Send(ws, []byte(`{"type":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	if m := readWS(t, ws); m.Type != protocol.WSPong {
		t.Fatalf("got %s %s, want pong as the only reply", m.Type, m.Payload)
	}
	if n := len(s.Heartbeats()); n != 0 {
		t.Fatalf("%d invalid status messages were accepted", n)
	}
}

func TestWSSecondConnectionReplacesTheFirst(t *testing.T) {
	s := startServer(t)
	id, tok := s.AddNode("n")
	first := mustDialWS(t, s, id, tok)
	second, err := dialWS(s, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, err := readWSRaw(first); err == nil {
		t.Fatal("the first connection is still open")
	}
	sendWS(t, second, protocol.WSPing, nil)
	if m := readWS(t, second); m.Type != protocol.WSPong {
		t.Fatalf("got %s, want pong", m.Type)
	}
	if !s.WSConnected(id) {
		t.Fatal("node not connected after the replacement")
	}
}

func TestWSBroadcasts(t *testing.T) {
	s := startServer(t)
	id1, tok1 := s.AddNode("a")
	id2, tok2 := s.AddNode("b")
	conns := []*websocket.Conn{mustDialWS(t, s, id1, tok1), mustDialWS(t, s, id2, tok2)}

	ref := s.PublishWithChecksum(vectorBSource, nil, "c1")
	for _, ws := range conns {
		m := readWS(t, ws)
		var got protocol.ConfigRef
		if m.Type != protocol.WSActiveConfig || json.Unmarshal(m.Payload, &got) != nil || got != ref {
			t.Fatalf("got %s %s, want active_config %+v", m.Type, m.Payload, ref)
		}
	}
	g := s.SetIPGroup(protocol.WAFIPGroup{ID: 5, Name: "x", Enabled: true, IPList: []string{"192.0.2.5"}})
	for _, ws := range conns {
		m := readWS(t, ws)
		var got []protocol.WAFIPGroup
		if m.Type != protocol.WSWAFIPGroups || json.Unmarshal(m.Payload, &got) != nil || len(got) != 1 || got[0].Checksum != g.Checksum {
			t.Fatalf("got %s %s, want a one-element waf_ip_groups", m.Type, m.Payload)
		}
	}
	if err := s.Activate(ref.Version); err != nil {
		t.Fatal(err)
	}
	if m := readWS(t, conns[0]); m.Type != protocol.WSActiveConfig {
		t.Fatalf("got %s after Activate, want active_config", m.Type)
	}
}

func TestWSBadTokenGets401WithoutUpgrade(t *testing.T) {
	s := startServer(t)
	if _, err := dialWS(s, "bad"); err == nil {
		t.Fatal("dial with a bad token succeeded")
	}
	r := call(t, s, http.MethodGet, protocol.PathWebSocket, "bad", nil,
		"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	wantError(t, r, http.StatusUnauthorized, msgBadAgentToken)
	if r.header.Get("Upgrade") != "" {
		t.Fatal("a rejected upgrade carried an Upgrade header")
	}
}

func TestWSServerPing(t *testing.T) {
	s := New()
	s.WSPingInterval = 20 * time.Millisecond
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	id, tok := s.AddNode("n")
	ws := mustDialWS(t, s, id, tok)
	raw, err := readWSRaw(ws)
	if err != nil || string(raw) != `{"type":"ping"}` {
		t.Fatalf("got %q (%v), want a JSON ping", raw, err)
	}
}

func TestWSReadDeadlineClosesIdleConnections(t *testing.T) {
	s := New()
	s.WSReadDeadline = 150 * time.Millisecond
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	id, tok := s.AddNode("n")
	ws := mustDialWS(t, s, id, tok)
	start := time.Now()
	if _, err := readWSRaw(ws); err == nil {
		t.Fatal("an idle connection got a message instead of being closed")
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Fatalf("closed after %v, before the read deadline", took)
	}
	if err := s.WaitWS(testContext(t), id, false); err != nil {
		t.Fatal(err)
	}
}

func TestWSForceSync(t *testing.T) {
	s := startServer(t)
	id, tok := s.AddNode("n")
	if err := s.ForceSync(id); err == nil {
		t.Fatal("force sync without an active version succeeded")
	}
	ref := s.PublishWithChecksum(vectorBSource, nil, "c1")
	if err := s.ForceSync(id); err == nil {
		t.Fatal("force sync without a WebSocket succeeded")
	}
	ws := mustDialWS(t, s, id, tok)
	if err := s.ForceSync(id); err != nil {
		t.Fatal(err)
	}
	m := readWS(t, ws)
	var got protocol.ConfigRef
	if m.Type != protocol.WSForceSyncConfig || json.Unmarshal(m.Payload, &got) != nil || got != ref {
		t.Fatalf("got %s %s, want force_sync_config %+v", m.Type, m.Payload, ref)
	}
}

func TestWSFaults(t *testing.T) {
	s := startServer(t)
	id, tok := s.AddNode("n")
	ws := mustDialWS(t, s, id, tok)

	if err := s.SendWSRaw(id, []byte("not json {")); err != nil {
		t.Fatal(err)
	}
	if raw, err := readWSRaw(ws); err != nil || string(raw) != "not json {" {
		t.Fatalf("got %q (%v), want the raw frame", raw, err)
	}
	if err := s.SendWSOversized(id, 1<<20); err != nil {
		t.Fatal(err)
	}
	if raw, err := readWSRaw(ws); err != nil || len(raw) != 1<<20 || !json.Valid(raw) {
		t.Fatalf("oversized frame: %d bytes (%v), want %d bytes of JSON", len(raw), err, 1<<20)
	}

	const stall = 300 * time.Millisecond
	if err := s.StallWS(id, stall); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sendWS(t, ws, protocol.WSPing, nil)
	if m := readWS(t, ws); m.Type != protocol.WSPong || time.Since(start) < stall-50*time.Millisecond {
		t.Fatalf("got %s after %v, want pong after the %v stall", m.Type, time.Since(start), stall)
	}
	if err := s.StallWS(id, time.Hour); err != nil {
		t.Fatal(err)
	}
	var failed int
	for range 2 * wsQueueSize {
		if s.SendWSRaw(id, []byte(`{"type":"ping"}`)) != nil {
			failed++
		}
	}
	if failed < wsQueueSize-1 {
		t.Fatalf("%d of %d sends failed on a stalled connection, want the queue of %d to overflow", failed, 2*wsQueueSize, wsQueueSize)
	}

	if err := s.DropWS(id); err != nil {
		t.Fatal(err)
	}
	if _, err := readWSRaw(ws); err == nil {
		t.Fatal("the connection survived DropWS")
	}
	if err := s.WaitWS(testContext(t), id, false); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"DropWS":          s.DropWS(id),
		"StallWS":         s.StallWS(id, time.Second),
		"SendWSRaw":       s.SendWSRaw(id, []byte("x")),
		"SendWSOversized": s.SendWSOversized(id, 10),
	} {
		if err == nil || !strings.Contains(err.Error(), "no websocket") {
			t.Errorf("%s without a WebSocket: %v, want an error", name, err)
		}
	}
}
