// Package e2e runs the real agent binary against the test control plane and
// a real nginx, inside private namespaces (ports 80/443 on a private
// loopback). Tests here are sequential: they share those ports.
package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"syscall"
	"testing"
	"time"

	"openflare/agent/nginx"
	"openflare/agent/protocol"
	"openflare/agent/state"
	"openflare/testing/controlplane"
	"openflare/testing/nginxtest"
	"openflare/testing/nstest"
	"openflare/testing/testsupport"
)

// As root (CI) the suites run without a user namespace: nginx's master is
// root and its workers another user, as on a VPS.
func TestMain(m *testing.M) { nstest.MainRoot(m) }

// builds holds the agent binaries, built once per test binary: with the
// race detector (every test but the memory ones) or without.
var builds [2]struct {
	once gosync.Once
	bin  string
	err  error
}

// agentBinary builds the agent with the race detector and the crash points
// compiled in.
func agentBinary(t *testing.T) string { return buildAgent(t, true) }

// plainAgentBinary builds the agent as released, but with the crash
// points: memory measured under the race detector means nothing.
func plainAgentBinary(t *testing.T) string { return buildAgent(t, false) }

func buildAgent(t *testing.T, race bool) string {
	t.Helper()
	b := &builds[0]
	if race {
		b = &builds[1]
	}
	b.once.Do(func() {
		root := testsupport.ModuleRoot(t)
		dir, err := os.MkdirTemp("", "openflare-e2e-bin-")
		if err != nil {
			b.err = err
			return
		}
		// A service-user agent must be able to run it.
		if err := os.Chmod(dir, 0o755); err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(dir, "openflare-agent")
		args := []string{"build", "-race", "-ldflags", "-X main.version=e2e-test"}
		if !race {
			// As `make build` links it, so its RSS is the released one's.
			args = []string{"build", "-trimpath", "-ldflags", "-s -w -X main.version=e2e-test"}
		}
		args = append(args, "-tags", "testhooks nethttpomithttp2", "-o", b.bin, ".")
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build agent: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// controlPlane starts a test control plane with a short heartbeat interval
// and the WebSocket channel off unless a test turns it on.
func controlPlane(t *testing.T) *controlplane.Server {
	t.Helper()
	cp := controlplane.New()
	if err := cp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	cp.UpdateSettings("", func(s *protocol.AgentSettings) {
		s.HeartbeatInterval = 300
		s.WebsocketUpgradeEnabled = false
	})
	return cp
}

// origin is a backend answering "origin-ok <name> <path>".
func origin(t *testing.T, name string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "origin-ok %s %s", name, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// node is one edge node: an agent process, its files, and the nginx it runs.
type node struct {
	t       *testing.T
	cp      *controlplane.Server
	dir     string
	dataDir string
	config  string
	// wrap runs the agent through a command (umask, setpriv, ...): the
	// agent's path and arguments are appended to it.
	wrap []string
	// bin replaces the race-enabled agent (memory is measured without the
	// race detector, which multiplies it).
	bin    string
	cmd    *exec.Cmd
	exited chan struct{}
	logs   *testsupport.Buffer
}

// newNode writes agent.json for a node registered in the UI (a node token)
// unless conf sets the tokens itself. conf entries override the defaults.
func newNode(t *testing.T, cp *controlplane.Server, conf map[string]any) *node {
	t.Helper()
	dir := nstest.TraversableTempDir(t)
	n := &node{t: t, cp: cp, dir: dir, config: filepath.Join(dir, "agent.json"), logs: &testsupport.Buffer{}}
	c := map[string]any{
		"server_url":     cp.URL(),
		"node_name":      "edge-" + strings.ReplaceAll(t.Name(), "/", "-"),
		"node_ip":        "198.51.100.10",
		"openresty_path": nginxtest.Binary(t),
		"data_dir":       filepath.Join(dir, "data"),
		// The control plane's settings say the same; until the first reply
		// arrives this keeps retries and beats quick.
		"heartbeat_interval": 300,
	}
	if _, ok := conf["discovery_token"]; !ok {
		if _, ok := conf["agent_token"]; !ok {
			_, tok := cp.AddNode(c["node_name"].(string))
			c["agent_token"] = tok
		}
	}
	for k, v := range conf {
		c[k] = v
	}
	n.dataDir = c["data_dir"].(string)
	b, _ := json.MarshalIndent(c, "", "  ")
	if err := os.WriteFile(n.config, b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.cleanup)
	return n
}

// start runs the agent; env adds environment variables.
func (n *node) start(env ...string) {
	n.t.Helper()
	if n.cmd != nil {
		n.t.Fatal("agent already running")
	}
	bin := n.bin
	if bin == "" {
		bin = agentBinary(n.t)
	}
	args := []string{bin, "-config", n.config}
	if len(n.wrap) > 0 {
		args = append(slices.Clone(n.wrap), args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	// No GeoIP download from the internet: test traffic stays on loopback.
	cmd.Env = append(os.Environ(), "LOG_LEVEL=debug", "GORACE=halt_on_error=1", "OPENFLARE_MMDB_DOWNLOAD_URL=off", "OPENFLARE_CITY_MMDB_DOWNLOAD_URL=off")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = n.logs, n.logs
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.cmd = cmd
	n.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) {
		c.Wait()
		close(done)
	}(cmd, n.exited)
}

// stop sends SIGTERM and waits for a clean exit.
func (n *node) stop() {
	n.t.Helper()
	if n.cmd == nil {
		return
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(20 * time.Second):
		n.cmd.Process.Kill()
		<-n.exited
		n.t.Errorf("agent did not stop within 20 s of SIGTERM")
	}
	if code := n.cmd.ProcessState.ExitCode(); code != 0 {
		n.t.Errorf("agent exited %d after SIGTERM\n%s", code, n.tail())
	}
	n.cmd = nil
}

// kill sends SIGKILL: a crash at whatever the agent was doing.
func (n *node) kill() {
	n.t.Helper()
	if n.cmd == nil {
		return
	}
	n.cmd.Process.Kill()
	<-n.exited
	n.cmd = nil
}

// waitCrash waits for the agent to die on its own (a crash point).
func (n *node) waitCrash(timeout time.Duration) {
	n.t.Helper()
	select {
	case <-n.exited:
		n.cmd = nil
	case <-time.After(timeout):
		n.t.Fatalf("agent did not reach its crash point\n%s", n.tail())
	}
}

func (n *node) cleanup() {
	if n.cmd != nil {
		n.cmd.Process.Kill()
		<-n.exited
		n.cmd = nil
	}
	n.stopNginx()
	logs := n.logs.String()
	for _, tok := range n.tokens() {
		if tok != "" && strings.Contains(logs, tok) {
			n.t.Errorf("a token appears in the agent's log")
		}
	}
	if strings.Contains(logs, "DATA RACE") {
		n.t.Errorf("data race in the agent:\n%s", logs)
	}
	if n.t.Failed() {
		n.t.Logf("agent log:\n%s", n.tail())
	}
}

// tokens lists every secret this node could have seen.
func (n *node) tokens() []string {
	toks := []string{n.cp.DiscoveryToken(), n.cp.AdminToken()}
	for _, nd := range n.cp.Nodes() {
		toks = append(toks, nd.Token)
	}
	var c struct {
		AgentToken     string `json:"agent_token"`
		DiscoveryToken string `json:"discovery_token"`
	}
	b, _ := os.ReadFile(n.config)
	json.Unmarshal(b, &c)
	return append(toks, c.AgentToken, c.DiscoveryToken)
}

func (n *node) tail() string {
	s := n.logs.String()
	if len(s) > 12000 {
		s = "...\n" + s[len(s)-12000:]
	}
	return s
}

func (n *node) data(p ...string) string {
	return filepath.Join(append([]string{n.dataDir}, p...)...)
}

func (n *node) pidFile() string { return n.data("var", "run", "nginx.pid") }

// nginxPID returns the running master's pid, or 0.
func (n *node) nginxPID() int {
	b, err := os.ReadFile(n.pidFile())
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

// stopNginx stops the node's nginx: the agent never does, by design.
func (n *node) stopNginx() {
	pid := n.nginxPID()
	if pid == 0 {
		return
	}
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

func (n *node) state() state.State {
	var s state.State
	b, _ := os.ReadFile(n.data("var", "lib", "openflare", "agent-state.json"))
	json.Unmarshal(b, &s)
	return s
}

// waitLog waits until the agent's output contains s.
func (n *node) waitLog(s string, timeout time.Duration) {
	n.t.Helper()
	testsupport.WaitFor(n.t, timeout, "agent log line "+strconv.Quote(s), func() bool { return strings.Contains(n.logs.String(), s) })
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitApplyLog waits for an apply log of version with the given result.
func waitApplyLog(t *testing.T, cp *controlplane.Server, version, result string) protocol.ApplyLogRecord {
	t.Helper()
	rec, err := cp.WaitApplyLog(ctxFor(t, 60*time.Second), func(r protocol.ApplyLogRecord) bool {
		return r.Version == version && r.Result == result
	})
	if err != nil {
		t.Fatalf("no %s apply log for %s: %v (logs: %+v)", result, version, err, cp.ApplyLogs())
	}
	return rec
}

// reply is one HTTP answer through nginx.
type reply struct {
	status int
	body   string
	header http.Header
	err    error
}

// request sends a request to nginx on the private loopback, from the given
// source address ("" for 127.0.0.1).
func request(method, scheme, host, path, from string) reply {
	d := &net.Dialer{Timeout: 2 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			port := "80"
			if scheme == "https" {
				port = "443"
			}
			return d.DialContext(ctx, "tcp", "127.0.0.1:"+port)
		},
		// Test certificates are self-signed; the name is still checked by
		// nginx's SNI selection.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, ServerName: host},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(method, scheme+"://"+host+path, nil)
	resp, err := c.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: string(b), header: resp.Header}
}

func get(host, path string) reply { return request(http.MethodGet, "http", host, path, "") }

// waitServes waits until GET http://host/path answers 200 with a body
// containing want.
func waitServes(t *testing.T, host, path, want string) {
	t.Helper()
	var last reply
	deadline := time.Now().Add(60 * time.Second)
	for {
		last = get(host, path)
		if last.status == 200 && strings.Contains(last.body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("http://%s%s never served %q: last %d %q %v", host, path, want, last.status, last.body, last.err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// proxyRoute is a plain HTTP proxy route.
func proxyRoute(id uint64, domain, originURL string) controlplane.Route {
	return controlplane.Route{ID: id, SiteName: fmt.Sprintf("site%d", id), Domains: []string{domain}, OriginURL: originURL}
}

// publish publishes a source and fails the test on a render error.
func publish(t *testing.T, cp *controlplane.Server, src controlplane.Source, support ...protocol.SupportFile) protocol.ConfigRef {
	t.Helper()
	ref, err := cp.Publish(src.JSON(), support)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return ref
}

// noErrorPages keeps origin error pages out of tests that do not need them.
var noErrorPages = map[string]any{"origin_error_page_enabled": false}

func fileMode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func readFileOr(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// waitEveryWorker waits until every worker of master answers a request
// from client to host with status: each worker adopts a snapshot on its own
// tick, and fresh connections spread over the workers, so a run of four a
// worker all answering so means every one does.
func waitEveryWorker(t *testing.T, timeout time.Duration, master int, host, client string, status int) {
	t.Helper()
	run := 4 * len(workerPIDs(master))
	testsupport.WaitFor(t, timeout, fmt.Sprintf("every worker to answer %s from %s with %d", host, client, status), func() bool {
		for range run {
			if request("GET", "http", host, "/", client).status != status {
				return false
			}
		}
		return true
	})
}

func workerPIDs(master int) []int {
	pids := nginx.WorkerPIDs(master)
	slices.Sort(pids)
	return pids
}

// ipChecksum is the checksum of group id in the node's IP-group snapshot.
func (n *node) ipChecksum(id uint64) string {
	var snap struct {
		Groups map[string]protocol.WAFIPGroup `json:"groups"`
	}
	json.Unmarshal([]byte(readFileOr(n.data("etc", "openflare", "waf_ip_groups.json"))), &snap)
	return snap.Groups[strconv.FormatUint(uint64(id), 10)].Checksum
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// servingNode publishes src, starts a node and waits until the version's
// success apply log arrives and http://host/ serves a body containing want.
func servingNode(t *testing.T, cp *controlplane.Server, src controlplane.Source, host, want string, support ...protocol.SupportFile) (*node, protocol.ConfigRef) {
	t.Helper()
	ref := publish(t, cp, src, support...)
	n := newNode(t, cp, nil)
	n.start()
	waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	waitServes(t, host, "/", want)
	return n, ref
}

// appV1 is the common start: app.test proxied to an origin answering "v1".
func appV1(t *testing.T, cp *controlplane.Server) (*node, protocol.ConfigRef) {
	t.Helper()
	return servingNode(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1"))}}, "app.test", "origin-ok v1")
}
