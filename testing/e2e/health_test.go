package e2e

import (
	"archive/tar"
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

// waitHealth waits for a beat received after since whose payload passes
// ok, and returns it.
func waitHealth(t *testing.T, cp *controlplane.Server, since time.Time, what string, timeout time.Duration, ok func(protocol.NodePayload) bool) protocol.NodePayload {
	t.Helper()
	b, err := cp.WaitHeartbeat(ctxFor(t, timeout), func(b controlplane.Beat) bool { return b.At.After(since) && ok(b.Payload) })
	if err != nil {
		var last protocol.NodePayload
		if hb := cp.Heartbeats(); len(hb) > 0 {
			last = hb[len(hb)-1].Payload
		}
		t.Fatalf("no beat with %s: %v; last: last_error %q, %s %q, events %+v", what, err, last.LastError, last.OpenRestyStatus, last.OpenRestyMessage, last.HealthEvents)
	}
	return b.Payload
}

// reports says whether a beat names cause in last_error and in an
// unhealthy OpenResty health, and carries an event of typ naming it.
func reports(p protocol.NodePayload, typ, cause string) bool {
	return strings.Contains(p.LastError, cause) && p.OpenRestyStatus == protocol.StatusUnhealthy &&
		strings.Contains(p.OpenRestyMessage, cause) &&
		slices.ContainsFunc(p.HealthEvents, func(e protocol.HealthEvent) bool { return e.EventType == typ && strings.Contains(e.Message, cause) })
}

// allWell says whether a beat reports nothing wrong.
func allWell(p protocol.NodePayload) bool {
	return p.LastError == "" && p.OpenRestyStatus == protocol.StatusHealthy && len(p.HealthEvents) == 0
}

// A Pages project whose package the agent refuses is named, with the
// reason, in last_error and OpenResty's health until a good package
// deploys; then the node reports healthy again.
func TestPagesRefusalReportedUntilFixed(t *testing.T) {
	cp := controlPlane(t)
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "index.html", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"})
	tw.Close()
	cp.SetPagesPackage(3, tb.Bytes(), 1, 10)
	v1 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{{
		ID: 1, SiteName: "docs", Domains: []string{"pages.test"}, Pages: &controlplane.PagesDeployment{ProjectID: 3},
	}}})
	n := newNode(t, cp, nil)
	n.start()
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	p := waitHealth(t, cp, time.Time{}, "the refused package reported", 60*time.Second, func(p protocol.NodePayload) bool {
		return reports(p, protocol.EventPagesSyncError, "pages project 3")
	})
	if !strings.Contains(p.LastError, "symbolic link") {
		t.Fatalf("last_error does not say why: %q", p.LastError)
	}

	pkg, files, total := sitePackage(t, map[string]string{"index.html": "pages fixed"})
	fixed := time.Now()
	cp.SetPagesPackage(3, pkg, files, total)
	waitServes(t, "pages.test", "/", "pages fixed")
	waitHealth(t, cp, fixed, "the node healthy again", 60*time.Second, allWell)
}

// An IP group whose checksum does not verify is named in last_error and
// OpenResty's health while the node does not hold it; once the server
// ships it right, the retried sync lands it and the report clears.
func TestIPGroupChecksumReportedUntilFixed(t *testing.T) {
	cp := controlPlane(t)
	cp.SetIPGroup(protocol.WAFIPGroup{ID: 3, Name: "good", Type: "manual", Enabled: true, IPList: []string{"127.0.0.30"}})
	cp.SetIPGroup(protocol.WAFIPGroup{ID: 4, Name: "bad", Type: "manual", Enabled: true, IPList: []string{"127.0.0.40"}})
	cp.SetIPGroupChecksumOverride(4, strings.Repeat("0", 64))
	v1 := publish(t, cp, controlplane.Source{
		Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1"))},
		WAF:    &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), controlplane.IPMatchRuleGroup(2, "groups", 3, 4)}},
	})
	n := newNode(t, cp, nil)
	n.start()
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	p := waitHealth(t, cp, time.Time{}, "the rejected group reported", 60*time.Second, func(p protocol.NodePayload) bool {
		return reports(p, protocol.EventIPGroupSyncError, "IP group 4")
	})
	if !strings.Contains(p.LastError, "checksum") || strings.Contains(p.LastError, "IP group 3") {
		t.Fatalf("last_error %q: want group 4's checksum, not group 3", p.LastError)
	}

	fixed := time.Now()
	cp.SetIPGroupChecksumOverride(4, "")
	testsupport.WaitFor(t, 90*time.Second, "group 4 enforced", func() bool {
		return request("GET", "http", "app.test", "/", "127.0.0.40").status == 403
	})
	waitHealth(t, cp, fixed, "the node healthy again", 60*time.Second, allWell)
	if n.ipChecksum(4) == "" {
		t.Fatal("group 4 is enforced but not in the snapshot")
	}
}

// A restart_openresty_now that fails (the landed config no longer passes
// nginx -t, so nginx keeps its master) marks OpenResty unhealthy and names
// the failure in last_error, beat after beat, while the old master keeps
// serving; the next restart that succeeds clears it.
func TestFailedRestartReportedUntilRestarted(t *testing.T) {
	cp := controlPlane(t)
	n, _ := appV1(t, cp)
	nodeID := cp.Nodes()[0].NodeID
	master := n.nginxPID()
	main := n.data("etc", "nginx", "nginx.conf")
	good := testsupport.ReadFile(t, main)
	if err := os.WriteFile(main, []byte(good+"\nbroken"), 0o644); err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	cp.UpdateSettings(nodeID, func(s *protocol.AgentSettings) { s.RestartOpenRestyNow = true })
	failed := func(p protocol.NodePayload) bool {
		return reports(p, protocol.EventOpenRestyUnhealthy, "nginx restart failed")
	}
	waitHealth(t, cp, asked, "the failed restart reported", 60*time.Second, failed)
	// It stays: the beats after it (health checks that pass, up-to-date
	// syncs) do not wipe it.
	later := time.Now()
	for range 3 {
		p := waitHealth(t, cp, later, "a later beat", 30*time.Second, func(protocol.NodePayload) bool { return true })
		if !failed(p) {
			t.Fatalf("a later beat forgot the failed restart: last_error %q, %s", p.LastError, p.OpenRestyStatus)
		}
		later = time.Now()
	}
	if n.nginxPID() != master {
		t.Fatal("the refused restart replaced the master")
	}
	waitServes(t, "app.test", "/", "origin-ok v1")

	if err := os.WriteFile(main, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	fixed := time.Now()
	cp.UpdateSettings(nodeID, func(s *protocol.AgentSettings) { s.RestartOpenRestyNow = true })
	testsupport.WaitFor(t, 30*time.Second, "nginx to restart", func() bool { p := n.nginxPID(); return p != 0 && p != master })
	waitHealth(t, cp, fixed, "the node healthy again", 60*time.Second, allWell)
	waitServes(t, "app.test", "/", "origin-ok v1")
}

// An update the server asks for from its own update_repo (the stock
// Rain-kl/OpenFlare) while agent.json names another is reported as one
// info event naming both repositories and how to allow the server's, and
// it stays after the one-shot update_now until the server names another
// repository. It is no fault: last_error and OpenResty's health stay clean.
func TestForeignUpdateRepoReported(t *testing.T) {
	cp := controlPlane(t)
	n, _ := appV1(t, cp)
	nodeID := cp.Nodes()[0].NodeID
	asked := time.Now()
	cp.UpdateSettings(nodeID, func(s *protocol.AgentSettings) { s.UpdateNow = true })
	repoEvent := func(p protocol.NodePayload) bool {
		return slices.ContainsFunc(p.HealthEvents, func(e protocol.HealthEvent) bool {
			return e.EventType == protocol.EventAgentUpdateRepo && e.Severity == protocol.SeverityInfo &&
				strings.Contains(e.Message, "Rain-kl/OpenFlare") && strings.Contains(e.Message, "openflare/openflare-agent") &&
				strings.Contains(e.Message, "update_repo")
		})
	}
	p := waitHealth(t, cp, asked, "the foreign update_repo reported", 30*time.Second, repoEvent)
	if p.LastError != "" || p.OpenRestyStatus != protocol.StatusHealthy || len(p.HealthEvents) != 1 {
		t.Fatalf("an info event made the node look faulty: last_error %q, %s, events %+v", p.LastError, p.OpenRestyStatus, p.HealthEvents)
	}
	later := time.Now()
	if p := waitHealth(t, cp, later, "a later beat", 30*time.Second, func(protocol.NodePayload) bool { return true }); !repoEvent(p) {
		t.Fatalf("the refusal was reported for one beat only: %+v", p.HealthEvents)
	}
	n.waitLog("the server names another update_repo", 10*time.Second)

	renamed := time.Now()
	cp.UpdateSettings(nodeID, func(s *protocol.AgentSettings) { s.UpdateRepo = "openflare/openflare-agent" })
	waitHealth(t, cp, renamed, "the report cleared", 30*time.Second, allWell)
}
