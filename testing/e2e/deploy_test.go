package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"openflare/agent/nginx"
	"openflare/agent/protocol"
	"openflare/testing/controlplane"
	"openflare/testing/nstest"
	"openflare/testing/testsupport"
)

// These tests are about who the nginx workers are, so they need workers
// that really are another user: real root without a user namespace.
func needRealRoot(t *testing.T) {
	t.Helper()
	if !nstest.RealRoot() {
		t.Skip("needs real root without a user namespace (CI runs so); as non-root every process is one uid and file modes cannot fail")
	}
}

// procIDs reads the real uid and the effective capabilities of a process.
func procIDs(t *testing.T, pid int) (uid int, capEff string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 2 && f[0] == "Uid:":
			uid, _ = strconv.Atoi(f[1])
		case len(f) >= 2 && f[0] == "CapEff:":
			capEff = f[1]
		}
	}
	return uid, capEff
}

// bigOrigin serves size bytes of a repeating pattern.
func bigOrigin(t *testing.T, size int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
		for left := size; left > 0; left -= len(chunk) {
			w.Write(chunk[:min(left, len(chunk))])
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// download fetches http://host/ through nginx and returns the bytes.
func download(t *testing.T, host string) (int, []byte) {
	t.Helper()
	c := &http.Client{Timeout: 60 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("download from %s: %v after %d bytes", host, err, len(b))
	}
	return resp.StatusCode, b
}

// The VPS: root, no `openflare` user, data_dir made by mktemp -d
// (0700) and umask 077. The stock template's `user openflare;` cannot be
// honoured, yet the site must serve and temp files must work.
func TestRootWithStockTemplateServes(t *testing.T) {
	needRealRoot(t)
	if _, err := os.Stat("/etc/passwd"); err == nil && strings.Contains(testsupport.ReadFile(t, "/etc/passwd"), "\nopenflare:") {
		t.Skip("this host has an openflare user; the test is about a host without one")
	}
	cp := controlPlane(t)
	const size = 5_000_000
	big := proxyRoute(2, "big.test", bigOrigin(t, size))
	big.LimitRate = "4m" // slower than the origin: nginx buffers to proxy_temp
	ref := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1")), big}})

	dir := nstest.TraversableTempDir(t)
	dataDir, err := os.MkdirTemp(dir, "data-") // mode 0700, like mktemp -d
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t, cp, map[string]any{"data_dir": dataDir})
	n.wrap = []string{"sh", "-c", `umask 077; exec "$0" "$@"`}
	n.start()
	waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	waitServes(t, "app.test", "/", "origin-ok v1")

	status, body := download(t, "big.test")
	if status != 200 || len(body) != size || !bytes.Equal(body[size-16:], []byte("0123456789abcdef")) {
		t.Fatalf("5 MB download through a rate-limited route: status %d, %d bytes\nerror log:\n%s", status, len(body), readFileOr(n.data("var", "log", "openflare", "error.log")))
	}
	master := n.nginxPID()
	workers := workerPIDs(master)
	if len(workers) == 0 {
		t.Fatal("no nginx workers")
	}
	for _, w := range workers {
		if uid, _ := procIDs(t, w); uid == 0 {
			t.Fatalf("nginx worker %d runs as root", w)
		}
	}
	if uid, _ := procIDs(t, master); uid != 0 {
		t.Fatalf("nginx master runs as uid %d, want root", uid)
	}
	// The worker user is the system fallback (www-data on Debian), named
	// with its group, whatever the host calls them.
	st := n.state()
	who, _, _ := strings.Cut(st.Workers, " ")
	main := testsupport.ReadFile(t, n.data("etc", "nginx", "nginx.conf"))
	if !strings.Contains(st.Workers, "fallback") || !strings.Contains(main, "\nuser "+strings.Replace(who, ":", " ", 1)+";") {
		t.Fatalf("workers %q; main config:\n%.300s", st.Workers, main)
	}
	// Secrets stay the agent's: state and the raw source are 0600.
	for _, p := range []string{n.data("var", "lib", "openflare", "agent-state.json"), n.data("etc", "openflare", "openresty_config.json")} {
		if m := fileMode(t, p); m&0o077 != 0 {
			t.Errorf("%s is %v: readable by the workers", p, m)
		}
	}
	if st.SelfTestError != "" {
		t.Errorf("state: self-test %q", st.SelfTestError)
	}
	out, err := exec.Command(agentBinary(t), "-config", n.config, "status").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "nginx workers:") || !strings.Contains(string(out), "passed") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	out, err = exec.Command(agentBinary(t), "-config", n.config, "check").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "nginx workers: ") {
		t.Fatalf("check: %v\n%s", err, out)
	}
}

// An owner's nginx_user that does not exist: check says so, and the agent
// reports a failed apply instead of running workers as someone else.
func TestUnknownNginxUserFails(t *testing.T) {
	needRealRoot(t)
	cp := controlPlane(t)
	ref := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1"))}})
	n := newNode(t, cp, map[string]any{"nginx_user": "ghost-user"})

	out, err := exec.Command(agentBinary(t), "-config", n.config, "check").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `nginx_user "ghost-user": no such user`) {
		t.Fatalf("check with an unknown nginx_user: %v\n%s", err, out)
	}
	n.start()
	rec := waitApplyLog(t, cp, ref.Version, protocol.ResultFailed)
	if !strings.Contains(rec.Message, "ghost-user") {
		t.Fatalf("apply log does not name the user: %q", rec.Message)
	}
	// Nothing valid ran before, so the safe fallback holds port 80 (its
	// workers are the system fallback user: it reads none of the tree).
	if main := readFileOr(n.data("etc", "nginx", "nginx.conf")); main != "" && !strings.Contains(main, "safe fallback runtime") {
		t.Fatalf("the version was landed for workers that cannot exist:\n%.300s", main)
	}
	if r := get("app.test", "/"); r.err == nil && r.status == 200 {
		t.Fatalf("the site serves: %d %q", r.status, r.body)
	}
	if st := n.state(); st.Blocked.Version != "" {
		t.Fatalf("a local problem blocklisted %s", st.Blocked.Version)
	}
}

// The data plane breaks under the agent (the Lua scripts become unreadable
// to the workers after landing): the next apply's self-test fails, the
// previous config is restored, and the apply log says failed, quoting the
// permission error. Nothing is blocklisted; once the owner fixes the files
// and restarts the agent, the version applies.
func TestSelfTestFailureRestoresPrevious(t *testing.T) {
	needRealRoot(t)
	cp := controlPlane(t)
	n, v1 := appV1(t, cp)
	// A file chmod 000 would be rewritten by the next apply (its mode
	// differs); the directory holding the WAF scripts is not.
	waf := n.data("etc", "nginx", "lua", "waf")
	if err := os.Chmod(waf, 0); err != nil {
		t.Fatal(err)
	}
	v2 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v2"))}})
	rec := waitApplyLog(t, cp, v2.Version, protocol.ResultFailed)
	t.Logf("apply log: %s", rec.Message)
	for _, want := range []string{"data-plane self-test failed", "Permission denied", waf, "not blocklisted"} {
		if !strings.Contains(rec.Message, want) {
			t.Errorf("apply log lacks %q:\n%s", want, rec.Message)
		}
	}
	st := n.state()
	if st.Current.Version != v1.Version || st.Blocked.Version != "" || st.SelfTestError == "" {
		t.Fatalf("state after the failed self-test: current %q blocked %q self-test %q", st.Current.Version, st.Blocked.Version, st.SelfTestError)
	}
	if route := testsupport.ReadFile(t, n.data("etc", "nginx", "conf.d", "openflare_routes.conf")); strings.Contains(route, "v2") {
		t.Fatal("v2's route config was left in place")
	}
	testsupport.WaitFor(t, 30*time.Second, "an unhealthy beat naming the self-test", func() bool {
		for _, nd := range cp.Nodes() {
			if nd.OpenRestyStatus == protocol.StatusUnhealthy && strings.Contains(nd.OpenRestyMessage, "Permission denied") {
				return true
			}
		}
		return false
	})

	if err := os.Chmod(waf, 0o755); err != nil {
		t.Fatal(err)
	}
	n.stop()
	n.start()
	waitApplyLog(t, cp, v2.Version, protocol.ResultSuccess)
	waitServes(t, "app.test", "/", "origin-ok v2")
	if st := n.state(); st.SelfTestError != "" {
		t.Fatalf("self-test error kept after a passing self-test: %q", st.SelfTestError)
	}
}

// A data dir made by an older release (0750 dirs, as the agent used to
// create them) is repaired at start, not left dark.
func TestOldDataDirRepairedOnStart(t *testing.T) {
	needRealRoot(t)
	cp := controlPlane(t)
	n, _ := appV1(t, cp)
	n.stop()
	for _, d := range []string{n.data(), n.data("var"), n.data("var", "lib"), n.data("etc", "nginx", "lua"), n.data("etc", "nginx", "lua", "waf")} {
		if err := os.Chmod(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	n.stopNginx()
	n.start()
	n.waitLog("nginx runs the last landed config", 30*time.Second)
	waitServes(t, "app.test", "/", "origin-ok v1")
	if st := n.state(); st.SelfTestError != "" {
		t.Fatalf("self-test after repair: %q", st.SelfTestError)
	}
}

// The agent as a service user with CAP_NET_BIND_SERVICE only, as owners
// who will not run it as root do (the shipped unit runs it as root, workers
// as nginx_user): nginx serves port 80, and the agent's credentials open
// nothing of root's.
func TestServiceUserServes(t *testing.T) {
	needRealRoot(t)
	cp := controlPlane(t)
	ref := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1"))}})
	n := serviceUserNode(t, cp, nil)
	secret := filepath.Join(filepath.Dir(n.dataDir), "root-only")
	if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	setpriv := n.wrap
	n.start()
	waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	waitServes(t, "app.test", "/", "origin-ok v1")

	agentUID, agentCaps := procIDs(t, n.cmd.Process.Pid)
	if agentUID != serviceUID || agentCaps != "0000000000000400" {
		t.Fatalf("agent runs as uid %d with CapEff %s; want %d with cap_net_bind_service only", agentUID, agentCaps, serviceUID)
	}
	master := n.nginxPID()
	for _, pid := range append([]int{master}, nginx.WorkerPIDs(master)...) {
		if u, _ := procIDs(t, pid); u != serviceUID {
			t.Fatalf("nginx process %d runs as uid %d, want %d", pid, u, serviceUID)
		}
	}
	if !strings.Contains(testsupport.ReadFile(t, n.data("etc", "nginx", "nginx.conf")), "# user directive dropped by openflare-agent: not running as root") {
		t.Fatal("user directive kept for an unprivileged master")
	}
	out, err := exec.Command(setpriv[0], append(setpriv[1:], "cat", secret)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("the agent's credentials read a root-only file: %v %q", err, out)
	}
}

// serviceUID is the service user of the service-user tests: nobody, which
// every Linux has.
const serviceUID = 65534

// serviceUserNode is a node whose agent runs as serviceUID with
// CAP_NET_BIND_SERVICE only, owning its data dir and agent.json (conf as
// newNode's).
func serviceUserNode(t *testing.T, cp *controlplane.Server, conf map[string]any) *node {
	t.Helper()
	dataDir := filepath.Join(nstest.TraversableTempDir(t), "svc-data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	c := map[string]any{"data_dir": dataDir}
	for k, v := range conf {
		c[k] = v
	}
	n := newNode(t, cp, c)
	for _, p := range []string{dataDir, n.config} {
		if err := os.Chown(p, serviceUID, serviceUID); err != nil {
			t.Fatal(err)
		}
	}
	n.wrap = []string{"setpriv", "--reuid=" + strconv.Itoa(serviceUID), "--regid=" + strconv.Itoa(serviceUID), "--clear-groups",
		"--inh-caps=+net_bind_service", "--ambient-caps=+net_bind_service"}
	return n
}
