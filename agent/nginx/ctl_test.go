package nginx

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"openflare/agent/selftest"
	"openflare/testing/nginxtest"
	"openflare/testing/nstest"
	"openflare/testing/testsupport"
)

func TestMain(m *testing.M) { nstest.Main(m) }

func newCtl(t *testing.T) (*Ctl, string) {
	t.Helper()
	caps, err := ReadCaps(context.Background(), nginxtest.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n := &Ctl{
		Caps:       caps,
		MainConfig: filepath.Join(dir, "nginx.conf"),
		PIDFile:    filepath.Join(dir, "nginx.pid"),
		ErrorLog:   filepath.Join(dir, "error.log"),
		Log:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	t.Cleanup(func() {
		if pid := n.MasterPID(); pid != 0 {
			syscall.Kill(pid, syscall.SIGTERM)
		}
	})
	return n, dir
}

func conf(dir, body string) string {
	return fmt.Sprintf(`user root root;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %[1]s/t1; proxy_temp_path %[1]s/t2; fastcgi_temp_path %[1]s/t3; uwsgi_temp_path %[1]s/t4; scgi_temp_path %[1]s/t5;
    server { listen 80; location / { return 200 "%[2]s"; } }
}
`, dir, body)
}

func get(t *testing.T) string {
	t.Helper()
	// A fresh connection each time: a kept-alive one would still reach a
	// worker of the previous configuration.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://127.0.0.1/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Start, reload with confirmation, and a reload nginx rejects: the old
// config keeps serving and the error carries nginx's own message.
func TestStartReloadAndRejectedReload(t *testing.T) {
	n, dir := newCtl(t)
	ctx := context.Background()
	os.WriteFile(n.MainConfig, []byte(conf(dir, "one")), 0o644)
	if err := n.Test(ctx, n.MainConfig); err != nil {
		t.Fatal(err)
	}
	if n.Running() {
		t.Fatal("running before start")
	}
	if err := n.Activate(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(t); got != "one" {
		t.Fatalf("got %q", got)
	}
	os.WriteFile(n.MainConfig, []byte(conf(dir, "two")), 0o644)
	if err := n.Activate(ctx); err != nil {
		t.Fatal(err)
	}
	// The reload is confirmed once a new worker runs; the old ones stop
	// accepting as they take the master's signal, a few milliseconds on.
	testsupport.WaitFor(t, 5*time.Second, "the new config to serve", func() bool { return get(t) == "two" })
	// A config that passes -t but cannot be loaded at reload time (the port
	// is taken by someone else) must be reported, not assumed to work.
	bad := strings.Replace(conf(dir, "three"), "listen 80;", "listen 127.0.0.1:8099;", 1)
	ln, err := net.Listen("tcp", "127.0.0.1:8099")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.WriteFile(n.MainConfig, []byte(bad), 0o644)
	if err := n.Test(ctx, n.MainConfig); err != nil {
		t.Fatalf("-t should pass: %v", err)
	}
	err = n.Activate(ctx)
	if err == nil || !strings.Contains(err.Error(), "reload rejected by nginx") || !strings.Contains(err.Error(), "8099") {
		t.Fatalf("rejected reload not detected: %v", err)
	}
	if got := get(t); got != "two" {
		t.Fatalf("old config no longer serves: %q", got)
	}
}

// A new worker keeps its master's title until its init is done, and the
// master waits in sigsuspend again 100 ms after forking it: a worker whose
// init_worker_by_lua takes longer (a big IP group to load, a busy machine)
// is still the reload's new generation, not a rejection.
func TestReloadWithSlowWorkerInit(t *testing.T) {
	n, dir := newCtl(t)
	ctx := context.Background()
	modules := nginxtest.LoadModules(t, nginxtest.Binary(t))
	slow := func(body string) string {
		c := strings.Replace(conf(dir, body), "access_log off;", `access_log off;
    init_worker_by_lua_block { local t = os.time() + 1 while os.time() <= t do end }`, 1)
		return modules + c
	}
	os.WriteFile(n.MainConfig, []byte(slow("one")), 0o644)
	if err := n.Activate(ctx); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, 10*time.Second, "the first config to serve", func() bool { return get(t) == "one" })
	os.WriteFile(n.MainConfig, []byte(slow("two")), 0o644)
	if err := n.Activate(ctx); err != nil {
		t.Fatalf("a reload whose workers start slowly failed: %v", err)
	}
	n.Handover(ctx)
	testsupport.WaitFor(t, 10*time.Second, "the new config to serve", func() bool { return get(t) == "two" })
}

func TestTestFailureCarriesOutput(t *testing.T) {
	n, dir := newCtl(t)
	os.WriteFile(n.MainConfig, []byte(strings.Replace(conf(dir, "x"), "access_log off;", "access_log off; bogus_directive on;", 1)), 0o644)
	err := n.Test(context.Background(), n.MainConfig)
	if err == nil || !strings.Contains(err.Error(), `unknown directive "bogus_directive"`) {
		t.Fatalf("err = %v", err)
	}
}

// A pid file naming a dead process, or a process that is not nginx, does
// not count as a running master.
func TestStalePIDFile(t *testing.T) {
	n, _ := newCtl(t)
	os.WriteFile(n.PIDFile, []byte(fmt.Sprint(os.Getpid())), 0o644)
	if n.Running() {
		t.Fatal("the test process counted as an nginx master")
	}
	os.WriteFile(n.PIDFile, []byte("999999"), 0o644)
	if n.Running() {
		t.Fatal("a dead pid counted as running")
	}
}

// Text in the error log decides nothing: lines forged with the master's
// own pid, written while a good config reloads (as a client's URI or a
// compromised worker could), neither fail it nor reach the error; a bad
// one is still told by the master's process, and only its own lines are
// quoted.
func TestReloadOutcomeFromProcessFacts(t *testing.T) {
	n, dir := newCtl(t)
	ctx := context.Background()
	os.WriteFile(n.MainConfig, []byte(conf(dir, "one")), 0o644)
	if err := n.Activate(ctx); err != nil {
		t.Fatal(err)
	}
	pid := n.MasterPID()
	// An idle master is seen done with any reload, from /proc alone.
	if done, known := n.procs().reloadDone(pid); !known || !done {
		t.Fatalf("/proc does not tell the master's state: done %v known %v", done, known)
	}
	spray := func(stop <-chan struct{}, done chan<- struct{}) {
		defer close(done)
		f, err := os.OpenFile(n.ErrorLog, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return
		}
		defer f.Close()
		for {
			select {
			case <-stop:
				return
			default:
			}
			fmt.Fprintf(f, "2026/12/01 00:00:00 [error] 9#9: *1 open() \"/x/[emerg] %d# fake\" failed\n2026/12/01 00:00:00 [emerg] 9999#9999: forged by a worker\n", pid)
			time.Sleep(time.Millisecond)
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go spray(stop, done)
	os.WriteFile(n.MainConfig, []byte(conf(dir, "two")), 0o644)
	err := n.Activate(ctx)
	close(stop)
	<-done
	if err != nil {
		t.Fatalf("a good reload failed on forged log lines: %v", err)
	}
	testsupport.WaitFor(t, 5*time.Second, "the new config to serve", func() bool { return get(t) == "two" })

	ln, err := net.Listen("tcp", "127.0.0.1:8098")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.WriteFile(n.MainConfig, []byte(strings.Replace(conf(dir, "three"), "listen 80;", "listen 127.0.0.1:8098;", 1)), 0o644)
	stop, done = make(chan struct{}), make(chan struct{})
	go spray(stop, done)
	err = n.Activate(ctx)
	close(stop)
	<-done
	if err == nil || !strings.Contains(err.Error(), "kept its previous workers") || !strings.Contains(err.Error(), "8098") {
		t.Fatalf("rejected reload not told: %v", err)
	}
	if strings.Contains(err.Error(), "fake") || strings.Contains(err.Error(), "forged") {
		t.Fatalf("someone else's log text reached the error: %v", err)
	}
}

func TestParseLogLine(t *testing.T) {
	for line, want := range map[string]logEntry{
		"2026/12/01 22:08:47 [emerg] 17810#17810: bind() failed":       {level: "emerg", pid: 17810, line: "2026/12/01 22:08:47 [emerg] 17810#17810: bind() failed"},
		"2026/12/01 22:08:47 [error] 5#7: *3 open() \"/[emerg] 1# x\"": {level: "error", pid: 5, line: "2026/12/01 22:08:47 [error] 5#7: *3 open() \"/[emerg] 1# x\""},
		"x 2026/12/01 22:08:47 [emerg] 1#1: a forged tail":             {},
		"2026/12/01 22:08:47 [bogus] 1#1: x":                           {},
		"2026/12/01 22:08:47 [emerg] one#1: x":                         {},
		"2026/12/01 22:08:47 [emerg] 1#1 x":                            {},
		"2026/1a/01 22:08:47 [emerg] 1#1: x":                           {},
		"":                                                             {},
	} {
		got, ok := parseLogLine(line)
		if ok != (want.level != "") || got != want {
			t.Errorf("%q: %+v %v", line, got, ok)
		}
	}
}

// A reload nginx refused after it had bound the new generation's
// self-test socket leaves the socket's file behind; the same version tried
// again (force sync, a restart after a crash) must still bind it, and the
// self-test then reaches the new workers.
func TestRefusedReloadLeavesNoStaleSocket(t *testing.T) {
	n, dir := newCtl(t)
	ctx := context.Background()
	stDir := filepath.Join(dir, "selftest")
	os.Mkdir(stDir, selftest.DirMode)
	withSelfTest := func(body, gen string) string {
		c := conf(dir, body)
		return strings.Replace(c, "http {\n", "http {\n"+selftest.Stamp(selftest.Block(stDir, ""), gen), 1)
	}
	os.WriteFile(n.MainConfig, []byte(withSelfTest("one", "1111111111111111")), 0o644)
	if err := n.Activate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.SelfTest(ctx, 0); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:8097")
	if err != nil {
		t.Fatal(err)
	}
	two := strings.Replace(withSelfTest("two", "2222222222222222"), "listen 80;", "listen 80; listen 127.0.0.1:8097;", 1)
	os.WriteFile(n.MainConfig, []byte(two), 0o644)
	if err := n.Activate(ctx); err == nil {
		t.Fatal("reload with a taken port succeeded")
	}
	ln.Close()
	if err := n.Activate(ctx); err != nil {
		t.Fatalf("the same version tried again: %v", err)
	}
	if err := n.SelfTest(ctx, 0); err != nil {
		t.Fatal(err)
	}
	n.Handover(ctx)
	testsupport.WaitFor(t, 5*time.Second, "the new config to serve", func() bool { return get(t) == "two" })
}
