package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

// wsControlPlane allows the WebSocket and makes the heartbeat interval long,
// so anything that happens fast happened because of a push.
//
// pushBound is "fast": a third of that interval, so a push (or an
// immediate beat) is told from a wait for the interval, while a loaded
// 2-core runner, an agent under the race detector and nginx -t plus a
// reload for each apply still get their seconds.
const pushBound = 10 * time.Second

func wsControlPlane(t *testing.T) *controlplane.Server {
	cp := controlPlane(t)
	cp.UpdateSettings("", func(s *protocol.AgentSettings) {
		s.HeartbeatInterval = 30000
		s.WebsocketUpgradeEnabled = true
	})
	return cp
}

// connectedNode starts a node and waits until its WebSocket is up.
func connectedNode(t *testing.T, cp *controlplane.Server) (*node, string) {
	t.Helper()
	n := newNode(t, cp, nil)
	n.start()
	return n, n.waitConnected()
}

// waitConnected waits until the started node registered and its WebSocket
// is up, and returns its node id.
func (n *node) waitConnected() string {
	t, cp := n.t, n.cp
	t.Helper()
	var nodeID string
	testsupport.WaitFor(t, 30*time.Second, "the node to register", func() bool {
		for _, nd := range cp.Nodes() {
			if nd.Heartbeats > 0 {
				nodeID = nd.NodeID
				return true
			}
		}
		return false
	})
	if err := cp.WaitWS(ctxFor(t, 30*time.Second), nodeID, true); err != nil {
		t.Fatalf("websocket never connected: %v\n%s", err, n.tail())
	}
	return nodeID
}

// A publish while the WebSocket is up applies at once (within pushBound;
// the log shows the real figure), without waiting for the (here 30 s)
// heartbeat interval, and the route serves.
func TestPublishOverWebSocket(t *testing.T) {
	cp := wsControlPlane(t)
	o := origin(t, "ws")
	v1 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "one.test", o)}})
	n, _ := connectedNode(t, cp)
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	waitServes(t, "one.test", "/", "origin-ok ws")

	for i := 0; i < 3; i++ {
		host := fmt.Sprintf("push%d.test", i)
		start := time.Now()
		ref := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "one.test", o), proxyRoute(2, host, o)}})
		waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
		waitServes(t, host, "/", "origin-ok ws")
		took := time.Since(start)
		t.Logf("publish %d → serving over WebSocket: %v", i, took.Round(time.Millisecond))
		if took > pushBound {
			t.Fatalf("publish took %v to serve; a push should apply within %v, not at the 30 s heartbeat", took, pushBound)
		}
	}
	if st := n.state(); st.Channel != "websocket" {
		t.Fatalf("state channel %q", st.Channel)
	}
}

// Killing the server's socket: the agent sends an HTTP heartbeat within a
// second, keeps beating over HTTP, and reconnects with growing, jittered
// delays while the server refuses; once it accepts again the socket is back.
func TestWebSocketFallbackAndBackoff(t *testing.T) {
	cp := wsControlPlane(t)
	n, nodeID := connectedNode(t, cp)
	httpBeats := func() int {
		c := 0
		for _, b := range cp.Heartbeats() {
			if b.Channel == "http" {
				c++
			}
		}
		return c
	}
	before := httpBeats()
	refuse := 3
	cp.Inject(controlplane.Fault{Path: protocol.PathWebSocket, Status: 503, Times: refuse})
	dropped := time.Now()
	if err := cp.DropWS(nodeID); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, 30*time.Second, "an HTTP heartbeat after the drop", func() bool { return httpBeats() > before })
	d := time.Since(dropped)
	t.Logf("first HTTP beat %v after the drop", d.Round(time.Millisecond))
	if d > pushBound {
		t.Fatalf("first HTTP beat %v after the drop; want at once, not at the 30 s heartbeat", d)
	}
	waitReconnect(t, cp, nodeID, 90*time.Second)
	retryRe := regexp.MustCompile(`msg="websocket unavailable; heartbeating over HTTP".* retry_in=(\S+)`)
	var delays []time.Duration
	for _, m := range retryRe.FindAllStringSubmatch(n.logs.String(), -1) {
		d, _ := time.ParseDuration(m[1])
		delays = append(delays, d)
	}
	if len(delays) < refuse+1 {
		t.Fatalf("%d reconnect delays logged, want %d: %v", len(delays), refuse+1, delays)
	}
	// One delay for the drop, then one per refusal: 1 s·2^k with jitter.
	for k, d := range delays[:refuse+1] {
		ceil := min(time.Second<<k, 30*time.Second)
		if d < ceil/2 || d > ceil {
			t.Fatalf("delay %d = %v outside [%v, %v]: %v", k, d, ceil/2, ceil, delays)
		}
	}
	if slices.Equal(delays[:3], []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}) {
		t.Fatalf("delays are not jittered: %v", delays)
	}
}

// A 100 000-entry IP group pushed over the WebSocket lands, is enforced by
// nginx (blocked address blocked, neighbour passes) without a reload, and
// the next status reports its new checksum.
func TestLargeIPGroupPushedWithoutReload(t *testing.T) {
	cp := wsControlPlane(t)
	cp.SetIPGroup(protocol.WAFIPGroup{ID: 7, Name: "big", Type: "manual", Enabled: true, IPList: []string{"203.0.113.1"}})
	v1 := publish(t, cp, controlplane.Source{
		Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1"))},
		WAF:    &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), controlplane.IPMatchRuleGroup(2, "big", 7)}},
	})
	n, nodeID := connectedNode(t, cp)
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	waitServes(t, "app.test", "/", "origin-ok v1")
	testsupport.WaitFor(t, 30*time.Second, "the snapshot to hold group 7", func() bool {
		return strings.Contains(readFileOr(n.data("etc", "openflare", "waf_ip_groups.json")), `"7":`)
	})
	master := n.nginxPID()
	workers := workerPIDs(master)

	list := make([]string, 0, 100000)
	for i := 0; len(list) < 99999; i++ {
		list = append(list, fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff))
	}
	list = append(list, "127.0.0.10")
	pushed := time.Now()
	g := cp.SetIPGroup(protocol.WAFIPGroup{ID: 7, Name: "big", Type: "manual", Enabled: true, IPList: list})
	testsupport.WaitFor(t, 30*time.Second, "the agent to land the group", func() bool { return n.ipChecksum(7) == g.Checksum })
	landed := time.Since(pushed)
	testsupport.WaitFor(t, 10*time.Second, "nginx to block 127.0.0.10", func() bool {
		return request("GET", "http", "app.test", "/", "127.0.0.10").status == 403
	})
	t.Logf("100 000-entry group: pushed → landed %v, → enforced %v", landed.Round(time.Millisecond), time.Since(pushed).Round(time.Millisecond))
	if r := request("GET", "http", "app.test", "/", "127.0.0.11"); r.status != 200 {
		t.Fatalf("neighbour 127.0.0.11: %d %q", r.status, r.body)
	}
	if got := workerPIDs(n.nginxPID()); n.nginxPID() != master || !slices.Equal(got, workers) {
		t.Fatalf("nginx reloaded: master %d→%d workers %v→%v", master, n.nginxPID(), workers, got)
	}
	// The agent reports right after landing, not at the next interval (30 s).
	if _, err := cp.WaitHeartbeat(ctxFor(t, 10*time.Second), func(b controlplane.Beat) bool {
		return b.NodeID == nodeID && b.Payload.WAFIPGroupChecksums["7"] == g.Checksum
	}); err != nil {
		t.Fatalf("status never reported the new checksum: %v", err)
	}

}

// A group whose checksum does not match its content is rejected; the
// others land.
func TestIPGroupWrongChecksumRejected(t *testing.T) {
	cp := wsControlPlane(t)
	cp.SetIPGroup(protocol.WAFIPGroup{ID: 3, Name: "good", Type: "manual", Enabled: true, IPList: []string{"127.0.0.30"}})
	cp.SetIPGroup(protocol.WAFIPGroup{ID: 4, Name: "bad", Type: "manual", Enabled: true, IPList: []string{"127.0.0.40"}})
	cp.SetIPGroupChecksumOverride(4, strings.Repeat("0", 64))
	v1 := publish(t, cp, controlplane.Source{
		Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1"))},
		WAF:    &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), controlplane.IPMatchRuleGroup(2, "groups", 3, 4)}},
	})
	n, _ := connectedNode(t, cp)
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	n.waitLog(`msg="IP group rejected" id=4`, 30*time.Second)
	testsupport.WaitFor(t, 10*time.Second, "group 3 enforced", func() bool {
		return request("GET", "http", "app.test", "/", "127.0.0.30").status == 403
	})
	if r := request("GET", "http", "app.test", "/", "127.0.0.40"); r.status != 200 {
		t.Fatalf("the rejected group is enforced: %d", r.status)
	}
	if n.ipChecksum(4) != "" {
		t.Fatal("the rejected group landed")
	}
}

// force_sync_config clears the blocklist and re-applies the version.
func TestForceSyncReappliesBlockedVersion(t *testing.T) {
	cp := wsControlPlane(t)
	// A version that fails only while something else holds its port: it
	// is blocked first, then forced once the port is free.
	tmpl := strings.Replace(controlplane.StockMainTemplate, "    include {{OpenRestyRouteConfigInclude}};",
		"    server { listen 127.0.0.1:8444; return 200 \"forced\"; }\n    include {{OpenRestyRouteConfigInclude}};", 1)
	v0 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v0"))}})
	n, nodeID := connectedNode(t, cp)
	waitApplyLog(t, cp, v0.Version, protocol.ResultSuccess)
	ln := listen(t, "127.0.0.1:8444")
	v1 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1"))}, OpenResty: map[string]any{"main_config_template": tmpl}})
	waitApplyLog(t, cp, v1.Version, protocol.ResultWarning)
	if st := n.state(); st.Blocked.Version != v1.Version {
		t.Fatalf("not blocked: %+v", st)
	}
	ln.Close()
	if err := cp.ForceSync(nodeID); err != nil {
		t.Fatal(err)
	}
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	waitServes(t, "app.test", "/", "origin-ok v1")
	if st := n.state(); st.Blocked.Version != "" || st.Current.Version != v1.Version {
		t.Fatalf("state after force sync %+v", st)
	}
}

// The server turning the WebSocket off closes it and the agent goes back
// to HTTP heartbeats.
func TestSettingsTurnWebSocketOff(t *testing.T) {
	cp := wsControlPlane(t)
	_, nodeID := connectedNode(t, cp)
	cp.UpdateSettings(nodeID, func(s *protocol.AgentSettings) {
		s.WebsocketUpgradeEnabled = false
		s.HeartbeatInterval = 300
	})
	// The next status reply carries the new settings.
	if err := cp.WaitWS(ctxFor(t, 60*time.Second), nodeID, false); err != nil {
		t.Fatal(err)
	}
	before := len(cp.Heartbeats())
	testsupport.WaitFor(t, 30*time.Second, "HTTP heartbeats", func() bool {
		hb := cp.Heartbeats()
		return len(hb) >= before+3 && hb[len(hb)-1].Channel == "http"
	})
	if cp.WSConnected(nodeID) {
		t.Fatal("reconnected although disabled")
	}
}

// Garbage and oversized frames do not bring the agent down, nor the
// session: a 40 MiB frame is skipped, and the socket carries on.
func TestWebSocketGarbageFrames(t *testing.T) {
	cp := wsControlPlane(t)
	n, nodeID := connectedNode(t, cp)
	for _, f := range []string{"not json", `{"type":"mystery","payload":1}`, `{"type":"active_config","payload":"bad"}`} {
		if err := cp.SendWSRaw(nodeID, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	o := origin(t, "after-garbage")
	ref := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "g.test", o)}})
	waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	if !cp.WSConnected(nodeID) {
		t.Fatal("garbage frames dropped the socket")
	}
	sessions := cp.Requests(protocol.PathWebSocket)
	if err := cp.SendWSOversized(nodeID, 40<<20); err != nil {
		t.Fatal(err)
	}
	n.waitLog("websocket message ignored: cannot decode", 30*time.Second)
	ref = publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "g.test", origin(t, "after-oversized"))}})
	waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	if got := cp.Requests(protocol.PathWebSocket); got != sessions || !cp.WSConnected(nodeID) || strings.Contains(n.logs.String(), "websocket unavailable") {
		t.Fatalf("the oversized frame dropped the socket (%d sessions, was %d)", got, sessions)
	}
}

// waitReconnect waits for the node's WebSocket to come back after a drop.
// The server lets go of a dropped socket in its own goroutine, after the
// agent's HTTP beat perhaps, and the reconnect comes a backoff (half a
// second or more) later: waiting for the socket to be gone first keeps the
// dropped one from passing for the new one.
func waitReconnect(t *testing.T, cp *controlplane.Server, nodeID string, within time.Duration) {
	t.Helper()
	if err := cp.WaitWS(ctxFor(t, 30*time.Second), nodeID, false); err != nil {
		t.Fatalf("the server never let go of the dropped socket: %v", err)
	}
	if err := cp.WaitWS(ctxFor(t, within), nodeID, true); err != nil {
		t.Fatalf("no reconnect: %v", err)
	}
}
