package e2e

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/agent/testhook"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

// receivedLogs returns every access log the control plane received,
// top-level and buffered, in arrival order.
func receivedLogs(cp *controlplane.Server) []protocol.AccessLog {
	var out []protocol.AccessLog
	for _, b := range cp.Heartbeats() {
		out = append(out, b.Payload.AccessLogs...)
		for _, w := range b.Payload.Buffered {
			out = append(out, w.AccessLogs...)
		}
	}
	return out
}

// countPaths counts received access logs per path with the given prefix.
func countPaths(cp *controlplane.Server, prefix string) map[string]int {
	m := map[string]int{}
	for _, l := range receivedLogs(cp) {
		if strings.HasPrefix(l.Path, prefix) {
			m[l.Path]++
		}
	}
	return m
}

// servedNode publishes one route and starts a node serving it.
func servedNode(t *testing.T, cp *controlplane.Server, host string) *node {
	t.Helper()
	n, _ := servingNode(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, host, origin(t, "obs"))}, OpenResty: noErrorPages}, host, "origin-ok obs")
	return n
}

// Requests through nginx reach the control plane as access logs in the next
// heartbeats with the right host, path, status and bytes; the heartbeat
// also carries host metrics, edge health and (once) the host profile.
func TestAccessLogsReachControlPlane(t *testing.T) {
	cp := controlPlane(t)
	servedNode(t, cp, "logs.test")
	r := get("logs.test", "/ok?x=1")
	if r.status != 200 {
		t.Fatalf("GET: %d", r.status)
	}
	miss := get("nobody.test", "/missing")
	var got protocol.AccessLog
	testsupport.WaitFor(t, 30*time.Second, "the access logs", func() bool {
		found := 0
		for _, l := range receivedLogs(cp) {
			if l.Host == "logs.test" && l.Path == "/ok?x=1" {
				got = l
				found++
			}
			if l.Host == "nobody.test" && l.Path == "/missing" && l.StatusCode == miss.status {
				found++
			}
		}
		return found == 2
	})
	if got.StatusCode != 200 || got.BytesSent != int64(len(r.body)) || got.RemoteAddr != "127.0.0.1" || got.LoggedAtUnix < time.Now().Add(-time.Minute).Unix() {
		t.Fatalf("access log %+v for a %d-byte reply", got, len(r.body))
	}
	// The agent probed its data plane after the apply: that request is
	// the agent's own, not traffic.
	for _, l := range receivedLogs(cp) {
		if strings.Contains(l.Host, "probe") || strings.Contains(l.Path, "agent-probe") {
			t.Fatalf("the self-probe reached the uploaded access logs: %+v", l)
		}
	}
	var profiles, metrics, health int
	for _, b := range cp.Heartbeats() {
		if b.Payload.Profile != nil {
			profiles++
		}
		if b.Payload.HostMetrics != nil && b.Payload.HostMetrics.MemoryTotalBytes > 0 {
			metrics++
		}
		if b.Payload.EdgeHealth != nil && b.Payload.EdgeHealth.Status == protocol.StatusHealthy {
			health++
		}
	}
	if profiles != 1 || metrics == 0 || health == 0 {
		t.Fatalf("profiles %d (want exactly 1), beats with metrics %d, healthy edge reports %d", profiles, metrics, health)
	}
}

// traffic sends numbered requests until stop is closed.
func traffic(t *testing.T, host, prefix string, every time.Duration, stop <-chan struct{}) *atomic.Int64 {
	var sent atomic.Int64
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(every):
			}
			if r := get(host, fmt.Sprintf("%s%d", prefix, i)); r.status == 200 {
				sent.Add(1)
			} else {
				t.Errorf("request %d: %d %v", i, r.status, r.err)
			}
		}
	}()
	return &sent
}

// exactlyOnce waits until every path prefix0..prefix(n-1) was received and
// checks none was received twice.
func exactlyOnce(t *testing.T, cp *controlplane.Server, prefix string, n int64, timeout time.Duration) {
	t.Helper()
	var counts map[string]int
	testsupport.WaitFor(t, timeout, fmt.Sprintf("%d access logs under %s", n, prefix), func() bool {
		counts = countPaths(cp, prefix)
		return int64(len(counts)) >= n
	})
	for p, c := range counts {
		if c != 1 {
			t.Errorf("%s received %d times", p, c)
		}
	}
	for i := int64(0); i < n; i++ {
		if counts[fmt.Sprintf("%s%d", prefix, i)] != 1 {
			t.Errorf("%s%d missing", prefix, i)
		}
	}
}

// The control plane is down while traffic flows, across a minute boundary:
// when it returns every request made meanwhile arrives exactly once, and
// each host-metric minute window of the outage is replayed exactly once as
// buffered[]. The agent's clock runs ahead (testhook skew) so that its
// next minute boundary falls a few seconds into the outage: the outage
// lasts seconds, not minutes.
func TestOutageReplaysExactlyOnce(t *testing.T) {
	cp := controlPlane(t)
	// The outage starts about 5 s from now (start-up, 2 s of traffic);
	// put the agent's minute boundary a few seconds after that.
	boundary := time.Now().Add(9 * time.Second)
	skew := boundary.Truncate(time.Minute).Add(time.Minute).Sub(boundary)
	ref := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "busy.test", origin(t, "busy"))}, OpenResty: noErrorPages})
	n := newNode(t, cp, nil)
	n.start(testhook.SkewEnv + "=" + skew.String())
	agentNow := func() time.Time { return time.Now().Add(skew) }
	waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	waitServes(t, "busy.test", "/", "origin-ok busy")

	stop := make(chan struct{})
	sent := traffic(t, "busy.test", "/r/", 20*time.Millisecond, stop)
	time.Sleep(2 * time.Second) // traffic before the outage, on purpose
	failed := func() int { return strings.Count(n.logs.String(), "heartbeat failed") }
	before := failed()
	if err := cp.SetDown(true); err != nil {
		t.Fatal(err)
	}
	// A beat fails in the agent's current minute, then (the clock crossed
	// into the next one) another fails there: failed beats back off, so
	// wait for each rather than for a fixed time.
	testsupport.WaitFor(t, 30*time.Second, "a failed beat", func() bool { return failed() > before })
	downWindow := agentNow().Truncate(time.Minute)
	time.Sleep(time.Until(downWindow.Add(time.Minute).Add(-skew)))
	crossed := failed()
	testsupport.WaitFor(t, 90*time.Second, "a failed beat in the next minute", func() bool { return failed() > crossed })
	if err := cp.SetDown(false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // and traffic after it
	close(stop)
	time.Sleep(100 * time.Millisecond) // let the last request finish
	total := sent.Load()
	exactlyOnce(t, cp, "/r/", total, time.Minute)
	testsupport.WaitFor(t, 30*time.Second, "both outage windows replayed", func() bool {
		return len(replayedWindows(cp, downWindow.Unix())) >= 2
	})
	for w, c := range replayedWindows(cp, downWindow.Unix()) {
		if c != 1 {
			t.Errorf("window %d replayed %d times", w, c)
		}
	}
	t.Logf("%d requests during an outage across a minute boundary arrived exactly once", total)
}

// replayedWindows counts, per minute window from since on, how often the
// accepted beats carried it as buffered host metrics.
func replayedWindows(cp *controlplane.Server, since int64) map[int64]int {
	counts := map[int64]int{}
	for _, b := range cp.Heartbeats() {
		for _, w := range b.Payload.Buffered {
			if w.HostMetrics != nil && w.CapturedAtUnix >= since {
				counts[w.CapturedAtUnix]++
			}
		}
	}
	return counts
}

// Rotation by rename (with nginx writing to the old file until it reopens)
// and rotation by truncation lose and repeat nothing.
func TestLogRotationAndTruncation(t *testing.T) {
	cp := controlPlane(t)
	n := servedNode(t, cp, "rot.test")
	logPath := n.data("var", "log", "openflare", "access.log")
	send := func(prefix string, count int) {
		for i := 0; i < count; i++ {
			if r := get("rot.test", fmt.Sprintf("%s%d", prefix, i)); r.status != 200 {
				t.Fatalf("%s%d: %d", prefix, i, r.status)
			}
		}
	}
	send("/a/", 50)
	exactlyOnce(t, cp, "/a/", 50, 30*time.Second)

	// logrotate's default: rename, keep writing to the old file, reopen.
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	send("/b/", 50) // still goes to access.log.1
	if err := syscall.Kill(n.nginxPID(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, 10*time.Second, "nginx to reopen the log", func() bool { _, err := os.Stat(logPath); return err == nil })
	send("/c/", 50)
	exactlyOnce(t, cp, "/b/", 50, 30*time.Second)
	exactlyOnce(t, cp, "/c/", 50, 30*time.Second)

	// copytruncate: the file is cut to zero in place.
	if err := os.Truncate(logPath, 0); err != nil {
		t.Fatal(err)
	}
	send("/d/", 50)
	exactlyOnce(t, cp, "/d/", 50, 30*time.Second)
	for _, p := range []string{"/a/", "/b/", "/c/"} {
		for path, c := range countPaths(cp, p) {
			if c != 1 {
				t.Fatalf("%s received %d times after the rotations", path, c)
			}
		}
	}
}
