package command

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// vectorB is test vector B of PROTOCOL 4.3 and its checksum.
const (
	vectorB         = `{"routes":[{"id":7,"site_name":"demo","domains":["demo.example.com"],"origin_url":"http://10.0.0.5:8080","upstreams":["http://10.0.0.5:8080"],"enabled":true,"enable_https":false,"redirect_http":false,"cache_enabled":false,"upstream_type":"direct"}],"openresty_config":{"worker_processes":"auto","websocket_enabled":true,"main_config_template":"workers {{OpenRestyWorkerProcesses}};\ninclude {{OpenRestyRouteConfigInclude}};\n","origin_error_page_enabled":false},"waf":{"rule_groups":[],"bindings":[{"route_id":7,"site_name":"demo","rule_group_ids":[]}]}}`
	vectorBChecksum = "a852b4f14bda0fa0bbab4b0a809f02f5347f80d4e138a2ede4d0eb8c32e8ca47"
)

func runRender(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Render(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// An E4 reply, whole envelope or its data, renders into the directory with
// placeholders intact and the support files under files/, and the
// checksum is compared with the server's.
func TestRenderWritesTheFiles(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, checksum, want string
		envelope             bool
	}{
		{"envelope", vectorBChecksum, "checksum matches: " + vectorBChecksum, true},
		{"data", strings.Repeat("0", 64), "checksum MISMATCH: rendered " + vectorBChecksum, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var reply any = map[string]string{"version": "20260101-001", "checksum": c.checksum, "source_config_json": vectorB}
			if c.envelope {
				reply = map[string]any{"error_msg": "", "data": reply}
			}
			b, _ := json.Marshal(reply)
			snapshot := filepath.Join(dir, c.name+".json")
			if err := os.WriteFile(snapshot, b, 0o600); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, c.name)
			code, stdout, stderr := runRender("-snapshot", snapshot, "-out", out)
			if code != 0 || !strings.Contains(stdout, c.want) {
				t.Fatalf("exit %d, want %q:\n%s%s", code, c.want, stdout, stderr)
			}
			main, err := os.ReadFile(filepath.Join(out, "nginx.conf"))
			if err != nil || string(main) != "workers auto;\ninclude __OPENFLARE_ROUTE_CONFIG__;\n" {
				t.Errorf("nginx.conf %q (%v)", main, err)
			}
			if _, err := os.Stat(filepath.Join(out, "files", "waf_config.json")); err != nil {
				t.Errorf("support file: %v", err)
			}
		})
	}
}

// Usage errors exit 64, a snapshot that is not an E4 reply 1.
func TestRenderRefusals(t *testing.T) {
	dir := t.TempDir()
	notE4 := filepath.Join(dir, "not.json")
	os.WriteFile(notE4, []byte("[1,2]"), 0o600)
	empty := filepath.Join(dir, "empty.json")
	os.WriteFile(empty, []byte(`{"version":"v"}`), 0o600)
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"version":"v","source_config_json":"{\"routes\":[{}]}"}`), 0o600)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, ExitUsage, "usage"},
		{[]string{"-bogus"}, ExitUsage, "bogus"},
		{[]string{"-snapshot", filepath.Join(dir, "missing.json"), "-out", dir}, 1, "no such file"},
		{[]string{"-snapshot", notE4, "-out", dir}, 1, "not an E4 reply"},
		{[]string{"-snapshot", empty, "-out", dir}, 1, "no source_config_json"},
		{[]string{"-snapshot", bad, "-out", dir}, 1, "render version v"},
	} {
		if code, _, stderr := runRender(c.args...); code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("render %q: exit %d, want %d with %q:\n%s", c.args, code, c.code, c.want, stderr)
		}
	}
}
