package e2e

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

// bigGroupWorkerRSSCeilingKiB is what each nginx worker may hold with a
// 1 000 000-entry group adopted. Decoding the JSON in every worker took
// 125-150 MB each; the compiled, mapped file leaves a worker near its idle
// size, which is what a 128 MiB router needs.
const bigGroupWorkerRSSCeilingKiB = 48 << 10

// workerMemory is one worker's /proc/<pid>/status memory lines, in KiB.
type workerMemory struct{ rss, anon, file, shmem int64 }

func readWorkerMemory(t *testing.T, pid int) workerMemory {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read worker %d status: %v", pid, err)
	}
	var m workerMemory
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "VmRSS":
			m.rss = n
		case "RssAnon":
			m.anon = n
		case "RssFile":
			m.file = n
		case "RssShmem":
			m.shmem = n
		}
	}
	return m
}

func (m workerMemory) String() string {
	mib := func(k int64) float64 { return float64(k) / 1024 }
	return fmt.Sprintf("VmRSS %.1f MiB (anon %.1f, file %.1f, shmem %.1f)", mib(m.rss), mib(m.anon), mib(m.file), mib(m.shmem))
}

// A 1 000 000-entry IP group, within the 20 MiB snapshot limit, pushed
// through the control plane: the member addresses get 403, the neighbour
// between them 200, nginx is not reloaded, and every worker stays small.
func TestIPGroupOneMillionEntries(t *testing.T) {
	cp := wsControlPlane(t)
	cp.SetIPGroup(protocol.WAFIPGroup{ID: 9, Name: "huge", Type: "manual", Enabled: true, IPList: []string{"203.0.113.1"}})
	v1 := publish(t, cp, controlplane.Source{
		Routes: []controlplane.Route{proxyRoute(1, "big.test", origin(t, "v1"))},
		WAF:    &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), controlplane.IPMatchRuleGroup(2, "huge", 9)}},
	})
	// Enough for the agent's own handling of a 15 MB group; the workers
	// are what this test measures.
	n := newNode(t, cp, map[string]any{"memory_limit": "192MiB"})
	// Without the race detector, the landing time is the real one (the
	// race build takes some 20 s over a million entries).
	n.bin = plainAgentBinary(t)
	n.start()
	n.waitConnected()
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	waitServes(t, "big.test", "/", "origin-ok v1")
	testsupport.WaitFor(t, 30*time.Second, "the snapshot to hold group 9", func() bool { return n.ipChecksum(9) != "" })
	master := n.nginxPID()
	workers := workerPIDs(master)
	before := make(map[int]workerMemory)
	for _, pid := range workers {
		before[pid] = readWorkerMemory(t, pid)
	}

	// Every other address of 10.0.0.0/8 onwards, so nothing merges: one
	// range per entry. The members sit on both sides of the neighbour.
	const members, neighbour = "127.0.0.10", "127.0.0.11"
	list := make([]string, 0, 1_000_000)
	for i := 0; len(list) < cap(list)-2; i++ {
		a := 10<<24 + 2*i
		list = append(list, fmt.Sprintf("%d.%d.%d.%d", a>>24, a>>16&0xff, a>>8&0xff, a&0xff))
	}
	list = append(list, members, "127.0.0.12")
	pushed := time.Now()
	g := cp.SetIPGroup(protocol.WAFIPGroup{ID: 9, Name: "huge", Type: "manual", Enabled: true, IPList: list})
	testsupport.WaitFor(t, 60*time.Second, "the agent to land the group", func() bool { return n.ipChecksum(9) == g.Checksum })
	landed := time.Since(pushed)
	testsupport.WaitFor(t, 10*time.Second, "nginx to block "+members, func() bool {
		return request("GET", "http", "big.test", "/", members).status == 403
	})
	firstBlock := time.Since(pushed)
	waitEveryWorker(t, 10*time.Second, master, "big.test", members, 403)
	t.Logf("1 000 000-entry group: pushed → landed %v, → first 403 %v, → every worker %v",
		landed.Round(time.Millisecond), firstBlock.Round(time.Millisecond), time.Since(pushed).Round(time.Millisecond))

	for _, from := range []string{members, "127.0.0.12"} {
		if r := request("GET", "http", "big.test", "/", from); r.status != 403 {
			t.Errorf("member %s: %d %q", from, r.status, r.body)
		}
	}
	for range 2 * len(workers) {
		if r := request("GET", "http", "big.test", "/", neighbour); r.status != 200 || !strings.HasPrefix(r.body, "origin-ok v1") {
			t.Fatalf("neighbour %s: %d %q", neighbour, r.status, r.body)
		}
	}
	if got := workerPIDs(n.nginxPID()); n.nginxPID() != master || !slices.Equal(got, workers) {
		t.Fatalf("nginx reloaded: master %d→%d workers %v→%v", master, n.nginxPID(), workers, got)
	}

	for _, pid := range workers {
		after := readWorkerMemory(t, pid)
		t.Logf("worker %d: before %v; with the group %v; growth %.1f MiB", pid, before[pid], after, float64(after.rss-before[pid].rss)/1024)
		if after.rss > bigGroupWorkerRSSCeilingKiB {
			t.Errorf("worker %d holds %.1f MiB with the group, want under %d MiB", pid, float64(after.rss)/1024, bigGroupWorkerRSSCeilingKiB>>10)
		}
	}
	if info, err := os.Stat(n.data("etc", "openflare", "waf_ip_groups.bin")); err != nil {
		t.Errorf("compiled snapshot: %v", err)
	} else {
		t.Logf("compiled snapshot: %.1f MiB beside %.1f MiB of JSON", float64(info.Size())/(1<<20), float64(len(readFileOr(n.data("etc", "openflare", "waf_ip_groups.json"))))/(1<<20))
	}
}
