package systemdtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/agent/testhook"
	"openflare/testing/controlplane"
	"openflare/testing/releaseserver"
	"openflare/testing/testsupport"
)

const (
	unit      = "openflare-agent.service"
	binPath   = "/usr/libexec/openflare-agent/openflare-agent"
	confPath  = "/etc/openflare/agent.json"
	dataDir   = "/var/lib/openflare"
	worker    = "openflare-www"
	dropInDir = "/etc/systemd/system/openflare-agent.service.d"
	// crashingVersion dies at its crash point right after counting its
	// start, at every start.
	crashingVersion = "1.2.0"
)

// agentVersions are the agent builds the test packages and serves as
// releases: the package installed first, the release self-update takes,
// the release that crashes at every start, the package upgraded to.
var agentVersions = []string{"1.0.0", "1.1.0", crashingVersion, "1.3.0"}

// buildAgents builds the agent once per version, as `make build` links it
// plus the crash points (-tags testhooks), into dir.
func buildAgents(t *testing.T, dir string) map[string]string {
	t.Helper()
	bins := map[string]string{}
	for _, v := range agentVersions {
		out := filepath.Join(dir, "openflare-agent-"+v)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+v,
			"-tags", "testhooks nethttpomithttp2", "-o", out, ".")
		cmd.Dir = testsupport.ModuleRoot(t)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build agent %s: %v\n%s", v, err, b)
		}
		bins[v] = out
	}
	return bins
}

// buildDeb packages bin as version with cross/deb.sh into dir, and
// returns the file name.
func buildDeb(t *testing.T, bin, arch, version, dir string) string {
	t.Helper()
	root := testsupport.ModuleRoot(t)
	cmd := exec.Command("sh", filepath.Join(root, "cross", "deb.sh"), bin, arch, version, dir)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1700000000")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cross/deb.sh: %v\n%s", err, out)
	}
	return filepath.Base(strings.TrimSpace(string(out)))
}

// client sends one request to 127.0.0.1:port with the given Host, on a
// connection of its own (a listener gap shows as an error).
func client(port, host, path string) (int, string, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", "127.0.0.1:"+port)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + host + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// traffic is a client sending a request every 10 ms until stopped, to
// show that nginx answered throughout.
type traffic struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	ok   int
	bad  []string
}

func startTraffic(host, want string) *traffic {
	tr := &traffic{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		for {
			select {
			case <-tr.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			code, body, err := client("80", host, "/")
			tr.mu.Lock()
			if err == nil && code == 200 && strings.Contains(body, want) {
				tr.ok++
			} else if len(tr.bad) < 5 {
				tr.bad = append(tr.bad, fmt.Sprintf("%d %q %v", code, body, err))
			} else {
				tr.bad = append(tr.bad[:5], "...")
			}
			tr.mu.Unlock()
		}
	}()
	return tr
}

// check stops the traffic and fails t unless every request succeeded.
func (tr *traffic) check(t *testing.T) {
	t.Helper()
	close(tr.stop)
	<-tr.done
	if len(tr.bad) > 0 || tr.ok == 0 {
		t.Errorf("nginx did not answer throughout: %d requests served, failures: %v", tr.ok, tr.bad)
		return
	}
	t.Logf("%d requests served, none failed", tr.ok)
}

// step runs a subtest and stops the test when it fails: each step starts
// from what the one before left.
func step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}

// The amd64 (or this machine's) package on a real systemd, end to end: apt
// install beside a running distribution nginx, join, serving through nginx
// with the workers as the pinned user, the unit's sandbox, kill -9 and a
// usage error, self-update and its rollback with systemd as the
// supervisor, a package upgrade with no failed request, remove and purge.
func TestDebianPackageUnderSystemd(t *testing.T) {
	needContainer(t)
	arch, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		t.Fatalf("dpkg --print-architecture: %v", err)
	}
	out := t.TempDir()
	bins := buildAgents(t, t.TempDir())
	debFirst := buildDeb(t, bins["1.0.0"], strings.TrimSpace(string(arch)), "1.0.0", out)
	debUpgrade := buildDeb(t, bins["1.3.0"], strings.TrimSpace(string(arch)), "1.3.0", out)
	release := func(v string) releaseserver.Release {
		b, err := os.ReadFile(bins[v])
		if err != nil {
			t.Fatal(err)
		}
		return releaseserver.Release{Tag: "v" + v, Binary: b}
	}
	sameBinary := func(c *container, v string) bool {
		want, _ := os.ReadFile(bins[v])
		got, _ := os.ReadFile(c.path(binPath))
		return bytes.Equal(got, want)
	}
	writeProbe(t, out)

	cp := controlplane.New()
	if err := cp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	cp.UpdateSettings("", func(s *protocol.AgentSettings) {
		s.HeartbeatInterval = 300
		s.WebsocketUpgradeEnabled = false
	})
	rs := releaseserver.Start("openflare/openflare-agent")
	t.Cleanup(rs.Close)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "origin-ok %s", r.URL.Path)
	}))
	t.Cleanup(origin.Close)
	ref, err := cp.Publish(controlplane.Source{Routes: []controlplane.Route{
		{ID: 1, SiteName: "app", Domains: []string{"app.test"}, OriginURL: origin.URL},
	}}.JSON(), nil)
	if err != nil {
		t.Fatal(err)
	}

	c := bootContainer(t, out)
	t.Cleanup(func() { c.dumpOnFailure(t) })
	ctx := func(d time.Duration) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return ctx
	}
	waitBeat := func(t *testing.T, after time.Time, version, failed string) controlplane.Beat {
		t.Helper()
		b, err := cp.WaitHeartbeat(ctx(60*time.Second), func(b controlplane.Beat) bool {
			return !b.At.Before(after) && b.Payload.Version == version && (failed == "" ||
				slices.ContainsFunc(b.Payload.HealthEvents, func(e protocol.HealthEvent) bool {
					return e.EventType == "agent_update_failed" && e.Metadata["version"] == failed
				}))
		})
		if err != nil {
			t.Fatalf("no heartbeat from %s (failed update %q) since %s: %v", version, failed, after.Format(time.StampMilli), err)
		}
		return b
	}
	mainPID := func() string { return c.show(unit, "MainPID") }
	nginxMaster := func() string { return strings.TrimSpace(c.readFile(dataDir + "/var/run/nginx.pid")) }
	restarts := func() int {
		n, _ := strconv.Atoi(c.show(unit, "NRestarts"))
		return n
	}
	dropIn := func(name, content string) {
		c.writeFile(dropInDir+"/"+name, content, 0o644)
		c.run("systemctl", "daemon-reload")
	}
	removeDropIn := func(name string) {
		os.Remove(c.path(dropInDir + "/" + name))
		c.run("systemctl", "daemon-reload")
	}
	var nodeID string

	step(t, "apt install leaves the distribution nginx alone", func(t *testing.T) {
		distro := c.show("nginx.service", "MainPID")
		installed := c.run("apt-get", "install", "-y", "-q", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=120", "/out/"+debFirst)
		if !strings.Contains(installed, "openflare-agent join https://") {
			t.Errorf("apt install does not say how to join:\n%s", installed)
		}
		if state := c.show(unit, "UnitFileState") + " " + c.show(unit, "ActiveState"); state != "enabled inactive" {
			t.Errorf("before join the unit is %q, want enabled and not started", state)
		}
		if distro != "0" {
			if !strings.Contains(installed, "nginx.service is enabled or running") {
				t.Errorf("apt install does not point out the distribution's nginx.service:\n%s", installed)
			}
			if now := c.show("nginx.service", "MainPID"); now != distro {
				t.Errorf("the distribution's nginx changed: master %s, was %s", now, distro)
			}
			if code, _, err := client("80", "localhost", "/"); code != 200 {
				t.Errorf("the distribution's nginx stopped serving: %d %v", code, err)
			}
			// What the README has the operator do: the agent's nginx
			// needs the ports.
			c.run("systemctl", "disable", "--now", "nginx.service")
		}
		checkFile(t, c, "/etc/openflare", 0o750|fs.ModeDir)
		checkFile(t, c, dataDir, 0o751|fs.ModeDir)
		checkFile(t, c, confPath, 0o600)
		var conf map[string]any
		if err := json.Unmarshal([]byte(c.readFile(confPath)), &conf); err != nil {
			t.Fatalf("agent.json: %v", err)
		}
		if conf["nginx_user"] != worker+":"+worker || conf["data_dir"] != dataDir || conf["openresty_path"] != "/usr/sbin/nginx" {
			t.Errorf("agent.json as the package wrote it: %v", conf)
		}
		if pw := c.sh("getent passwd " + worker); !strings.HasSuffix(pw, ":/nonexistent:/usr/sbin/nologin") {
			t.Errorf("workers' user: %q, want a system user without home or shell", pw)
		}
	})

	step(t, "join starts the agent", func(t *testing.T) {
		// Test settings: no GeoIP downloads from the internet, releases
		// from the test's server, quick beats.
		var conf map[string]any
		json.Unmarshal([]byte(c.readFile(confPath)), &conf)
		for k, v := range map[string]any{"mmdb_download_url": "off", "city_mmdb_download_url": "off",
			"update_api_url": rs.URL(), "update_confirm_timeout": "60s", "heartbeat_interval": 300, "node_ip": "198.51.100.40"} {
			conf[k] = v
		}
		b, _ := json.MarshalIndent(conf, "", "  ")
		c.writeFile(confPath, string(b)+"\n", 0o600)
		// Inherited across self-update's re-exec; only the crashing
		// release has this crash point.
		dropIn("test.conf", "[Service]\nEnvironment=LOG_LEVEL=debug "+testhook.CrashEnv+"=start-"+crashingVersion+"\n")

		// The token through the environment, out of the process list.
		joined, err := c.exec([]string{"OPENFLARE_DISCOVERY_TOKEN=" + cp.DiscoveryToken()}, "openflare-agent", "join", cp.URL())
		if err != nil || !strings.Contains(joined, "restarted the openflare-agent service") {
			t.Fatalf("join: %v\n%s", err, joined)
		}
		if strings.Contains(joined, cp.DiscoveryToken()) {
			t.Errorf("join printed the token:\n%s", joined)
		}
		if state := c.show(unit, "ActiveState"); state != "active" {
			t.Fatalf("after join the unit is %s", state)
		}
		nodeID = waitBeat(t, time.Time{}, "1.0.0", "").NodeID
	})

	step(t, "serves through nginx with the pinned workers", func(t *testing.T) {
		if _, err := cp.WaitApplyLog(ctx(60*time.Second), func(r protocol.ApplyLogRecord) bool {
			return r.Version == ref.Version && r.Result == protocol.ResultSuccess
		}); err != nil {
			t.Fatalf("no successful apply of %s: %v", ref.Version, err)
		}
		if code, body, err := client("80", "app.test", "/hello"); code != 200 || body != "origin-ok /hello" {
			t.Fatalf("http://app.test/hello on port 80: %d %q %v", code, body, err)
		}
		status := c.sh("systemctl status --no-pager --lines=0 " + unit)
		for _, want := range []string{"Loaded: loaded (/lib/systemd/system/openflare-agent.service; enabled", "Active: active (running)"} {
			if !strings.Contains(status, want) {
				t.Errorf("systemctl status lacks %q:\n%s", want, status)
			}
		}
		journal := c.run("journalctl", "--no-pager", "-o", "cat", "-u", unit)
		for _, want := range []string{`msg="openflare-agent starting" version=1.0.0`, `msg="registered with the discovery token"`, `msg="nginx worker identity" workers="openflare-www:openflare-www`} {
			if !strings.Contains(journal, want) {
				t.Errorf("journalctl -u %s lacks %s", unit, want)
			}
		}
		uid := c.sh("id -u " + worker)
		owners := c.sh(`m=` + nginxMaster() + `; for s in /proc/[0-9]*/status; do awk -v m="$m" '/^PPid:/ { p = $2 } /^Uid:/ { u = $2 } END { if (p == m) print u }' "$s" 2>/dev/null; done | sort | uniq -c`)
		if fields := strings.Fields(owners); len(fields) != 2 || fields[1] != uid {
			t.Errorf("nginx workers' uids (count uid): %q, want all %s (%s)", owners, uid, worker)
		}
		var conf map[string]any
		json.Unmarshal([]byte(c.readFile(confPath)), &conf)
		if tok, _ := conf["agent_token"].(string); tok == "" || conf["discovery_token"] != "" {
			t.Errorf("after registering agent.json holds agent_token %v, discovery_token %q", tok != "", conf["discovery_token"])
		}
	})

	step(t, "the sandbox holds", func(t *testing.T) {
		unitCaps := capMask(t, c.readFile("/lib/systemd/system/"+unit))
		for _, pid := range []string{mainPID(), nginxMaster()} {
			st := c.run("cat", "/proc/"+pid+"/status")
			for _, want := range []string{"CapEff:\t" + unitCaps, "CapBnd:\t" + unitCaps, "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
				if !strings.Contains(st, want+"\n") {
					t.Errorf("process %s (%s): /proc status lacks %q", pid, strings.TrimSpace(c.run("cat", "/proc/"+pid+"/comm")), want)
				}
			}
		}
		c.writeFile("/home/systemdtest-secret", "x\n", 0o644)
		c.sh("echo x > /tmp/systemdtest-secret")
		defer os.Remove(c.path("/home/systemdtest-secret"))
		// The probe runs as ExecStartPost=: the unit's sandbox, the
		// agent's capabilities; it reports to the journal.
		dropIn("probe.conf", "[Service]\nExecStartPost=/bin/sh /out/sandbox-probe\n")
		defer removeDropIn("probe.conf")
		since := c.sh("date +%s.%N")
		tr := startTraffic("app.test", "origin-ok")
		c.run("systemctl", "restart", unit)
		var report string
		testsupport.WaitFor(t, 30*time.Second, "the sandbox probe's report", func() bool {
			report = c.run("journalctl", "--no-pager", "-o", "cat", "-u", unit, "--since", "@"+since)
			return strings.Contains(report, "sandbox-probe: done")
		})
		tr.check(t)
		want := []string{
			"write " + dataDir + ": allowed", "write /etc/openflare: allowed", "write /usr/libexec/openflare-agent: allowed",
			"write /usr/libexec: refused", "write /usr/sbin: refused", "write /usr/bin: refused", "write /usr/lib: refused",
			"write /etc: refused", "write /etc/systemd/system: refused", "write /var/lib: refused", "write /var/log: refused",
			"write /opt: refused", "write /srv: refused", "write /: refused",
			"/home: hidden", "/root: hidden", "/tmp: private",
			"CapEff: " + unitCaps, "CapBnd: " + unitCaps, "NoNewPrivs: 1",
		}
		for _, w := range want {
			if !strings.Contains(report, "sandbox-probe: "+w+"\n") {
				t.Errorf("sandbox probe: want %q in its report", w)
			}
		}
		if t.Failed() {
			t.Logf("report:\n%s", report)
		}
	})

	step(t, "kill -9 restarts the agent, nginx serves throughout", func(t *testing.T) {
		c.run("systemctl", "reset-failed", unit)
		master, pid, n := nginxMaster(), mainPID(), restarts()
		tr := startTraffic("app.test", "origin-ok")
		c.run("kill", "-KILL", pid)
		testsupport.WaitFor(t, 30*time.Second, "systemd to restart the agent", func() bool {
			p := mainPID()
			return p != pid && p != "0" && c.show(unit, "ActiveState") == "active"
		})
		// From the new agent: the old one is gone.
		waitBeat(t, time.Now(), "1.0.0", "")
		tr.check(t)
		if got := restarts(); got != n+1 {
			t.Errorf("NRestarts %d, want %d", got, n+1)
		}
		if now := nginxMaster(); now != master {
			t.Errorf("nginx master %s, was %s: the new agent did not adopt it", now, master)
		}
	})

	step(t, "a usage error is not restarted", func(t *testing.T) {
		c.run("systemctl", "reset-failed", unit)
		dropIn("usage.conf", "[Service]\nExecStart=\nExecStart="+binPath+" -config "+confPath+" -no-such-flag\n")
		c.exec(nil, "systemctl", "restart", unit)
		// failed is where a unit rests: one to be restarted would be
		// activating (auto-restart) instead.
		testsupport.WaitFor(t, 30*time.Second, "the unit to fail", func() bool { return c.show(unit, "ActiveState") == "failed" })
		if got := c.show(unit, "ExecMainStatus") + " " + c.show(unit, "Result") + " " + c.show(unit, "NRestarts"); got != "64 exit-code 0" {
			t.Errorf("exit status, result, restarts: %q, want 64 exit-code 0", got)
		}
		if code, _, err := client("80", "app.test", "/"); code != 200 {
			t.Errorf("nginx stopped serving with the agent: %d %v", code, err)
		}
		removeDropIn("usage.conf")
		c.run("systemctl", "reset-failed", unit)
		at := time.Now()
		c.run("systemctl", "start", unit)
		waitBeat(t, at, "1.0.0", "")
	})

	step(t, "self-update swaps in 1.1.0", func(t *testing.T) {
		pid := mainPID()
		rs.Set(release("1.1.0"))
		at := time.Now()
		cp.UpdateSettings(nodeID, func(s *protocol.AgentSettings) { s.UpdateNow = true })
		waitBeat(t, at, "1.1.0", "")
		if !sameBinary(c, "1.1.0") {
			t.Error("the 1.1.0 binary is not in " + binPath)
		}
		if now := mainPID(); now != pid {
			t.Errorf("main pid %s, was %s: the update did not re-execute in place", now, pid)
		}
		testsupport.WaitFor(t, 30*time.Second, "the confirmation to remove the backup", func() bool {
			_, err := os.Stat(c.path(binPath + ".bak"))
			return err != nil
		})
	})

	step(t, "a release that crashes at start is rolled back at its third start", func(t *testing.T) {
		c.run("systemctl", "reset-failed", unit)
		n := restarts()
		rs.Set(release(crashingVersion))
		at := time.Now()
		cp.UpdateSettings(nodeID, func(s *protocol.AgentSettings) { s.UpdateNow = true })
		// systemd restarts the dead agent (Restart=always); the third
		// start of the new binary puts 1.1.0 back.
		waitBeat(t, at, "1.1.0", "v"+crashingVersion)
		if got := restarts(); got != n+2 {
			t.Errorf("NRestarts %d, want %d: two crashed starts", got, n+2)
		}
		if !sameBinary(c, "1.1.0") {
			t.Error("1.1.0 is not back in " + binPath)
		}
		if journal := c.run("journalctl", "--no-pager", "-o", "cat", "-u", unit, "--since", "@"+strconv.FormatInt(at.Unix()-1, 10)); !strings.Contains(journal, "crashed on start 2 times") {
			t.Errorf("the journal does not tell the rollback")
		}
		if state := c.show(unit, "ActiveState"); state != "active" {
			t.Errorf("unit %s after the rollback", state)
		}
	})

	step(t, "a package upgrade keeps the sites serving", func(t *testing.T) {
		c.run("systemctl", "reset-failed", unit)
		master, conf := nginxMaster(), c.readFile(confPath)
		tr := startTraffic("app.test", "origin-ok")
		at := time.Now()
		c.run("dpkg", "-i", "/out/"+debUpgrade)
		waitBeat(t, at, "1.3.0", "")
		tr.check(t)
		if now := nginxMaster(); now != master {
			t.Errorf("nginx master %s, was %s: the upgraded agent did not adopt it", now, master)
		}
		if c.readFile(confPath) != conf {
			t.Errorf("the upgrade changed agent.json")
		}
		if !sameBinary(c, "1.3.0") {
			t.Error("the 1.3.0 binary is not in " + binPath)
		}
	})

	var foreign string
	step(t, "apt remove stops the agent and its nginx, no other", func(t *testing.T) {
		c.writeFile("/etc/systemdtest-foreign-nginx.conf", "pid /run/systemdtest-foreign-nginx.pid;\nerror_log stderr;\nevents {}\nhttp {\n  access_log off;\n  server {\n    listen 127.0.0.1:8088;\n    return 200 \"foreign\\n\";\n  }\n}\n", 0o644)
		c.run("systemd-run", "--unit=systemdtest-foreign-nginx", "nginx", "-c", "/etc/systemdtest-foreign-nginx.conf", "-g", "daemon off;")
		testsupport.WaitFor(t, 30*time.Second, "the other nginx to serve", func() bool {
			_, body, _ := client("8088", "other.test", "/")
			return body == "foreign\n"
		})
		foreign = c.show("systemdtest-foreign-nginx.service", "MainPID")
		master := nginxMaster()
		removed := c.run("apt-get", "remove", "-y", "-q", "-o", "DPkg::Lock::Timeout=120", "openflare-agent")
		if !strings.Contains(removed, "stopping the nginx the agent ran") {
			t.Errorf("apt remove output:\n%s", removed)
		}
		if state := c.show(unit, "ActiveState"); state != "inactive" {
			t.Errorf("the unit is %s after remove", state)
		}
		if _, err := c.exec(nil, "test", "-d", "/proc/"+master); err == nil {
			t.Errorf("the agent's nginx (master %s) still runs", master)
		}
		if _, _, err := client("80", "app.test", "/"); err == nil {
			t.Errorf("port 80 still answers")
		}
		if _, body, _ := client("8088", "other.test", "/"); body != "foreign\n" || c.show("systemdtest-foreign-nginx.service", "MainPID") != foreign {
			t.Errorf("the other nginx was touched: %q", body)
		}
		if st := c.sh("dpkg-query -W -f='${Status}' openflare-agent"); st != "deinstall ok config-files" {
			t.Errorf("package status %q", st)
		}
		for _, p := range []string{confPath, dataDir + "/var/lib/openflare/agent-state.json"} {
			if _, err := os.Stat(c.path(p)); err != nil {
				t.Errorf("remove deleted %s: config and data stay until purge", p)
			}
		}
		if _, err := os.Stat(c.path(filepath.Dir(binPath))); err == nil {
			t.Errorf("%s is left after remove", filepath.Dir(binPath))
		}
	})

	step(t, "apt purge leaves nothing of ours", func(t *testing.T) {
		// The test's own drop-ins first.
		os.RemoveAll(c.path(dropInDir))
		c.run("apt-get", "purge", "-y", "-q", "-o", "DPkg::Lock::Timeout=120", "openflare-agent")
		c.run("systemctl", "daemon-reload")
		if st, _ := c.exec(nil, "dpkg-query", "-W", "-f=${Status}", "openflare-agent"); strings.Contains(st, "installed") || strings.Contains(st, "config-files") {
			t.Errorf("package status after purge: %q", st)
		}
		for _, f := range []string{"/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"} {
			if strings.Contains(c.readFile(f), worker+":") {
				t.Errorf("%s still has %s", f, worker)
			}
		}
		if left := leftovers(t, c.upper); len(left) > 0 {
			t.Errorf("purge left: %v", left)
		}
		if procs := c.sh(`for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q '[o]penflare' && echo "${p#/proc/}: $(tr '\0' ' ' < $p/cmdline)"; done; true`); procs != "" {
			t.Errorf("processes left: %s", procs)
		}
		if c.show("systemdtest-foreign-nginx.service", "MainPID") != foreign {
			t.Errorf("the other nginx did not survive the purge")
		}
		c.run("systemctl", "stop", "systemdtest-foreign-nginx.service")
		os.Remove(c.path("/etc/systemdtest-foreign-nginx.conf"))
	})
}

// capNumbers are the capabilities the unit may name, by number
// (linux/capability.h).
var capNumbers = map[string]uint{
	"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3, "CAP_FSETID": 4,
	"CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8, "CAP_NET_BIND_SERVICE": 10,
	"CAP_NET_RAW": 13, "CAP_NET_ADMIN": 12, "CAP_SYS_CHROOT": 18, "CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21,
	"CAP_SYS_NICE": 23, "CAP_SYS_RESOURCE": 24,
}

// capMask is the unit's CapabilityBoundingSet= as /proc/<pid>/status
// prints a capability set.
func capMask(t *testing.T, unitText string) string {
	t.Helper()
	var mask uint64
	found := false
	for _, line := range strings.Split(unitText, "\n") {
		v, ok := strings.CutPrefix(line, "CapabilityBoundingSet=")
		if !ok {
			continue
		}
		found = true
		for _, name := range strings.Fields(v) {
			n, ok := capNumbers[name]
			if !ok {
				t.Fatalf("the unit names %s, which this test does not know", name)
			}
			mask |= 1 << n
		}
	}
	if !found || mask == 0 {
		t.Fatal("the unit has no CapabilityBoundingSet=")
	}
	return fmt.Sprintf("%016x", mask)
}

// checkFile fails t unless the container's file p is root's with mode.
func checkFile(t *testing.T, c *container, p string, mode fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(c.path(p))
	if err != nil {
		t.Error(err)
		return
	}
	if fi.Mode() != mode {
		t.Errorf("%s: mode %v, want %v", p, fi.Mode(), mode)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 || st.Gid != 0 {
		t.Errorf("%s is not root's", p)
	}
}

// leftovers lists what the container changed (the overlay's upper layer)
// whose path names openflare, leaving out logs (dpkg's, apt's and the
// journal mention the package, which is what logs are for).
func leftovers(t *testing.T, upper string) []string {
	t.Helper()
	var left []string
	filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == upper {
			return nil
		}
		rel := "/" + strings.TrimPrefix(p, upper+"/")
		if rel == "/var/log" {
			return filepath.SkipDir
		}
		// A whiteout (a 0/0 character device) records a deletion of a
		// file this machine has.
		if fi, err := d.Info(); err == nil && fi.Mode()&fs.ModeCharDevice != 0 {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Rdev == 0 {
				return nil
			}
		}
		if strings.Contains(rel, "openflare") {
			left = append(left, rel)
		}
		return nil
	})
	return left
}

// writeProbe writes the sandbox probe: run by the unit (ExecStartPost=,
// the unit's sandbox and capabilities), it tries to write where the unit
// allows and where it does not, looks for what it must not see, and
// prints its capabilities.
func writeProbe(t *testing.T, dir string) {
	t.Helper()
	probe := `#!/bin/sh
say() { echo "sandbox-probe: $*"; }
for d in ` + dataDir + ` /etc/openflare /usr/libexec/openflare-agent /usr/libexec /usr/sbin /usr/bin /usr/lib /etc /etc/systemd/system /var/lib /var/log /opt /srv /; do
	f=$d/.systemdtest-probe
	if (: >"$f") 2>/dev/null; then rm -f "$f"; say "write $d: allowed"; else say "write $d: refused"; fi
done
if [ -e /home/systemdtest-secret ]; then say "/home: visible"; else say "/home: hidden"; fi
if ls -A /root 2>/dev/null | grep -q .; then say "/root: visible"; else say "/root: hidden"; fi
if [ -e /tmp/systemdtest-secret ]; then say "/tmp: shared"; else say "/tmp: private"; fi
while read -r k v; do
	case $k in CapEff: | CapBnd: | NoNewPrivs:) say "$k $v" ;; esac
done </proc/self/status
say done
`
	if err := os.WriteFile(filepath.Join(dir, "sandbox-probe"), []byte(probe), 0o755); err != nil {
		t.Fatal(err)
	}
}
