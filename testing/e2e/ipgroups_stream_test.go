package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/benchkit"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

// millionGroup is group id of 1 000 000 entries as a subscription list
// holds them: IPv4 addresses, IPv4 networks and IPv6 networks, shuffled
// (not in the order the checksum sorts them), distinct, plus members:
// about 16 MiB of JSON, inside the server's 20 MiB snapshot limit.
func millionGroup(id uint64, seed uint64, members ...string) protocol.WAFIPGroup {
	rng := rand.New(rand.NewPCG(seed, 1))
	list := make([]string, 0, 1_000_000)
	for i := 0; len(list) < cap(list)-len(members); i++ {
		switch k := i / 4; i % 4 {
		case 0, 1: // every other address of 10.0.0.0/8 on: nothing merges
			a := 10<<24 + 2*(2*k+i%4)
			list = append(list, fmt.Sprintf("%d.%d.%d.%d", a>>24, a>>16&0xff, a>>8&0xff, a&0xff))
		case 2:
			list = append(list, fmt.Sprintf("%d.%d.%d.0/24", 100+k>>16, k>>8&0xff, k&0xff))
		case 3:
			list = append(list, fmt.Sprintf("2001:db8:%x:%x::/64", seed<<4|uint64(k>>16), k&0xffff))
		}
	}
	rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	list = append(list, members...)
	return protocol.WAFIPGroup{ID: id, Name: "million", Type: "subscription", Enabled: true, IPList: list}
}

// groupBytes is the length of g's JSON: what one transfer of it costs.
func groupBytes(g protocol.WAFIPGroup) int {
	b, _ := json.Marshal(g)
	return len(b)
}

// staleBeats counts the beats since since that reported another checksum
// for group id than want: the server answers each with the group again.
func staleBeats(cp *controlplane.Server, since int, id, want string) int {
	n := 0
	for _, b := range cp.Heartbeats()[since:] {
		if b.Payload.WAFIPGroupChecksums[id] != want {
			n++
		}
	}
	return n
}

// landed waits until the node holds g and every worker blocks from with
// 403, and returns how long each took since start (the server had stored
// the group: what follows is the transfer and the agent's work).
func landed(t *testing.T, n *node, g protocol.WAFIPGroup, from string, start time.Time) (toFile, toBlock time.Duration) {
	t.Helper()
	testsupport.WaitFor(t, 90*time.Second, fmt.Sprintf("the agent to land group %d", g.ID), func() bool { return n.ipChecksum(g.ID) == g.Checksum })
	toFile = time.Since(start)
	waitEveryWorker(t, 30*time.Second, n.nginxPID(), "mil.test", from, 403)
	return toFile, time.Since(start)
}

func peakRSS(t *testing.T, pid int, phase string) int64 {
	t.Helper()
	hwm := benchkit.StatusKiB(pid, "VmHWM:")
	t.Logf("%-44s VmHWM %5.1f MiB, VmRSS %5.1f MiB", phase, float64(hwm)/1024, float64(benchkit.StatusKiB(pid, "VmRSS:"))/1024)
	return hwm
}

// Over HTTP, with memory_limit 32 MiB: a 1 000 000-entry group pushed in a
// heartbeat reply lands and is enforced by every worker, and so does one
// that arrives by E6 after a publish; each is downloaded once (E6 asked
// once per version, no beat after the landing reporting the old
// checksum), and the agent's peak RSS stays within 48 MiB.
func TestLargeIPGroupOverHTTP(t *testing.T) {
	cp := controlPlane(t)
	small := cp.SetIPGroup(protocol.WAFIPGroup{ID: 9, Name: "million", Type: "subscription", Enabled: true, IPList: []string{"203.0.113.1"}})
	src := func(group uint64) controlplane.Source {
		return controlplane.Source{
			Routes: []controlplane.Route{proxyRoute(1, "mil.test", origin(t, "v1"))},
			WAF:    &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), controlplane.IPMatchRuleGroup(2, "million", group)}},
		}
	}
	v1 := publish(t, cp, src(9))
	n := newNode(t, cp, map[string]any{"memory_limit": "32MiB"})
	n.bin = plainAgentBinary(t)
	n.start()
	pid := n.cmd.Process.Pid
	oomKills := memoryCgroup(t, pid, 128<<20)
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	testsupport.WaitFor(t, 30*time.Second, "the small group 9", func() bool { return n.ipChecksum(9) == small.Checksum })
	waitServes(t, "mil.test", "/", "origin-ok v1")
	peakRSS(t, pid, "serving, group 9 small")

	// Pushed in a heartbeat reply (group 9 is held). Only beats the server
	// takes once SetIPGroup returned can be answered with the group (it
	// hashes the list first, for a second or so, then stores it).
	g9 := cp.SetIPGroup(millionGroup(9, 1, "127.0.0.60"))
	start := time.Now()
	beats := len(cp.Heartbeats())
	toFile, toBlock := landed(t, n, g9, "127.0.0.60", start)
	if r := request("GET", "http", "mil.test", "/", "127.0.0.61"); r.status != 200 {
		t.Fatalf("neighbour 127.0.0.61: %d %q", r.status, r.body)
	}
	// The beats that carried it: every one that reported the old checksum,
	// at most the one in flight as the group was stored. A few more beats
	// show it is not sent again.
	testsupport.WaitFor(t, 30*time.Second, "beats reporting group 9", func() bool {
		hb := cp.Heartbeats()
		return len(hb) > beats+5 && hb[len(hb)-1].Payload.WAFIPGroupChecksums["9"] == g9.Checksum
	})
	pushes := staleBeats(cp, beats, "9", g9.Checksum)
	hwm := peakRSS(t, pid, "1 000 000 entries pushed by heartbeat")
	t.Logf("heartbeat push: %d entries, %.1f MiB of JSON, in %d heartbeat reply(ies) after it was stored; stored → landed %v, → every worker blocking %v",
		len(g9.IPList), float64(groupBytes(g9))/(1<<20), pushes, toFile.Round(time.Millisecond), toBlock.Round(time.Millisecond))
	if pushes > 1 {
		t.Errorf("group 9 went out in %d heartbeat replies, want 1", pushes)
	}

	// By E6, after a publish that references another group instead.
	g10 := cp.SetIPGroup(millionGroup(10, 2, "127.0.0.62"))
	e6 := cp.Requests(protocol.PathIPGroupSync)
	beats = len(cp.Heartbeats())
	start = time.Now()
	v2 := publish(t, cp, src(10))
	waitApplyLog(t, cp, v2.Version, protocol.ResultSuccess)
	toFile, toBlock = landed(t, n, g10, "127.0.0.62", start)
	waitEveryWorker(t, 30*time.Second, n.nginxPID(), "mil.test", "127.0.0.60", 200)
	testsupport.WaitFor(t, 30*time.Second, "beats reporting group 10", func() bool {
		hb := cp.Heartbeats()
		return len(hb) > beats+5 && hb[len(hb)-1].Payload.WAFIPGroupChecksums["10"] == g10.Checksum
	})
	// Until E6 lands it, each reply re-sends the group the node lacks
	// (PROTOCOL 7.2: a push lands only held groups); those are read past.
	carried := staleBeats(cp, beats, "10", g10.Checksum)
	hwm = max(hwm, peakRSS(t, pid, "1 000 000 entries fetched by E6"))
	t.Logf("E6: %.1f MiB of JSON fetched %d time(s), %d heartbeat replies carried it meanwhile; publish → landed %v, → every worker blocking %v",
		float64(groupBytes(g10))/(1<<20), cp.Requests(protocol.PathIPGroupSync)-e6, carried, toFile.Round(time.Millisecond), toBlock.Round(time.Millisecond))
	if got := cp.Requests(protocol.PathIPGroupSync) - e6; got != 1 {
		t.Errorf("%d E6 calls for the new version, want 1", got)
	}
	if strings.Contains(n.logs.String(), "IP group rejected") {
		t.Errorf("a group was rejected:\n%s", n.tail())
	}
	if hwm > rssCeilingKiB {
		t.Errorf("peak RSS %.1f MiB, over %d MiB", float64(hwm)/1024, rssCeilingKiB>>10)
	}
	if k := oomKills(); k != 0 {
		t.Errorf("%d OOM kills in the agent's 128 MiB cgroup", k)
	}
}

// Over the WebSocket, with memory_limit 32 MiB: a 1 000 000-entry group
// pushed as one 16 MiB waf_ip_groups message lands and is enforced by
// every worker on the one session the test opens, which stays up (Force
// Sync still reaches the node); the push is not repeated (no status
// carried the old checksum afterwards, no E6 call), and the agent's peak
// RSS stays within 48 MiB.
func TestLargeIPGroupOverWebSocket(t *testing.T) {
	cp := wsControlPlane(t)
	small := cp.SetIPGroup(protocol.WAFIPGroup{ID: 9, Name: "million", Type: "subscription", Enabled: true, IPList: []string{"203.0.113.1"}})
	v1 := publish(t, cp, controlplane.Source{
		Routes: []controlplane.Route{proxyRoute(1, "mil.test", origin(t, "v1"))},
		WAF:    &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), controlplane.IPMatchRuleGroup(2, "million", 9)}},
	})
	n := newNode(t, cp, map[string]any{"memory_limit": "32MiB"})
	n.bin = plainAgentBinary(t)
	n.start()
	pid := n.cmd.Process.Pid
	oomKills := memoryCgroup(t, pid, 128<<20)
	nodeID := n.waitConnected()
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	testsupport.WaitFor(t, 30*time.Second, "the small group 9", func() bool { return n.ipChecksum(9) == small.Checksum })
	waitServes(t, "mil.test", "/", "origin-ok v1")
	peakRSS(t, pid, "serving, group 9 small")
	e6 := cp.Requests(protocol.PathIPGroupSync)

	g9 := cp.SetIPGroup(millionGroup(9, 3, "127.0.0.60"))
	start := time.Now()
	beats := len(cp.Heartbeats())
	toFile, toBlock := landed(t, n, g9, "127.0.0.60", start)
	if r := request("GET", "http", "mil.test", "/", "127.0.0.61"); r.status != 200 {
		t.Fatalf("neighbour 127.0.0.61: %d %q", r.status, r.body)
	}
	// The status right after the landing reports the new checksum.
	if _, err := cp.WaitHeartbeat(ctxFor(t, 30*time.Second), func(b controlplane.Beat) bool {
		return b.Channel == controlplane.ChannelWS && b.Payload.WAFIPGroupChecksums["9"] == g9.Checksum
	}); err != nil {
		t.Fatalf("no status with the new checksum: %v", err)
	}
	// No E6 fetched it; the forced sync's re-apply asks E6 again, and the
	// server answers that nothing changed.
	fetches := cp.Requests(protocol.PathIPGroupSync) - e6
	if err := cp.ForceSync(nodeID); err != nil {
		t.Fatalf("force sync: %v", err)
	}
	n.waitLog("the server asked for a forced sync", 30*time.Second)
	hwm := peakRSS(t, pid, "1 000 000 entries pushed by WebSocket")
	again := staleBeats(cp, beats, "9", g9.Checksum)
	t.Logf("WebSocket push: %d entries, %.1f MiB message, pushed %d time(s); stored and broadcast → landed %v, → every worker blocking %v",
		len(g9.IPList), float64(groupBytes(g9))/(1<<20), 1+again, toFile.Round(time.Millisecond), toBlock.Round(time.Millisecond))

	if got := cp.Requests(protocol.PathWebSocket); got != 1 || !cp.WSConnected(nodeID) {
		t.Errorf("%d WebSocket sessions (connected now: %v), want the one", got, cp.WSConnected(nodeID))
	}
	if strings.Contains(n.logs.String(), "websocket unavailable") {
		t.Errorf("the session dropped:\n%s", n.tail())
	}
	if again != 0 {
		t.Errorf("%d statuses still carried the old checksum: the server pushed the group again", again)
	}
	if fetches != 0 {
		t.Errorf("%d E6 calls for a pushed group", fetches)
	}
	if hwm > rssCeilingKiB {
		t.Errorf("peak RSS %.1f MiB, over %d MiB", float64(hwm)/1024, rssCeilingKiB>>10)
	}
	if k := oomKills(); k != 0 {
		t.Errorf("%d OOM kills in the agent's 128 MiB cgroup", k)
	}
}
