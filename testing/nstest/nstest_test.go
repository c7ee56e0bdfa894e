package nstest

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// Inside the namespaces we are root, own loopback, and /proc shows our PID namespace.
func TestNamespace(t *testing.T) {
	if !Inside() {
		t.Fatal("not running inside the test namespaces")
	}
	if os.Getuid() != 0 {
		t.Fatalf("uid inside = %d, want 0", os.Getuid())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:80")
	if err != nil {
		t.Fatalf("bind port 80 on loopback: %v", err)
	}
	ln.Close()
	self, err := os.Readlink("/proc/self")
	if err != nil {
		t.Fatal(err)
	}
	if self != strconv.Itoa(os.Getpid()) || os.Getpid() > 100 {
		t.Fatalf("/proc/self = %s, pid = %d: want /proc of the new PID namespace (small pids)", self, os.Getpid())
	}
	m, _ := os.ReadFile("/proc/self/uid_map")
	if f := strings.Fields(string(m)); len(f) != 3 || f[2] != "1" {
		t.Fatalf("uid_map = %q, want a single mapped uid", m)
	}
}

// The namespaces' mounts are private: a mount made in them reaches nothing
// outside.
func TestPrivateMount(t *testing.T) {
	for _, p := range []string{"/", "/etc/passwd", "/proc/self"} {
		if err := PrivateMount(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
