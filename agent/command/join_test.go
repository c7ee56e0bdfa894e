package command

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"openflare/agent/config"
)

const joinToken = "disc-tok-3f9a1c77e2"

// join runs the command on path with the given environment and returns
// its exit code and combined output, failing if the token was printed.
func join(t *testing.T, path string, env map[string]string, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := Join(path, args, func(k string) string { return env[k] }, &out, &out)
	if strings.Contains(out.String(), joinToken) {
		t.Fatalf("join printed the token:\n%s", out.String())
	}
	return code, out.String()
}

// What a package's postinst writes: join adds the server and the token,
// keeps every key and their order, writes 0600, and the agent loads it.
func TestJoinKeepsThePackagesKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.json")
	pkg := "{\n  \"data_dir\": \"/var/lib/openflare\",\n  \"openresty_path\": \"/usr/sbin/nginx\",\n  \"nginx_user\": \"openflare-www:openflare-www\",\n  \"allowed_paths\": [\"/srv/www\"]\n}\n"
	if err := os.WriteFile(path, []byte(pkg), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := join(t, path, nil, "https://openflare.example.com", joinToken)
	if code != 0 {
		t.Fatalf("join: exit %d\n%s", code, out)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("agent.json mode %v (%v), want 0600", fi.Mode(), err)
	}
	b, _ := os.ReadFile(path)
	var keys []string
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.Token()
	for dec.More() {
		k, _ := dec.Token()
		keys = append(keys, k.(string))
		var skip json.RawMessage
		dec.Decode(&skip)
	}
	if got := strings.Join(keys, " "); got != "data_dir openresty_path nginx_user allowed_paths server_url discovery_token" {
		t.Errorf("keys in order: %s\n%s", got, b)
	}
	cfg, _, err := config.Load(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ServerURL != "https://openflare.example.com" || cfg.DiscoveryToken != joinToken || cfg.NginxUser != "openflare-www:openflare-www" || cfg.DataDir != "/var/lib/openflare" || len(cfg.AllowedPaths) != 1 {
		t.Errorf("loaded %+v", cfg)
	}
	// Not the service's agent.json: nothing is restarted, the output says
	// how to start the agent.
	if !strings.Contains(out, "start the agent: openflare-agent -config "+path) {
		t.Errorf("output: %s", out)
	}
	// Joining again before registration replaces the server and token.
	if code, out := join(t, path, nil, "https://other.example.com", joinToken+"2"); code != 0 {
		t.Fatalf("second join: exit %d\n%s", code, out)
	}
	cfg, _, _ = config.Load(path, func(string) string { return "" })
	if cfg.ServerURL != "https://other.example.com" || cfg.DiscoveryToken != joinToken+"2" {
		t.Errorf("after the second join: server %q", cfg.ServerURL)
	}
}

// The token may come from the environment, kept out of the process list;
// a missing file is created.
func TestJoinTokenFromEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etc", "agent.json")
	code, out := join(t, path, map[string]string{"OPENFLARE_DISCOVERY_TOKEN": joinToken}, "http://127.0.0.1:9080")
	if code != 0 {
		t.Fatalf("join: exit %d\n%s", code, out)
	}
	cfg, _, err := config.Load(path, func(string) string { return "" })
	if err != nil || cfg.DiscoveryToken != joinToken {
		t.Fatalf("loaded %v, %v", cfg, err)
	}
}

// Refusals leave agent.json byte for byte as it was: a registered node,
// a URL the agent would reject, a file that is not JSON; usage errors
// exit 64.
func TestJoinRefusals(t *testing.T) {
	registered := "{\"server_url\": \"https://a.example.com\", \"agent_token\": \"node-tok-1\"}\n"
	cases := []struct {
		name, content string
		env           map[string]string
		args          []string
		code          int
		want          string
	}{
		{"registered", registered, nil, []string{"https://b.example.com", joinToken}, 1, "registered already"},
		{"bad url", "{}\n", nil, []string{"ftp://b.example.com", joinToken}, 1, "left unchanged"},
		{"credentials in url", "{}\n", nil, []string{"https://user:" + joinToken + "@b.example.com", "x"}, 1, "left unchanged"},
		{"not json", "not json\n", nil, []string{"https://b.example.com", joinToken}, 1, "not a JSON object"},
		{"no token", "{}\n", nil, []string{"https://b.example.com"}, ExitUsage, "no discovery token"},
		{"no url", "{}\n", nil, nil, ExitUsage, "usage"},
		{"too many", "{}\n", nil, []string{"a", "b", "c"}, ExitUsage, "usage"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agent.json")
			if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out := join(t, path, c.env, c.args...)
			if code != c.code || !strings.Contains(out, c.want) {
				t.Errorf("exit %d, want %d with %q:\n%s", code, c.code, c.want, out)
			}
			if b, _ := os.ReadFile(path); string(b) != c.content {
				t.Errorf("agent.json changed:\n%s", b)
			}
			if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
				t.Errorf("left %d files in the directory", len(entries))
			}
		})
	}
}
