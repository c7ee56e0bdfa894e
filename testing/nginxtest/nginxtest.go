// Package nginxtest starts a real nginx for tests. It must run inside the
// namespaces of package nstest (ports 80/443 on a private loopback).
package nginxtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"openflare/internal/linux"
	"openflare/testing/nstest"
)

// Binary returns the nginx binary tests use: $OPENFLARE_TEST_NGINX, else
// nginx or openresty from PATH or /usr/sbin. It skips t when none exists.
func Binary(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("OPENFLARE_TEST_NGINX"); b != "" {
		return b
	}
	for _, name := range []string{"nginx", "openresty", "/usr/sbin/nginx", "/usr/local/openresty/bin/openresty"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no nginx binary found (run `make deps`)")
	return ""
}

// LoadModules returns the load_module lines the binary needs for Lua: none
// for OpenResty, the ndk and lua modules for Debian's dynamic packaging.
func LoadModules(t testing.TB, bin string) string {
	t.Helper()
	out, _ := exec.Command(bin, "-V").CombinedOutput()
	if strings.Contains(string(out), "lua-nginx-module") || strings.Contains(string(out), "openresty") {
		return ""
	}
	var b strings.Builder
	for _, m := range []string{"ndk_http_module.so", "ngx_http_lua_module.so"} {
		p := filepath.Join("/usr/lib/nginx/modules", m)
		if _, err := os.Stat(p); err != nil {
			t.Skipf("nginx has no Lua module (%s missing; run `make deps`)", p)
		}
		fmt.Fprintf(&b, "load_module %s;\n", p)
	}
	return b.String()
}

// Server is a running nginx.
type Server struct {
	t    testing.TB
	Bin  string
	Dir  string // prefix directory holding conf, logs, pid and temp dirs
	Conf string // path of nginx.conf
}

// Start runs nginx with the given http-block body (everything between
// "http {" and "}") wrapped in a main config that loads Lua, keeps every
// path under a temp dir and runs workers as the namespace's only user.
func Start(t testing.TB, httpBody string) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	conf := fmt.Sprintf(`%suser root root;
worker_processes 2;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log info;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %[2]s/client_temp;
    proxy_temp_path %[2]s/proxy_temp;
    fastcgi_temp_path %[2]s/fastcgi_temp;
    uwsgi_temp_path %[2]s/uwsgi_temp;
    scgi_temp_path %[2]s/scgi_temp;
%[3]s
}
`, LoadModules(t, bin), dir, httpBody)
	return StartConf(t, bin, dir, conf)
}

// StartConf writes conf to dir/nginx.conf and starts nginx with it. The
// config must set "pid <dir>/nginx.pid".
func StartConf(t testing.TB, bin, dir, conf string) *Server {
	t.Helper()
	if !nstest.Inside() {
		t.Fatal("nginxtest needs the test namespaces: call nstest.Main from TestMain")
	}
	s := &Server{t: t, Bin: bin, Dir: dir, Conf: filepath.Join(dir, "nginx.conf")}
	if err := os.WriteFile(s.Conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := s.run(); err != nil {
		t.Fatalf("start nginx: %v\n%s\n--- error.log:\n%s", err, out, s.ErrorLog())
	}
	t.Cleanup(s.Stop)
	if _, err := s.waitMaster(5 * time.Second); err != nil {
		t.Fatalf("nginx did not start: %v\n%s", err, s.ErrorLog())
	}
	return s
}

func (s *Server) run(args ...string) ([]byte, error) {
	args = append([]string{"-p", s.Dir, "-c", s.Conf, "-e", filepath.Join(s.Dir, "error.log")}, args...)
	return exec.Command(s.Bin, args...).CombinedOutput()
}

// Reload sends "-s reload" and waits until new workers replace the old ones.
func (s *Server) Reload() {
	s.t.Helper()
	before := s.WorkerPIDs()
	if out, err := s.run("-s", "reload"); err != nil {
		s.t.Fatalf("nginx -s reload: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		after := s.WorkerPIDs()
		if len(after) > 0 && disjoint(before, after) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("nginx reload: workers not replaced\n%s", s.ErrorLog())
}

// Stop stops nginx and waits for the master to exit.
func (s *Server) Stop() {
	pid, err := s.MasterPID()
	if err != nil {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil {
		time.Sleep(10 * time.Millisecond)
	}
}

// MasterPID reads the pid file.
func (s *Server) MasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, "nginx.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func (s *Server) waitMaster(timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		pid, err := s.MasterPID()
		if err == nil && len(s.WorkerPIDs()) > 0 {
			return pid, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("no worker processes")
			}
			return 0, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WorkerPIDs lists the live worker processes of the master.
func (s *Server) WorkerPIDs() []int {
	master, err := s.MasterPID()
	if err != nil {
		return nil
	}
	return WorkerPIDs(master)
}

// WorkerPIDs lists the children of master that are nginx worker
// processes, read as agent/nginx reads them (which its own tests cannot
// import from here).
func WorkerPIDs(master int) []int {
	var pids []int
	for _, c := range linux.Default().Children(master) {
		if strings.Contains(c.Cmdline, "worker process") {
			pids = append(pids, c.PID)
		}
	}
	return pids
}

// ErrorLog returns the error log so far.
func (s *Server) ErrorLog() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "error.log"))
	return string(b)
}

// WaitPort waits until something accepts TCP connections on addr.
func WaitPort(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func disjoint(a, b []int) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return false
			}
		}
	}
	return true
}
