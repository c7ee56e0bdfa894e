package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The token lands, discovery_token is cleared, and every other byte of the
// operator's file (key order, spacing, defaults left out) stays as written.
func TestPersistTokenKeepsTheRestOfTheFile(t *testing.T) {
	orig := "{\n    \"server_url\": \"http://cp.example:8080\",\n    \"discovery_token\":   \"disc-0123456789\",\n    \"agent_token\": \"\",\n    \"heartbeat_interval\": \"30s\",\n    \"x_operator_note\": {\"k\": [1, 2]}\n}\n"
	path := writeConfig(t, orig)
	if err := PersistToken(path, "node-token-abc"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := strings.Replace(strings.Replace(orig, `"disc-0123456789"`, `""`, 1), `"agent_token": ""`, `"agent_token": "node-token-abc"`, 1)
	if string(got) != want {
		t.Fatalf("file after persist:\n%s\nwant:\n%s", got, want)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", info.Mode().Perm())
	}
	c, _, err := Load(path, noEnv)
	if err != nil || c.AgentToken != "node-token-abc" || c.DiscoveryToken != "" {
		t.Fatalf("reload: %v %+v", err, c)
	}
}

func TestPersistTokenInsertsMissingKey(t *testing.T) {
	for _, orig := range []string{
		"{\n  \"server_url\": \"http://h\",\n  \"discovery_token\": \"d\"\n}\n",
		"{\"server_url\":\"http://h\",\"discovery_token\":\"d\"}",
		"{}",
	} {
		path := writeConfig(t, orig)
		if err := PersistToken(path, "tok\"with\\quote"); err != nil {
			t.Fatalf("%q: %v", orig, err)
		}
		data, _ := os.ReadFile(path)
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("%q → invalid JSON %q", orig, data)
		}
		if m["agent_token"] != "tok\"with\\quote" {
			t.Fatalf("%q → %s", orig, data)
		}
		if d, ok := m["discovery_token"]; ok && d != "" {
			t.Fatalf("discovery not cleared: %s", data)
		}
		if strings.HasPrefix(orig, "{\n  ") && !strings.HasPrefix(string(data), "{\n  \"agent_token\": ") {
			t.Fatalf("indentation not followed: %s", data)
		}
	}
}

func TestPersistTokenCreatesFileForEnvOnlyConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etc", "agent.json")
	if err := PersistToken(path, "tok"); err != nil {
		t.Fatal(err)
	}
	c, _, err := Load(path, envOf(map[string]string{"OPENFLARE_SERVER_URL": "http://h", "OPENFLARE_DISCOVERY_TOKEN": "d"}))
	if err != nil || c.AgentToken != "tok" {
		t.Fatalf("%v %+v", err, c)
	}
}

func TestPersistTokenRefusesBrokenFile(t *testing.T) {
	orig := `{"server_url": "http://h",`
	path := writeConfig(t, orig)
	if err := PersistToken(path, "tok"); err == nil {
		t.Fatal("no error on broken agent.json")
	}
	if data, _ := os.ReadFile(path); string(data) != orig {
		t.Fatalf("broken file modified: %q", data)
	}
}
