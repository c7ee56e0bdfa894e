package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"openflare/agent/logrotate"
	"openflare/agent/osuser"
	"openflare/agent/protocol"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

const (
	testLogMax  = 256 << 10
	testLogKeep = 2
)

// logFiles are the node's three nginx logs.
func (n *node) logFiles() []string {
	dir := n.data("var", "log", "openflare")
	return []string{dir + "/access.log", dir + "/error.log", dir + "/http-error.log"}
}

// expectPrivateLogs checks that no other user can read the logs or their
// rotated copies: the owner and, where the host has it, group adm only.
func expectPrivateLogs(t *testing.T, n *node, when string) {
	t.Helper()
	adm, hasAdm := osuser.DB{}.GroupID("adm")
	for _, p := range n.logFiles() {
		for i := 0; i <= testLogKeep; i++ {
			name := p
			if i > 0 {
				name = fmt.Sprintf("%s.%d", p, i)
			}
			fi, err := os.Stat(name)
			if i > 0 && err != nil {
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			gid := int(fi.Sys().(*syscall.Stat_t).Gid)
			if m := fi.Mode().Perm(); m&0o004 != 0 || hasAdm && (m != 0o640 || gid != adm) || !hasAdm && m != 0o600 {
				t.Errorf("%s: %s is %v, group %d (adm: %d %v)", when, name, m, gid, adm, hasAdm)
			}
		}
	}
}

// A flood of requests with long URIs to an origin that refuses
// connections makes nginx write a line to http-error.log for each: with
// log_max_bytes at 256 KiB the log and its copies stay within the cap plus
// what the flood writes in one check, none of them is readable by other
// users, before or after rotations (nginx's master gives a reopened log to
// the worker user, the mode stays), and the node serves throughout.
func TestLogsPrivateAndBoundedUnderFlood(t *testing.T) {
	needRealRoot(t)
	cp := controlPlane(t)
	refused := listen(t, "127.0.0.1:0")
	deadOrigin := "http://" + refused.Addr().String()
	refused.Close()
	ref := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{
		proxyRoute(1, "ok.test", origin(t, "ok")),
		proxyRoute(2, "flood.test", deadOrigin),
	}, OpenResty: noErrorPages})
	n := newNode(t, cp, map[string]any{"log_max_bytes": testLogMax, "log_keep": testLogKeep})
	n.start()
	waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	waitServes(t, "ok.test", "/", "origin-ok ok")
	expectPrivateLogs(t, n, "after the publish")

	errLog := n.logFiles()[2]
	uri := "/" + strings.Repeat("a", 1800) + "?token=visitor-secret"
	// What one request writes to the log at most (it may log twice: the
	// refused connect, and the origin marked down).
	perRequest := int64(0)
	for range 10 {
		before := size(errLog)
		if r := get("flood.test", uri); r.status != 502 {
			t.Fatalf("flood.test: %d %v, want 502 from the refused origin", r.status, r.err)
		}
		perRequest = max(perRequest, size(errLog)-before)
	}
	if perRequest < 1000 {
		t.Fatalf("a request wrote %d bytes to %s: no error line for the long URI", perRequest, errLog)
	}

	// The flood: as fast as 8 clients go, for eight windows (below) and
	// five rotations at least.
	var (
		mu     sync.Mutex
		starts []time.Time
		stop   atomic.Bool
		wg     sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for !stop.Load() {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				get("flood.test", uri)
			}
		})
	}
	halt := func() { stop.Store(true); wg.Wait() }
	t.Cleanup(halt)
	peak := map[string]int64{}
	sample := func() {
		for _, p := range n.logFiles() {
			for i := 0; i <= testLogKeep+1; i++ {
				name := p
				if i > 0 {
					name = fmt.Sprintf("%s.%d", p, i)
				}
				if s := size(name); s >= 0 {
					peak[name] = max(peak[name], s)
				}
			}
		}
	}
	// A file is rotated at the first check that finds it over the cap; it
	// grows by what the flood writes until then, one interval (and half
	// one more, for a check that comes late on a loaded machine), and
	// until the workers have reopened.
	window := logrotate.Interval * 3 / 2
	rotations := func() int { return strings.Count(n.logs.String(), `msg="log rotated" path=`+errLog) }
	served := 0
	began := time.Now()
	testsupport.WaitFor(t, 2*time.Minute, "eight windows of flood and five rotations of http-error.log", func() bool {
		sample()
		if r := get("ok.test", "/"); r.status != 200 || r.body != "origin-ok ok /" {
			t.Fatalf("ok.test during the flood: %d %q %v", r.status, r.body, r.err)
		}
		served++
		return time.Since(began) > 8*window && rotations() >= 5
	})
	halt()
	sample()

	// The most the flood wrote in one window, and one request in flight
	// per client.
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i, j := 0, 0; j < len(starts); j++ {
		for starts[j].Sub(starts[i]) > window {
			i++
		}
		most = max(most, j-i+1)
	}
	slack := perRequest * int64(most+8)
	bound := int64(testLogMax) + slack
	total := perRequest * int64(len(starts))
	for _, p := range []string{errLog, errLog + ".1", errLog + ".2"} {
		if peak[p] > bound {
			t.Errorf("%s reached %d bytes: over the cap %d plus one interval of the flood (%d)", p, peak[p], testLogMax, slack)
		}
	}
	if _, ok := peak[errLog+".3"]; ok {
		t.Errorf("%s.3 exists: log_keep is %d", errLog, testLogKeep)
	}
	// The access log may wait for the tailer up to twice the cap.
	accessLog := n.logFiles()[0]
	for _, p := range []string{accessLog, accessLog + ".1", accessLog + ".2"} {
		if peak[p] > 2*testLogMax+slack {
			t.Errorf("%s reached %d bytes: over twice the cap plus one interval of the flood (%d)", p, peak[p], slack)
		}
	}
	if total < 4*bound {
		t.Fatalf("the flood wrote only about %d bytes, too little to show a bound of %d", total, bound)
	}
	t.Logf("%d requests (%d in the busiest %v) wrote about %d bytes of error lines (%d each); http-error.log peaked at %d, .1 at %d, .2 at %d (cap %d, bound %d); access.log peaked at %d; ok.test served %d times during the flood",
		len(starts), most, window, total, perRequest, peak[errLog], peak[errLog+".1"], peak[errLog+".2"], testLogMax, bound, peak[accessLog], served)

	// nginx gave the reopened log to its workers; it stays closed to others.
	ws := workerPIDs(n.nginxPID())
	if len(ws) == 0 {
		t.Fatal("no nginx workers")
	}
	worker, _ := procIDs(t, ws[0])
	testsupport.WaitFor(t, 10*time.Second, "the reopened http-error.log to belong to the workers", func() bool {
		fi, err := os.Stat(errLog)
		return err == nil && int(fi.Sys().(*syscall.Stat_t).Uid) == worker
	})
	expectPrivateLogs(t, n, "after the rotations")
	if r := get("ok.test", "/"); r.status != 200 {
		t.Fatalf("ok.test after the flood: %d %v", r.status, r.err)
	}
}

// size is the file's size, -1 when there is none.
func size(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// Traffic that turns the access log over several times reaches the
// control plane exactly once: the agent moves the log aside only once its
// tailer has reached the current file, and never deletes a moved file
// before the tailer has finished it.
func TestLogRotationAccessLogsExactlyOnce(t *testing.T) {
	cp := controlPlane(t)
	ref := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "rot.test", origin(t, "rot"))}, OpenResty: noErrorPages})
	n := newNode(t, cp, map[string]any{"log_max_bytes": testLogMax, "log_keep": testLogKeep})
	n.start()
	waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	waitServes(t, "rot.test", "/", "origin-ok rot")

	// Enough lines for several rotations, as fast as one client goes while
	// the uploads keep up: the client never runs more than backlog lines
	// ahead of what the control plane received. So the access log never
	// holds twice its cap unreported, and moving it aside unreported (the
	// valve for a flood that outruns the uploads, which
	// agent/logrotate's tests cover) is a fault here, not a slow machine.
	// One client unpaced outran the beats of a loaded two-core runner.
	const total, backlog = 15000, 1000
	for i := range total {
		if i%(backlog/2) == 0 && i >= backlog {
			testsupport.WaitFor(t, time.Minute, fmt.Sprintf("the control plane to receive /x/0 to /x/%d", i-backlog), func() bool {
				return len(countPaths(cp, "/x/")) >= i-backlog
			})
		}
		if r := get("rot.test", fmt.Sprintf("/x/%d", i)); r.status != 200 {
			t.Fatalf("/x/%d: %d %v", i, r.status, r.err)
		}
	}
	exactlyOnce(t, cp, "/x/", total, 2*time.Minute)
	rotations := strings.Count(n.logs.String(), `msg="log rotated" path=`+n.logFiles()[0]+" ")
	if rotations < 3 {
		t.Fatalf("access.log rotated %d times; the test needs more traffic", rotations)
	}
	if strings.Contains(n.logs.String(), "moved aside before the control plane received it") {
		t.Errorf("the access log was moved aside before it was reported")
	}
	for _, b := range cp.Heartbeats() {
		for _, ev := range b.Payload.HealthEvents {
			if ev.EventType == "access_log_lost" {
				t.Errorf("health event %+v", ev)
			}
		}
	}
	t.Logf("%d requests, access.log rotated %d times, each line received once", total, rotations)
	if _, err := os.Stat(n.logFiles()[0] + ".3"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("access.log.3 exists (%v): log_keep is %d", err, testLogKeep)
	}
}
