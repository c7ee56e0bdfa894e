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

	"github.com/openflare/openflare-agent/testing/nginxtest"
	"github.com/openflare/openflare-agent/testing/nstest"
	"github.com/openflare/openflare-agent/testing/testsupport"
)

func TestMain(m *testing.M) { nstest.Main(m) }

func newCtl(t *testing.T) (*Ctl, string) {
	t.Helper()
	caps, err := Probe(context.Background(), nginxtest.Binary(t))
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
