package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/benchkit"
	"openflare/testing/controlplane"
)

// rssCeilingKiB is the figure the agent must hold with memory_limit 32 MiB
// whatever the server sends: a 128 MiB router keeps the rest for nginx.
const rssCeilingKiB = 48 << 10

// ipList is n distinct IPv4 addresses in 10.0.0.0/8 and beyond, sorted as
// the server sorts them.
func ipList(n int, extra ...string) []string {
	list := make([]string, 0, n+len(extra))
	for i := 0; len(list) < n; i++ {
		list = append(list, fmt.Sprintf("%d.%d.%d.%d", 10+i>>24, i>>16&0xff, i>>8&0xff, i&0xff))
	}
	return append(list, extra...)
}

// With memory_limit 32 MiB the agent's peak RSS stays within 48 MiB
// whatever the server sends: endless replies on the heartbeat and E4, a
// support file over its budget, the largest one the budget admits, and the largest IP
// group the server ships. What is over budget fails with an error naming
// the endpoint and the limit, and the node keeps serving.
func TestMemoryBoundedUnderHostileReplies(t *testing.T) {
	cp := controlPlane(t)
	o := origin(t, "v1")
	src := func(ipGroups ...uint64) controlplane.Source {
		s := controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "mem.test", o)}}
		if len(ipGroups) > 0 {
			s.WAF = &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), controlplane.IPMatchRuleGroup(2, "deny", ipGroups...)}}
		}
		return s
	}
	v1 := publish(t, cp, src())
	n := newNode(t, cp, map[string]any{"memory_limit": "32MiB"})
	n.bin = plainAgentBinary(t)
	n.start()
	pid := n.cmd.Process.Pid
	oomKills := memoryCgroup(t, pid, 128<<20)
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	waitServes(t, "mem.test", "/", "origin-ok v1")
	phase := func(name string) {
		t.Logf("%-40s VmHWM %6.1f MiB, VmRSS %6.1f MiB", name, float64(benchkit.StatusKiB(pid, "VmHWM:"))/1024, float64(benchkit.StatusKiB(pid, "VmRSS:"))/1024)
	}
	phase("serving v1")

	// Endless replies: 512 MiB of one JSON string, on each endpoint.
	cp.Inject(controlplane.Fault{Path: protocol.PathHeartbeat, Oversize: 512 << 20})
	n.waitLog(`heartbeat: reply holds a value over 1 MiB`, 60*time.Second)
	phase("512 MiB heartbeat reply")
	cp.Inject(controlplane.Fault{Path: protocol.PathActive, Oversize: 512 << 20})
	v2 := publish(t, cp, src(), protocol.SupportFile{Path: "padding.txt", Content: strings.Repeat("p", 1<<20)})
	n.waitLog(`active config: reply holds a value over 1 MiB`, 60*time.Second)
	phase("512 MiB E4 reply")
	// The next attempt (after back-off) gets the real reply.
	waitApplyLog(t, cp, v2.Version, protocol.ResultSuccess)
	phase("v2 after the oversized E4")

	// The largest support file a node of this size takes: 7 MiB (within
	// the 8 MiB a file or the source may hold at 32 MiB), which no real
	// config approaches.
	v3 := publish(t, cp, src(), protocol.SupportFile{Path: "padding.txt", Content: strings.Repeat("q", 7<<20)})
	waitApplyLog(t, cp, v3.Version, protocol.ResultSuccess)
	phase("7 MiB config applied")

	// Over budget: refused whole, named, and v3 keeps serving.
	big := publish(t, cp, src(), protocol.SupportFile{Path: "padding.txt", Content: strings.Repeat("r", 40<<20)})
	// The log quotes the error, escaping its quotes.
	n.waitLog(`active config: reply holds support file \"padding.txt\" over 8 MiB`, 60*time.Second)
	phase("40 MiB config refused")
	if st := n.state(); st.Current.Version != v3.Version {
		t.Fatalf("state moved to %q on a config over budget (%s)", st.Current.Version, big.Version)
	}

	// A 200 000-entry IP group lands and is enforced.
	cp.SetIPGroup(protocol.WAFIPGroup{ID: 7, Name: "deny", Type: "manual", Enabled: true, IPList: ipList(200_000, "127.0.0.70")})
	v4 := publish(t, cp, src(7))
	waitApplyLog(t, cp, v4.Version, protocol.ResultSuccess)
	// By every worker: the check after the refusal below asks once.
	waitEveryWorker(t, 30*time.Second, n.nginxPID(), "mem.test", "127.0.0.70", 403)
	phase("200 000-entry group enforced")

	// A 1 000 000-entry group (17 MiB of JSON, within PROTOCOL's 20 MiB
	// snapshot) lands too: its entries stream to disk, never held whole.
	cp.SetIPGroup(protocol.WAFIPGroup{ID: 7, Name: "deny", Type: "manual", Enabled: true, IPList: ipList(1_000_000, "127.0.0.71")})
	waitEveryWorker(t, 60*time.Second, n.nginxPID(), "mem.test", "127.0.0.71", 403)
	phase("1 000 000-entry group enforced")
	if r := request("GET", "http", "mem.test", "/", "127.0.0.70"); r.status != 200 {
		t.Fatalf("the replaced group's member is still blocked: %d", r.status)
	}
	waitServes(t, "mem.test", "/", "origin-ok v1")
	v5 := publish(t, cp, src(7), protocol.SupportFile{Path: "padding.txt", Content: "v5"})
	waitApplyLog(t, cp, v5.Version, protocol.ResultSuccess)
	phase("v5 applied beside the large group")

	if hwm := benchkit.StatusKiB(pid, "VmHWM:"); hwm > rssCeilingKiB {
		t.Fatalf("peak RSS %.1f MiB, over %d MiB", float64(hwm)/1024, rssCeilingKiB>>10)
	}
	if k := oomKills(); k != 0 {
		t.Fatalf("%d OOM kills in the agent's 128 MiB cgroup", k)
	}
}

// memoryCgroup moves pid (the agent, with the nginx it then starts) into a
// new memory cgroup limited to limit bytes, as on a 128 MiB router, and
// returns a count of the OOM kills in it. Without a writable memory
// controller the count is always 0 and the RSS figure stands alone.
func memoryCgroup(t *testing.T, pid int, limit int64) (oomKills func() int) {
	t.Helper()
	none := func() int { return 0 }
	type layout struct{ root, limitFile, eventsFile, eventsKey string }
	var l layout
	switch {
	case fileExists("/sys/fs/cgroup/memory/memory.limit_in_bytes"):
		l = layout{"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.oom_control", "oom_kill"}
	case strings.Contains(readFileOr("/sys/fs/cgroup/cgroup.subtree_control"), "memory"):
		l = layout{"/sys/fs/cgroup", "memory.max", "memory.events", "oom_kill"}
	default:
		t.Log("no writable memory cgroup controller: the 128 MiB cgroup check is skipped")
		return none
	}
	dir := filepath.Join(l.root, fmt.Sprintf("openflare-e2e-%d", pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Logf("cannot create a memory cgroup (%v): the 128 MiB cgroup check is skipped", err)
		return none
	}
	t.Cleanup(func() {
		// Whatever still runs in it (nginx after the agent's exit) goes
		// back to the parent, so the directory can go.
		for _, p := range strings.Fields(readFileOr(filepath.Join(dir, "cgroup.procs"))) {
			os.WriteFile(filepath.Join(l.root, "cgroup.procs"), []byte(p), 0)
		}
		os.Remove(dir)
	})
	if err := os.WriteFile(filepath.Join(dir, l.limitFile), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Logf("cannot limit the memory cgroup (%v): the 128 MiB cgroup check is skipped", err)
		return none
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Logf("cannot move the agent into the memory cgroup (%v): the 128 MiB cgroup check is skipped", err)
		return none
	}
	return func() int {
		for _, line := range strings.Split(readFileOr(filepath.Join(dir, l.eventsFile)), "\n") {
			if v, ok := strings.CutPrefix(line, l.eventsKey+" "); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return 0
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
