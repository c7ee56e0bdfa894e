package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

// Publishing a version: the route serves through nginx, a success apply log
// with the version reaches the control plane, and state records the
// version and checksum.
func TestPublishServes(t *testing.T) {
	cp := controlPlane(t)
	o := origin(t, "one")
	ref := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", o)}})
	n := newNode(t, cp, nil)
	n.start()
	rec := waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	if rec.Checksum != ref.Checksum || rec.MainConfigChecksum == "" || rec.SupportFileCount == 0 {
		t.Fatalf("apply log %+v", rec)
	}
	waitServes(t, "app.test", "/hello", "origin-ok one /hello")
	if st := n.state(); st.Current.Version != ref.Version || st.Current.Checksum != ref.Checksum {
		t.Fatalf("state %+v, want %+v", st, ref)
	}
	// A host no route serves gets the default server's 421.
	if r := get("other.test", "/"); r.status != 421 {
		t.Fatalf("unknown host: %d %q", r.status, r.body)
	}
	// The agent's own checksum of its render equals the server's: no
	// mismatch note in the apply message.
	if strings.Contains(rec.Message, "differs") {
		t.Fatalf("checksum mismatch: %s", rec.Message)
	}
}

// badTemplate is the stock main template with a directive nginx rejects.
var badTemplate = strings.Replace(controlplane.StockMainTemplate, "server_tokens off;", "server_tokens off;\n    no_such_directive on;", 1)

// A version nginx rejects: the old route still serves, the apply log is a
// warning, the version is blocklisted and not fetched again on the next
// heartbeats; a third, good version applies.
func TestBadVersionRollsBack(t *testing.T) {
	cp := controlPlane(t)
	o1, o3 := origin(t, "v1"), origin(t, "v3")
	n, v1 := servingNode(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", o1)}}, "app.test", "origin-ok v1")

	v2 := publish(t, cp, controlplane.Source{
		Routes:    []controlplane.Route{proxyRoute(1, "app.test", o3)},
		OpenResty: map[string]any{"main_config_template": badTemplate},
	})
	rec := waitApplyLog(t, cp, v2.Version, protocol.ResultWarning)
	if !strings.Contains(rec.Message, `unknown directive "no_such_directive"`) {
		t.Fatalf("warning does not carry nginx's error: %s", rec.Message)
	}
	waitServes(t, "app.test", "/", "origin-ok v1")
	st := n.state()
	if st.Blocked.Version != v2.Version || st.Blocked.Checksum != v2.Checksum || st.Current.Version != v1.Version {
		t.Fatalf("state %+v", st)
	}
	fetches := cp.Requests(protocol.PathActive)
	beats := len(cp.Heartbeats())
	testsupport.WaitFor(t, 30*time.Second, "five more heartbeats", func() bool { return len(cp.Heartbeats()) >= beats+5 })
	if got := cp.Requests(protocol.PathActive); got != fetches {
		t.Fatalf("blocked version fetched again: %d → %d", fetches, got)
	}
	b := cp.Heartbeats()[len(cp.Heartbeats())-1].Payload
	if b.LastError == "" || !hasEvent(b, "sync_error") {
		t.Fatalf("heartbeat does not report the failure: %+v", b)
	}

	v3 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", o3)}})
	waitApplyLog(t, cp, v3.Version, protocol.ResultSuccess)
	waitServes(t, "app.test", "/", "origin-ok v3")
	if st := n.state(); st.Blocked.Version != "" || st.LastError != "" {
		t.Fatalf("blocklist or error not cleared: %+v", st)
	}
}

// A version that passes nginx -t but fails when nginx loads it (here: its
// port is taken) is rolled back from the on-disk backup.
func TestReloadFailureRestoresBackup(t *testing.T) {
	cp := controlPlane(t)
	o := origin(t, "v1")
	n, _ := servingNode(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", o)}}, "app.test", "origin-ok v1")

	ln, err := net.Listen("tcp", "127.0.0.1:8443")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tmpl := strings.Replace(controlplane.StockMainTemplate, "    include {{OpenRestyRouteConfigInclude}};",
		"    server { listen 127.0.0.1:8443; return 200; }\n    include {{OpenRestyRouteConfigInclude}};", 1)
	v2 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", o)}, OpenResty: map[string]any{"main_config_template": tmpl}})
	rec := waitApplyLog(t, cp, v2.Version, protocol.ResultWarning)
	if !strings.Contains(rec.Message, "rolled back to previous config") || !strings.Contains(rec.Message, "8443") {
		t.Fatalf("apply log %s", rec.Message)
	}
	waitServes(t, "app.test", "/", "origin-ok v1")
	// The restored main config is the previous one, byte for byte.
	if strings.Contains(testsupport.ReadFile(t, n.data("etc", "nginx", "nginx.conf")), "8443") {
		t.Fatal("the failed version's main config is still on disk")
	}
}

// The first deployment is bad and there is nothing to roll back to: the
// safe fallback answers 503 on port 80, stub_status answers on the
// loopback observability port, the apply log is a warning and the version
// is blocklisted.
func TestFirstDeploymentBadStartsFallback(t *testing.T) {
	cp := controlPlane(t)
	v1 := publish(t, cp, controlplane.Source{
		Routes:    []controlplane.Route{proxyRoute(1, "app.test", origin(t, "x"))},
		OpenResty: map[string]any{"main_config_template": badTemplate},
	})
	n := newNode(t, cp, nil)
	n.start()
	rec := waitApplyLog(t, cp, v1.Version, protocol.ResultWarning)
	if !strings.Contains(rec.Message, "fallback runtime started") {
		t.Fatalf("apply log %s", rec.Message)
	}
	r := get("app.test", "/anything")
	if r.status != 503 || r.body != "OpenFlare: No Valid Configuration\n" {
		t.Fatalf("port 80: %d %q %v", r.status, r.body, r.err)
	}
	resp, err := http.Get("http://127.0.0.1:18081/openflare/stub_status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stub_status %d", resp.StatusCode)
	}
	if st := n.state(); st.Blocked.Version != v1.Version || st.Blocked.Checksum != v1.Checksum {
		t.Fatalf("state %+v", st)
	}
	// The blocklist survives a restart.
	n.stop()
	fetches := cp.Requests(protocol.PathActive)
	n.start()
	testsupport.WaitFor(t, 30*time.Second, "heartbeats after restart", func() bool {
		return len(cp.Heartbeats()) > 0 && cp.Heartbeats()[len(cp.Heartbeats())-1].At.After(time.Now().Add(-time.Second))
	})
	beats := len(cp.Heartbeats())
	testsupport.WaitFor(t, 30*time.Second, "three more heartbeats", func() bool { return len(cp.Heartbeats()) >= beats+3 })
	if cp.Requests(protocol.PathActive) != fetches {
		t.Fatal("blocked version fetched again after a restart")
	}
}

// Restarting the agent while the control plane is down: nginx is started
// from the last landed config before the agent talks to the server.
func TestBootWithServerDown(t *testing.T) {
	cp := controlPlane(t)
	n, _ := appV1(t, cp)
	n.stop()
	n.stopNginx() // a reboot
	if r := get("app.test", "/"); r.err == nil {
		t.Fatalf("nginx still answers after stop: %d", r.status)
	}
	if err := cp.SetDown(true); err != nil {
		t.Fatal(err)
	}
	n.start()
	waitServes(t, "app.test", "/", "origin-ok v1")
}

// An address inside a blocked CIDR gets the block status through nginx;
// its neighbours pass.
func TestBlockedCIDR(t *testing.T) {
	cp := controlPlane(t)
	block := controlplane.RuleGroup{ID: 2, Name: "block-cidr", Enabled: true, Graph: controlplane.Graph{Entry: "start", Nodes: map[string]controlplane.GraphNode{
		"start": {Type: "start", Next: map[string]string{"next": "ipm"}},
		"ipm":   {Type: "ip_match", Config: json.RawMessage(`{"cidrs":["127.0.0.8/29"]}`), Next: map[string]string{"true": "block", "false": "allow"}},
		"block": {Type: "block", Config: json.RawMessage(`{"status_code":451,"response_body":"blocked by cidr"}`)},
		"allow": {Type: "allow"},
	}}}
	v1 := publish(t, cp, controlplane.Source{
		Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1"))},
		WAF:    &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), block}},
	})
	n := newNode(t, cp, nil)
	n.start()
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	waitServes(t, "app.test", "/", "origin-ok v1")
	for _, from := range []string{"127.0.0.8", "127.0.0.10", "127.0.0.15"} {
		if r := request("GET", "http", "app.test", "/", from); r.status != 451 || r.body != "blocked by cidr\n" {
			t.Fatalf("from %s: %d %q %v", from, r.status, r.body, r.err)
		}
	}
	for _, from := range []string{"127.0.0.7", "127.0.0.16", "127.0.0.1"} {
		if r := request("GET", "http", "app.test", "/", from); r.status != 200 {
			t.Fatalf("from %s: %d %q %v", from, r.status, r.body, r.err)
		}
	}
}

// HTTPS with a certificate and a redirect: the route serves over TLS with
// the right certificate, and plain HTTP redirects.
func TestHTTPSRoute(t *testing.T) {
	cp := controlPlane(t)
	certPEM, keyPEM := controlplane.SelfSignedCert(5, "secure.test")
	r := proxyRoute(1, "secure.test", origin(t, "tls"))
	r.EnableHTTPS, r.DomainCertIDs, r.RedirectHTTP = true, []uint64{5}, true
	v1 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{r}}, controlplane.CertFiles(5, certPEM, keyPEM)...)
	n := newNode(t, cp, nil)
	n.start()
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	var got reply
	testsupport.WaitFor(t, 30*time.Second, "the HTTPS route", func() bool {
		got = request("GET", "https", "secure.test", "/x", "")
		return got.status == 200
	})
	if got.body != "origin-ok tls /x" {
		t.Fatalf("https: %q", got.body)
	}
	if r := get("secure.test", "/x"); r.status != 301 || r.header.Get("Location") != "https://secure.test/x" {
		t.Fatalf("http: %d %v", r.status, r.header)
	}
	// A name no site has gets no handshake, and a request whose Host no
	// site has gets nothing of nginx's own (its welcome page).
	if c, err := tls.Dial("tcp", "127.0.0.1:443", &tls.Config{InsecureSkipVerify: true, ServerName: "nosuch.test"}); err == nil {
		c.Close()
		t.Fatal("a TLS handshake for an unknown name succeeded")
	}
	c, err := tls.Dial("tcp", "127.0.0.1:443", &tls.Config{InsecureSkipVerify: true, ServerName: "secure.test"})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")
	b, _ := io.ReadAll(c)
	c.Close()
	// nginx closes such a connection, or answers with an error status.
	if strings.Contains(string(b), "Welcome to nginx") || strings.Contains(string(b), "origin-ok") || len(b) > 0 && !strings.HasPrefix(string(b), "HTTP/1.1 4") {
		t.Fatalf("a Host no site has got: %q", b)
	}
	// The key is never readable by other users.
	if mode := fileMode(t, n.data("etc", "nginx", "certs", "5.key")); mode != 0o600 {
		t.Fatalf("key mode %v", mode)
	}
}

func hasEvent(p protocol.NodePayload, typ string) bool {
	for _, e := range p.HealthEvents {
		if e.EventType == typ {
			return true
		}
	}
	return false
}

// `status` reads local files only (it works with the server down) and
// `check` validates the landed config; restart_openresty_now restarts
// nginx once, and the route keeps serving.
func TestStatusCheckAndRestart(t *testing.T) {
	cp := controlPlane(t)
	n, v1 := appV1(t, cp)
	master := n.nginxPID()

	nodeID := cp.Nodes()[0].NodeID
	cp.UpdateSettings(nodeID, func(s *protocol.AgentSettings) { s.RestartOpenRestyNow = true })
	testsupport.WaitFor(t, 30*time.Second, "nginx to restart", func() bool { p := n.nginxPID(); return p != 0 && p != master })
	waitServes(t, "app.test", "/", "origin-ok v1")
	restarted := n.nginxPID()
	beats := len(cp.Heartbeats())
	testsupport.WaitFor(t, 30*time.Second, "three more heartbeats", func() bool { return len(cp.Heartbeats()) >= beats+3 })
	if n.nginxPID() != restarted {
		t.Fatal("the one-shot restart ran more than once")
	}

	if err := cp.SetDown(true); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(agentBinary(t), "-config", n.config, "status").CombinedOutput()
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	for _, want := range []string{
		"applied version:   " + v1.Version + " (checksum " + v1.Checksum + ")",
		"blocked version:   none",
		fmt.Sprintf("running, master pid %d", restarted),
		"over HTTP",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	for _, tok := range n.tokens() {
		if tok != "" && strings.Contains(string(out), tok) {
			t.Fatal("status prints a token")
		}
	}
	out, err = exec.Command(agentBinary(t), "-config", n.config, "check").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "passes nginx -t") {
		t.Fatalf("check: %v\n%s", err, out)
	}
	// A landed config broken behind the agent's back makes check fail.
	main := n.data("etc", "nginx", "nginx.conf")
	os.WriteFile(main, []byte(testsupport.ReadFile(t, main)+"\nbroken"), 0o644)
	if out, err := exec.Command(agentBinary(t), "-config", n.config, "check").CombinedOutput(); err == nil {
		t.Fatalf("check passed a broken landed config:\n%s", out)
	}
}

// nginx stopped behind the agent's back (crash, OOM kill, an operator) is
// started again from the landed config without the server's help.
func TestDeadNginxRestarted(t *testing.T) {
	cp := controlPlane(t)
	n, _ := appV1(t, cp)
	if err := cp.SetDown(true); err != nil {
		t.Fatal(err)
	}
	n.stopNginx()
	waitServes(t, "app.test", "/", "origin-ok v1")
}

// Stopping the agent (SIGTERM) in the middle of an apply lets the apply
// finish: the version lands and is not blocklisted as failed.
func TestStopDuringApply(t *testing.T) {
	cp := controlPlane(t)
	v1 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1"))}})
	n := newNode(t, cp, nil)
	n.start()
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	v2 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v2"))}})
	n.waitLog(`msg="apply: backed up" version=`+v2.Version, 30*time.Second)
	n.stop()
	waitServes(t, "app.test", "/", "origin-ok v2")
	if st := n.state(); st.Current.Version != v2.Version || st.Blocked.Version != "" {
		t.Fatalf("state after a stop mid-apply: %+v", st)
	}
}
