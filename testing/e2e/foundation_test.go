package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

// Discovery registration: the token lands in agent.json (other keys and
// formatting untouched, discovery_token emptied), a restart does not
// register again, and the server holds exactly one node.
func TestDiscoveryRegistration(t *testing.T) {
	cp := controlPlane(t)
	n := newNode(t, cp, map[string]any{"discovery_token": cp.DiscoveryToken()})
	// The operator's own layout: odd spacing and key order, a key we do not
	// know, defaults left out.
	orig, _ := os.ReadFile(n.config)
	var m map[string]any
	json.Unmarshal(orig, &m)
	custom := "{\n\t\"server_url\":   \"" + cp.URL() + "\",\n\t\"discovery_token\": \"" + cp.DiscoveryToken() + "\",\n" +
		"\t\"node_name\": \"" + m["node_name"].(string) + "\",\n\t\"node_ip\": \"198.51.100.10\",\n" +
		"\t\"openresty_path\": \"" + m["openresty_path"].(string) + "\",\n\t\"data_dir\": \"" + m["data_dir"].(string) + "\",\n" +
		"\t\"x_note\": \"kept as written\"\n}\n"
	os.WriteFile(n.config, []byte(custom), 0o600)

	n.start()
	if _, err := cp.WaitHeartbeat(ctxFor(t, 30*time.Second), func(b controlplane.Beat) bool { return true }); err != nil {
		t.Fatalf("no heartbeat after registration: %v", err)
	}
	nodes := cp.Nodes()
	if len(nodes) != 1 {
		t.Fatalf("%d nodes on the server, want 1", len(nodes))
	}
	after, _ := os.ReadFile(n.config)
	want := strings.Replace(custom, `"discovery_token": "`+cp.DiscoveryToken()+`"`, `"discovery_token": ""`, 1)
	want = strings.Replace(want, "{\n", "{\n\t\"agent_token\": \""+nodes[0].Token+"\",\n", 1)
	if string(after) != want {
		t.Fatalf("agent.json after registration:\n%s\nwant:\n%s", after, want)
	}
	if st := n.state(); st.NodeID != nodes[0].NodeID {
		t.Fatalf("state node_id %q, server %q", st.NodeID, nodes[0].NodeID)
	}

	n.stop()
	beats := len(cp.Heartbeats())
	n.start()
	testsupport.WaitFor(t, 30*time.Second, "a heartbeat after restart", func() bool { return len(cp.Heartbeats()) > beats })
	if got := cp.Requests(protocol.PathRegister); got != 1 {
		t.Fatalf("register called %d times, want 1", got)
	}
	if got := len(cp.Nodes()); got != 1 {
		t.Fatalf("%d nodes after restart, want 1", got)
	}
}

// Old servers send the token as agent_token.
func TestRegistrationOldServer(t *testing.T) {
	cp := controlPlane(t)
	cp.SetOldServer(true)
	n := newNode(t, cp, map[string]any{"discovery_token": cp.DiscoveryToken()})
	n.start()
	if _, err := cp.WaitHeartbeat(ctxFor(t, 30*time.Second), func(controlplane.Beat) bool { return true }); err != nil {
		t.Fatalf("no heartbeat: %v", err)
	}
	var c map[string]string
	b, _ := os.ReadFile(n.config)
	json.Unmarshal(b, &c)
	if nodes := cp.Nodes(); len(nodes) != 1 || c["agent_token"] != nodes[0].Token || c["discovery_token"] != "" {
		t.Fatalf("agent.json %s, nodes %+v", b, nodes)
	}
}

// A register reply without a token is an error: agent.json stays as it
// was, and the agent does not hammer the server with more registrations.
func TestRegistrationEmptyToken(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == protocol.PathRegister {
			calls.Add(1)
			io.WriteString(w, `{"error_msg":"","data":{"node_id":"node-0123","access_token":""}}`)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	cp := controlPlane(t)
	n := newNode(t, cp, map[string]any{"discovery_token": "disc-0123456789abcdef", "server_url": srv.URL})
	before, _ := os.ReadFile(n.config)
	n.start()
	n.waitLog("registration reply carried no usable node id or token", 30*time.Second)
	after, _ := os.ReadFile(n.config)
	if string(after) != string(before) {
		t.Fatalf("agent.json changed:\n%s", after)
	}
	time.Sleep(time.Second) // the only way to show something does NOT happen
	if got := calls.Load(); got != 1 {
		t.Fatalf("register called %d times after a malformed reply", got)
	}
}

// A 401 on register says the discovery token was rejected.
func TestRegistrationRejected(t *testing.T) {
	cp := controlPlane(t)
	n := newNode(t, cp, map[string]any{"discovery_token": "not-the-discovery-token"})
	n.start()
	n.waitLog("discovery token rejected by the server (HTTP 401)", 30*time.Second)
	if len(cp.Nodes()) != 0 {
		t.Fatal("a node was created")
	}
}

// Heartbeats carry a non-blank version. With the server down the agent
// keeps retrying every 2 to 4 s, jittered, and recovers when the server
// returns.
func TestHeartbeatRetriesAndRecovers(t *testing.T) {
	cp := controlPlane(t)
	n := newNode(t, cp, nil)
	n.start()
	b, err := cp.WaitHeartbeat(ctxFor(t, 30*time.Second), func(controlplane.Beat) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	// A second beat means the first reply (and its interval) was taken in.
	testsupport.WaitFor(t, 30*time.Second, "a second heartbeat", func() bool { return len(cp.Heartbeats()) >= 2 })
	p := b.Payload
	if p.Version != "e2e-test" || p.Name == "" || p.ExtVersion == "" || p.HealthEvents == nil || p.SchemaVersion != 2 {
		t.Fatalf("payload %+v", p)
	}
	if err := cp.SetDown(true); err != nil {
		t.Fatal(err)
	}
	// Wait for four failures, then read the delays the agent chose.
	retryRe := regexp.MustCompile(`msg="heartbeat failed".* attempt=(\d+) retry_in=(\S+)`)
	testsupport.WaitFor(t, 60*time.Second, "four failed heartbeats", func() bool {
		return len(retryRe.FindAllString(n.logs.String(), -1)) >= 4
	})
	var delays []time.Duration
	for _, m := range retryRe.FindAllStringSubmatch(n.logs.String(), -1) {
		d, _ := time.ParseDuration(m[2])
		delays = append(delays, d)
	}
	// However short the server's interval (here 300 ms), no faster than
	// one attempt per 2 s, and no slower than one per 4 s.
	for i, d := range delays[:4] {
		if d < 2*time.Second || d > 4*time.Second {
			t.Fatalf("delay %d = %v, want within [2s, 4s]; all %v", i+1, d, delays)
		}
	}
	if slices.Min(delays) == slices.Max(delays) {
		t.Fatalf("delays are not jittered: %v", delays)
	}
	before := len(cp.Heartbeats())
	if err := cp.SetDown(false); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, 30*time.Second, "heartbeats after the server returned", func() bool { return len(cp.Heartbeats()) > before })
	if n.cmd == nil {
		t.Fatal("agent exited while the server was down")
	}
}

// Oversized and truncated replies give clear errors naming the endpoint,
// and change nothing: the node keeps serving its version.
func TestBadRepliesChangeNothing(t *testing.T) {
	cp := controlPlane(t)
	o := origin(t, "v1")
	ref := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "bad.test", o)}, OpenResty: noErrorPages})
	n := newNode(t, cp, nil)
	n.start()
	waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	waitServes(t, "bad.test", "/", "origin-ok v1")

	// 33 MiB of one string: refused once the string passes its 1 MiB
	// budget, long before the 32 MiB reply cap.
	cp.Inject(controlplane.Fault{Path: protocol.PathHeartbeat, Oversize: 33 << 20})
	n.waitLog("heartbeat: reply holds a value over 1 MiB", 30*time.Second)

	o2 := origin(t, "v2")
	cp.Inject(controlplane.Fault{Path: protocol.PathActive, Truncate: true})
	ref2 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "bad.test", o2)}, OpenResty: noErrorPages})
	n.waitLog("fetch active config: active config: read reply: unexpected EOF", 30*time.Second)
	if st := n.state(); st.Current.Version != ref.Version {
		t.Fatalf("state moved to %q on a truncated reply", st.Current.Version)
	}
	// The next beat fetches again and applies the new version.
	waitApplyLog(t, cp, ref2.Version, protocol.ResultSuccess)
	waitServes(t, "bad.test", "/", "origin-ok v2")
}

// A corrupt state file is moved aside and the agent runs.
func TestCorruptStateMovedAside(t *testing.T) {
	cp := controlPlane(t)
	n := newNode(t, cp, nil)
	statePath := n.data("var", "lib", "openflare", "agent-state.json")
	os.MkdirAll(filepath.Dir(statePath), 0o750)
	os.WriteFile(statePath, []byte(`{"current_version": "2026`), 0o600)
	n.start()
	if _, err := cp.WaitHeartbeat(ctxFor(t, 30*time.Second), func(controlplane.Beat) bool { return true }); err != nil {
		t.Fatal(err)
	}
	aside, _ := filepath.Glob(statePath + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("corrupt state not moved aside: %v", aside)
	}
	// Logged before the first beat, but relayed by the goroutine that
	// copies the agent's output: on a loaded machine it may trail the beat.
	n.waitLog("state file could not be parsed; moved aside", 30*time.Second)
}

// The agent's log never carries a token; every test checks its own log in
// cleanup, this one also checks the one-shot path and a 401 storm.
func TestTokensNeverLogged(t *testing.T) {
	cp := controlPlane(t)
	n := newNode(t, cp, nil)
	cp.Inject(controlplane.Fault{Path: protocol.PathHeartbeat, Status: 401, Times: 3})
	n.start()
	testsupport.WaitFor(t, 30*time.Second, "a heartbeat after the 401s", func() bool { return len(cp.Heartbeats()) > 0 })
	// The 401s were logged before the beat that got through, but the
	// goroutine copying the agent's output may not have relayed them yet.
	n.waitLog("HTTP 401", 30*time.Second)
	logs := n.logs.String()
	for _, tok := range n.tokens() {
		if tok != "" && strings.Contains(logs, tok) {
			t.Fatal("token in log")
		}
	}
}
