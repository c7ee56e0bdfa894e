package command

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"openflare/agent/config"
	"openflare/agent/protocol"
	"openflare/agent/state"
)

// nodeConfig writes an agent.json for a node laid out under a temporary
// directory, with keyValues over the defaults, and returns its path.
func nodeConfig(t *testing.T, keyValues ...string) string {
	t.Helper()
	dir := t.TempDir()
	keys := map[string]string{
		"server_url": "https://openflare.example.com", "agent_token": "0123456789abcdef0123456789abcdef",
		"data_dir": filepath.Join(dir, "data"), "openresty_path": filepath.Join(dir, "no-nginx"),
	}
	for i := 0; i+1 < len(keyValues); i += 2 {
		keys[keyValues[i]] = keyValues[i+1]
	}
	b, _ := json.Marshal(keys)
	path := filepath.Join(dir, "agent.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// command runs one with -config path and returns its exit code and output.
func command(f func(string, []string, *bytes.Buffer, *bytes.Buffer) int, path string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := f(path, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func status(path string, args []string, stdout, stderr *bytes.Buffer) int {
	return Status(path, args, stdout, stderr)
}

func check(path string, args []string, stdout, stderr *bytes.Buffer) int {
	return Check(path, args, stdout, stderr)
}

// A flag the commands do not know is a usage error, 64 (the unit does not
// restart the agent for it); an agent.json that does not load is 1.
func TestCommandsUsageAndLoadErrors(t *testing.T) {
	path := nodeConfig(t)
	for name, f := range map[string]func(string, []string, *bytes.Buffer, *bytes.Buffer) int{"status": status, "check": check} {
		if code, _, stderr := command(f, path, "-bogus"); code != ExitUsage || !strings.Contains(stderr, "bogus") {
			t.Errorf("%s -bogus: exit %d, want %d:\n%s", name, code, ExitUsage, stderr)
		}
		missing := filepath.Join(t.TempDir(), "agent.json")
		if code, _, stderr := command(f, path, "-config", missing); code != 1 || !strings.Contains(stderr, "error:") {
			t.Errorf("%s of a missing agent.json: exit %d, want 1:\n%s", name, code, stderr)
		}
	}
}

// status tells the node's state from its files alone: the applied and
// blocked versions, the last error, nginx not running, the self-test,
// the last heartbeat and its channel, the IP groups and Pages releases.
func TestStatusDescribesTheNode(t *testing.T) {
	path := nodeConfig(t)
	cfg, _, err := config.Load(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := command(status, path)
	if code != 0 {
		t.Fatalf("status of a fresh node: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"applied version:   none", "blocked version:   none", "last heartbeat:    never", "ip groups:         none", "pages releases:    none", "nginx:             not running"} {
		if !strings.Contains(out, want) {
			t.Errorf("fresh node: no %q in\n%s", want, out)
		}
	}

	st, err := state.Open(cfg.StatePath, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	beat := time.Date(2026, 7, 18, 10, 0, 0, 0, time.UTC)
	err = st.Update(func(s *state.State) {
		s.Current = protocol.ConfigRef{Version: "20260718-001", Checksum: "c1"}
		s.Blocked, s.BlockedReason = protocol.ConfigRef{Version: "20260718-002", Checksum: "c2"}, "nginx -t failed"
		s.LastError = "apply 20260718-002: nginx -t failed"
		s.OpenRestyStatus, s.OpenRestyMessage = protocol.StatusUnhealthy, "unreachable"
		s.SelfTestError = "self-probe: no answer"
		s.LastHeartbeatUnix, s.Channel = beat.Unix(), "websocket"
	})
	if err != nil {
		t.Fatal(err)
	}
	release := filepath.Join(cfg.PagesDir, "projects", "7", "releases", "r-abc")
	if err := os.MkdirAll(release, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(release, filepath.Join(cfg.PagesDir, "projects", "7", "current")); err != nil {
		t.Fatal(err)
	}
	out = describe(cfg, beat.Add(90*time.Second))
	for _, want := range []string{
		"applied version:   20260718-001 (checksum c1)",
		"blocked version:   20260718-002 (checksum c2): nginx -t failed",
		"last error:        apply 20260718-002: nginx -t failed",
		"last health unhealthy: unreachable",
		"self-test:         FAILED: self-probe: no answer",
		"last heartbeat:    2026-07-18T10:00:00Z (1m30s ago) over WebSocket",
		"pages releases:    project 7: r-abc",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// check shows the resolved configuration, tokens masked, and fails when
// the nginx binary is missing; with the system's nginx it reports what it
// found and that no config has landed yet.
func TestCheck(t *testing.T) {
	path := nodeConfig(t)
	code, out, stderr := command(check, path)
	if code != 1 || !strings.Contains(out, "configuration ("+path+")") || !strings.Contains(stderr, "error:") {
		t.Errorf("check without nginx: exit %d\n%s\n%s", code, out, stderr)
	}
	if strings.Contains(out+stderr, "0123456789abcdef0123456789abcdef") {
		t.Errorf("check printed the token:\n%s", out)
	}
	bin, err := exec.LookPath("nginx")
	if err != nil {
		bin = "/usr/sbin/nginx"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skip("no nginx binary here")
	}
	code, out, stderr = command(check, nodeConfig(t, "openresty_path", bin))
	if !strings.Contains(out, "nginx: ") || !strings.Contains(out, "nginx workers: ") {
		t.Errorf("check with %s: exit %d, no nginx report\n%s\n%s", bin, code, out, stderr)
	}
	if code == 0 && !strings.Contains(out, "landed config: none yet") {
		t.Errorf("check with %s passed without saying no config landed:\n%s", bin, out)
	}
}
