package e2e

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/agent/testhook"
	"openflare/testing/controlplane"
	"openflare/testing/releaseserver"
	"openflare/testing/testsupport"
)

// updateVersions are the agent builds the self-update test installs: the
// one it starts with, the release it updates to, one that never reaches a
// heartbeat, and one that crashes at every start (crashingVersion).
var updateVersions = []string{"1.0.0", "1.1.0", "1.2.0", crashingVersion}

// crashingVersion dies at its crash point "start-<version>" right after
// main counted its start.
const crashingVersion = "1.3.0"

var updateBuilds struct {
	once gosync.Once
	bins map[string][]byte
	err  error
}

// versionedAgents builds the agent once per version stamped in
// main.version (as `make build` links it, with the crash points), and
// returns each binary's bytes: a release asset, or the binary a node
// starts from.
func versionedAgents(t *testing.T) map[string][]byte {
	t.Helper()
	updateBuilds.once.Do(func() {
		dir, err := os.MkdirTemp("", "openflare-update-bin-")
		if err != nil {
			updateBuilds.err = err
			return
		}
		defer os.RemoveAll(dir)
		updateBuilds.bins = map[string][]byte{}
		for _, v := range updateVersions {
			out := filepath.Join(dir, v)
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+v,
				"-tags", "testhooks nethttpomithttp2", "-o", out, ".")
			cmd.Dir = testsupport.ModuleRoot(t)
			if b, err := cmd.CombinedOutput(); err != nil {
				updateBuilds.err = fmt.Errorf("build agent %s: %v\n%s", v, err, b)
				return
			}
			if updateBuilds.bins[v], err = os.ReadFile(out); err != nil {
				updateBuilds.err = err
				return
			}
		}
	})
	if updateBuilds.err != nil {
		t.Fatal(updateBuilds.err)
	}
	return updateBuilds.bins
}

// One agent, started at 1.0.0, goes through every case in turn: the bad
// releases are refused with the binary byte-identical and the agent still
// beating; a binary that exits at once fails its trial and is reported; a
// good release is fetched, verified, swapped in and executed and beats
// with its new version; and a release that cannot reach the server within
// the confirm timeout is rolled back to the binary before it, which
// beats again and reports the failure.
func TestUpdateEndToEnd(t *testing.T) {
	bins := versionedAgents(t)
	cp := controlPlane(t)
	rs := releaseserver.Start("openflare/openflare-agent")
	t.Cleanup(rs.Close)
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t, cp, map[string]any{
		"update_api_url":    rs.URL(),
		"update_public_key": base64.StdEncoding.EncodeToString(pub),
		// Long enough for a good binary's first beat on a busy machine,
		// short enough to wait out once.
		"update_confirm_timeout": "8s",
	})
	exe := filepath.Join(n.dir, "bin", "openflare-agent")
	if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, bins["1.0.0"], 0o755); err != nil {
		t.Fatal(err)
	}
	n.bin = exe
	// Inherited across every re-exec; only crashingVersion has this crash
	// point.
	crashEnv := testhook.CrashEnv + "=start-" + crashingVersion
	n.start(crashEnv)
	nodeID := waitBeat(t, cp, time.Time{}, "1.0.0", "").NodeID
	pid := n.cmd.Process.Pid

	// updateNow publishes rel, asks for an update and waits for the log
	// line that ends it.
	updateNow := func(rel releaseserver.Release, want string) time.Time {
		t.Helper()
		rs.Set(rel)
		from := len(n.logs.String())
		at := time.Now()
		cp.UpdateSettings(nodeID, func(s *protocol.AgentSettings) { s.UpdateNow = true })
		testsupport.WaitFor(t, 30*time.Second, "agent log line "+want, func() bool { return strings.Contains(n.logs.String()[from:], want) })
		return at
	}
	unchanged := func(want []byte, version string, at time.Time) {
		t.Helper()
		if b, _ := os.ReadFile(exe); !bytes.Equal(b, want) {
			t.Fatalf("the agent binary changed")
		}
		for _, leftover := range []string{exe + ".update", exe + ".bak"} {
			if _, err := os.Stat(leftover); err == nil {
				t.Errorf("%s left behind", leftover)
			}
		}
		waitBeat(t, cp, at, version, "")
	}

	exitsAtOnce := []byte("#!/bin/sh\nexit 1\n")
	refusals := []struct {
		name string
		rel  releaseserver.Release
		want string
	}{
		{"wrong digest", releaseserver.Release{Tag: "v1.1.0", Binary: bins["1.1.0"], Key: key, Fault: releaseserver.WrongDigest}, "SHA-256 mismatch"},
		{"bad signature", releaseserver.Release{Tag: "v1.1.0", Binary: bins["1.1.0"], Key: key, Fault: releaseserver.BadSignature, DigestFile: true}, "signature does not match"},
		{"truncated download", releaseserver.Release{Tag: "v1.1.0", Binary: bins["1.1.0"], Key: key, Fault: releaseserver.Truncated}, "truncated"},
		{"no digest", releaseserver.Release{Tag: "v1.1.0", Binary: bins["1.1.0"], Key: key, Fault: releaseserver.NoDigest}, "no SHA-256 digest available"},
		{"downgrade", releaseserver.Release{Tag: "v0.9.0", Binary: bins["1.0.0"], Key: key}, "no downgrades"},
		{"exits at once", releaseserver.Release{Tag: "v1.0.5", Binary: exitsAtOnce, Key: key}, "trial run of v1.0.5 -version failed"},
	}
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			at := updateNow(c.rel, "self-update refused")
			if !strings.Contains(n.logs.String(), c.want) {
				t.Fatalf("the refusal does not say %q\n%s", c.want, n.tail())
			}
			unchanged(bins["1.0.0"], "1.0.0", at)
		})
	}
	// The server's update_repo (Rain-kl/OpenFlare) was not agent.json's:
	// every release above came from agent.json's repository.
	if !strings.Contains(n.logs.String(), "the server names another update_repo") {
		t.Error("the ignored server update_repo is not logged")
	}
	// The binary that exited at once is reported, and the agent that
	// stayed keeps running.
	waitBeat(t, cp, time.Time{}, "1.0.0", "v1.0.5")

	t.Run("update", func(t *testing.T) {
		at := updateNow(releaseserver.Release{Tag: "v1.1.0", Binary: bins["1.1.0"], Key: key}, "executing the new binary")
		waitBeat(t, cp, at, "1.1.0", "")
		testsupport.WaitFor(t, 10*time.Second, "the backup removed by the confirmation", func() bool {
			_, err := os.Stat(exe + ".bak")
			return err != nil
		})
		if b, _ := os.ReadFile(exe); !bytes.Equal(b, bins["1.1.0"]) {
			t.Fatal("the new binary is not in place")
		}
		// The state that counted the new binary's starts lives beside it.
		if _, err := os.Stat(exe + ".update.json"); err != nil {
			t.Errorf("no update state beside the binary: %v", err)
		}
		if n.cmd.Process.Pid != pid || isClosed(n.exited) {
			t.Fatal("the agent process did not re-execute in place")
		}
	})
	if t.Failed() {
		return
	}

	t.Run("no heartbeat rolls back", func(t *testing.T) {
		// The server goes away as the release downloads: the new binary
		// starts but never reaches it.
		rs.OnAsset(func(string) { cp.SetDown(true) })
		updateNow(releaseserver.Release{Tag: "v1.2.0", Binary: bins["1.2.0"], Key: key}, "executing the new binary")
		n.waitLog("self-update rolled back to the previous binary", 30*time.Second)
		rs.OnAsset(nil)
		if err := cp.SetDown(false); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(exe); !bytes.Equal(b, bins["1.1.0"]) {
			t.Fatal("the previous binary is not back")
		}
		b := waitBeat(t, cp, time.Time{}, "1.1.0", "v1.2.0")
		t.Logf("reported: %+v", b.Payload.HealthEvents)
		if n.cmd.Process.Pid != pid || isClosed(n.exited) {
			t.Fatal("the agent process did not re-execute in place")
		}
	})
	if t.Failed() {
		return
	}

	t.Run("crash at every start rolls back", func(t *testing.T) {
		tag := "v" + crashingVersion
		from := len(n.logs.String())
		at := updateNow(releaseserver.Release{Tag: tag, Binary: bins[crashingVersion], Key: key}, "executing the new binary")
		// The supervisor's part (systemd's Restart=, procd's respawn):
		// the dead agent is started again. The new binary's first two
		// starts die; the third start of it restores the previous one.
		for i := 0; i < 2; i++ {
			n.waitCrash(30 * time.Second)
			n.start(crashEnv)
		}
		testsupport.WaitFor(t, 30*time.Second, "the rollback after two crashed starts", func() bool {
			return strings.Contains(n.logs.String()[from:], "crashed on start 2 times")
		})
		if b, _ := os.ReadFile(exe); !bytes.Equal(b, bins["1.1.0"]) {
			t.Fatal("the previous binary is not back")
		}
		waitBeat(t, cp, at, "1.1.0", tag)
		// Not tried again: a version that crashed is remembered as failed.
		from = len(n.logs.String())
		updateNow(releaseserver.Release{Tag: tag, Binary: bins[crashingVersion], Key: key}, "self-update refused")
		if !strings.Contains(n.logs.String()[from:], "is not tried again") {
			t.Errorf("the refusal does not say the version failed before\n%s", n.tail())
		}
		if b, _ := os.ReadFile(exe); !bytes.Equal(b, bins["1.1.0"]) || isClosed(n.exited) {
			t.Fatal("the crashing version was installed again")
		}
	})
}

// waitBeat waits for a heartbeat after at from the given agent version;
// with failed set, one reporting the update to that version as failed.
func waitBeat(t *testing.T, cp *controlplane.Server, at time.Time, version, failed string) controlplane.Beat {
	t.Helper()
	b, err := cp.WaitHeartbeat(ctxFor(t, 30*time.Second), func(b controlplane.Beat) bool {
		if b.At.Before(at) || b.Payload.Version != version {
			return false
		}
		return failed == "" || slices.ContainsFunc(b.Payload.HealthEvents, func(e protocol.HealthEvent) bool {
			return e.EventType == "agent_update_failed" && e.Metadata["version"] == failed
		})
	})
	if err != nil {
		t.Fatalf("no heartbeat from version %s (failed update %q) after %v: %v", version, failed, at.Format(time.StampMilli), err)
	}
	return b
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Self-update with the agent as a service user (CAP_NET_BIND_SERVICE
// only, the binary in a directory it owns): the new binary is swapped in
// and re-executed keeping the user and the capability (an ambient one,
// as systemd's AmbientCapabilities gives), and applies the next version.
func TestUpdateAsServiceUser(t *testing.T) {
	needRealRoot(t)
	bins := versionedAgents(t)
	cp := controlPlane(t)
	rs := releaseserver.Start("openflare/openflare-agent")
	t.Cleanup(rs.Close)
	src := controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1"))}}
	v1 := publish(t, cp, src)
	n := serviceUserNode(t, cp, map[string]any{"update_api_url": rs.URL()})
	exe := filepath.Join(n.dir, "bin", "openflare-agent")
	if err := os.Mkdir(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, bins["1.0.0"], 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Dir(exe), exe} {
		if err := os.Chown(p, serviceUID, serviceUID); err != nil {
			t.Fatal(err)
		}
	}
	n.bin = exe
	n.start()
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	nodeID := waitBeat(t, cp, time.Time{}, "1.0.0", "").NodeID

	rs.Set(releaseserver.Release{Tag: "v1.1.0", Binary: bins["1.1.0"]})
	at := time.Now()
	cp.UpdateSettings(nodeID, func(s *protocol.AgentSettings) { s.UpdateNow = true })
	waitBeat(t, cp, at, "1.1.0", "")
	if b, _ := os.ReadFile(exe); !bytes.Equal(b, bins["1.1.0"]) {
		t.Fatal("the new binary is not in place")
	}
	if uid, caps := procIDs(t, n.cmd.Process.Pid); uid != serviceUID || caps != "0000000000000400" {
		t.Fatalf("after the update the agent runs as uid %d with CapEff %s; want %d with cap_net_bind_service only", uid, caps, serviceUID)
	}
	src.Routes[0] = proxyRoute(1, "app.test", origin(t, "v2"))
	v2 := publish(t, cp, src)
	waitApplyLog(t, cp, v2.Version, protocol.ResultSuccess)
	waitServes(t, "app.test", "/", "origin-ok v2")
}
