package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"openflare/agent/config"
	"openflare/agent/protocol"
	"openflare/agent/selftest"
	"openflare/testing/controlplane"
	"openflare/testing/nstest"
	"openflare/testing/testsupport"
)

// An internet client sprays the error log with fake "[emerg] <pid>#"
// lines for every pid from 1 to 600, in 13 KB URIs, while a version is
// published (issue 20, item 2): the apply succeeds, nothing is
// blocklisted, no client text reaches last_error, and the spray lands in
// the requests' own log, not in the log the agent reads nginx from.
func TestErrorLogSprayCannotFailApply(t *testing.T) {
	cp := controlPlane(t)
	// An origin whose port is closed: each request logs "connect()
	// failed ... request: <its URI>".
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + ln.Addr().String()
	ln.Close()
	routes := []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1")), proxyRoute(2, "dead.test", deadURL)}
	n, _ := servingNode(t, cp, controlplane.Source{Routes: routes, OpenResty: noErrorPages}, "app.test", "origin-ok v1")

	var spray strings.Builder
	for pid := 1; pid <= 600; pid++ {
		fmt.Fprintf(&spray, "%%5Bemerg%%5D%%20%d%%23%%20fake-%d%%0A", pid, pid)
	}
	uri := "/" + spray.String()
	if len(uri) > 15000 {
		uri = uri[:15000]
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent int
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			get("dead.test", uri)
			sent++
		}
	})
	routes[0] = proxyRoute(1, "app.test", origin(t, "v2"))
	v2 := publish(t, cp, controlplane.Source{Routes: routes, OpenResty: noErrorPages})
	rec := waitApplyLog(t, cp, v2.Version, protocol.ResultSuccess)
	waitServes(t, "app.test", "/", "origin-ok v2")
	close(stop)
	wg.Wait()
	if sent == 0 {
		t.Fatal("no spray request was sent")
	}
	st := n.state()
	if st.Blocked != (protocol.ConfigRef{}) || st.LastError != "" || strings.Contains(rec.Message, "fake") {
		t.Fatalf("the spray changed the apply: state %+v, message %q", st, rec.Message)
	}
	logs := filepath.Join(n.dataDir, "var", "log", "openflare")
	if b := testsupport.ReadFile(t, filepath.Join(logs, "http-error.log")); !strings.Contains(b, "fake-") {
		t.Fatalf("the spray never reached nginx's request log:\n%.2000s", b)
	}
	if b := testsupport.ReadFile(t, filepath.Join(logs, "error.log")); strings.Contains(b, "fake-") {
		t.Fatalf("client text in the master's log:\n%.2000s", b)
	}
}

// A local unprivileged user (uid 65534) can neither reach the self-test
// nor make an apply fail by squatting addresses (issue 20, item 3): it is
// refused the self-test socket, and while it holds the observability port
// on every address of 127.79.0.0/16 (the old self-test range) and of
// 127.0.0.2-255, a new version applies and serves.
func TestOutsiderCannotReachOrSquatSelfTest(t *testing.T) {
	if !nstest.RealRoot() {
		t.Skip("needs real root: an unprivileged user beside the agent")
	}
	cp := controlPlane(t)
	n, _ := appV1(t, cp)
	main := testsupport.ReadFile(t, filepath.Join(n.dataDir, "etc", "nginx", "nginx.conf"))
	target, ok := selftest.Find(main)
	if !ok {
		t.Fatalf("no self-test block in the landed config:\n%s", main)
	}
	if out := asNobody(t, "connect", target.Socket); !strings.Contains(out, "permission denied") {
		t.Fatalf("uid 65534 connecting to the self-test socket: %q", out)
	}
	if out := asNobody(t, "connect", target.Socket); strings.Contains(out, "ok ") {
		t.Fatalf("uid 65534 read the generation: %q", out)
	}
	// Four processes, as in the reproduction: one process may not
	// hold that many sockets.
	held := 0
	for shard := 0; shard < 4; shard++ {
		line := startNobody(t, "hold", strconv.Itoa(config.DefaultObservabilityPort), strconv.Itoa(shard))
		var n, of int
		fmt.Sscanf(line, "held %d of %d", &n, &of)
		if n != of {
			t.Fatalf("the squatter did not get every address of its shard: %s", line)
		}
		held += n
	}
	t.Logf("uid 65534 holds port %d on %d loopback addresses", config.DefaultObservabilityPort, held)
	v2 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v2"))}})
	waitApplyLog(t, cp, v2.Version, protocol.ResultSuccess)
	waitServes(t, "app.test", "/", "origin-ok v2")
}

// helperBinary is this test binary, copied where uid 65534 may run it.
func helperBinary(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(nstest.TraversableTempDir(t), "e2e.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, src); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return dst
}

func nobodyCmd(t *testing.T, args ...string) *exec.Cmd {
	cmd := exec.Command(helperBinary(t), "-test.run=^TestHelperNobody$")
	cmd.Env = append(os.Environ(), "OPENFLARE_E2E_NOBODY="+strings.Join(args, " "))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return cmd
}

// asNobody runs one helper action as uid 65534 and returns its output.
func asNobody(t *testing.T, args ...string) string {
	t.Helper()
	out, _ := nobodyCmd(t, args...).CombinedOutput()
	return strings.ToLower(string(out))
}

// startNobody starts a helper action that holds what it took until the
// test ends, and returns the line it reports once it holds it.
func startNobody(t *testing.T, args ...string) string {
	t.Helper()
	cmd := nobodyCmd(t, args...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "held ") {
		t.Fatalf("helper: %q %v", line, err)
	}
	return strings.TrimSpace(line)
}

// TestHelperNobody is the unprivileged helper's body (OPENFLARE_E2E_NOBODY
// names the action), run by the tests above as uid 65534.
func TestHelperNobody(t *testing.T) {
	action := strings.Fields(os.Getenv("OPENFLARE_E2E_NOBODY"))
	if len(action) == 0 {
		t.Skip("the unprivileged helper of other tests")
	}
	switch action[0] {
	case "connect":
		c, err := net.Dial("unix", action[1])
		if err != nil {
			fmt.Println(err)
			os.Exit(0)
		}
		fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", selftest.Path, selftest.ServerName)
		b, _ := io.ReadAll(c)
		fmt.Println(string(b))
	case "hold":
		var held []net.Listener
		addrs := []string{}
		for a := 0; a < 256; a++ {
			for b := 1; b < 255; b++ {
				addrs = append(addrs, fmt.Sprintf("127.79.%d.%d", a, b))
			}
		}
		for d := 2; d < 256; d++ {
			addrs = append(addrs, fmt.Sprintf("127.0.0.%d", d))
		}
		shard, _ := strconv.Atoi(action[2])
		for i, a := range addrs {
			if i%4 != shard {
				continue
			}
			if ln, err := net.Listen("tcp", net.JoinHostPort(a, action[1])); err == nil {
				held = append(held, ln)
			}
		}
		fmt.Printf("held %d of %d addresses on port %s\n", len(held), (len(addrs)-shard+3)/4, action[1])
		io.Copy(io.Discard, os.Stdin)
	}
	os.Exit(0)
}
