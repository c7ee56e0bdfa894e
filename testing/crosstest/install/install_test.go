package install

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"openflare/agent/config"
	"openflare/agent/landing"
	"openflare/agent/osuser"
	"openflare/testing/testsupport"
)

// The tools install.sh may use. PATH holds only these, so neither systemctl
// nor useradd is found, and a tool the script starts to need shows up here.
var installTools = []string{"sh", "awk", "cat", "chmod", "chown", "cmp", "cp", "dirname", "find", "id", "ln", "mkdir", "mv", "readlink", "rm", "sed", "sha256sum", "sleep", "tail", "tr"}

// Tokens with characters JSON must escape; neither form may ever be printed.
const (
	discoveryToken = `disc-7f3a9c"quote\back	tab`
	agentToken     = "node-tok-51be07d2c4a8e6f1"
	newAgentToken  = "node-tok-rotated-9e8d7c6b5a41"
)

// userland is a shell plus tools: the host's (dash on Debian), or BusyBox
// alone, as on OpenWrt.
type userland struct {
	name  string
	tools func(t *testing.T) string // a directory for PATH
}

var userlands = []userland{
	{"host", func(t *testing.T) string {
		dir := t.TempDir()
		for _, tool := range installTools {
			p, err := exec.LookPath(tool)
			if err != nil {
				t.Fatalf("%s not found: %v", tool, err)
			}
			if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}},
	{"busybox", func(t *testing.T) string {
		bb, err := exec.LookPath("busybox")
		if err != nil {
			t.Skip("busybox not installed (Debian package busybox): the OpenWrt-like userland is not tested")
		}
		dir := t.TempDir()
		for _, tool := range installTools {
			if err := os.Symlink(bb, filepath.Join(dir, tool)); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}},
}

// installer runs cross/install.sh with one userland.
type installer struct {
	t      *testing.T
	tools  string
	script string
	binary string // a fake agent binary with a matching .sha256 beside it
}

func newInstaller(t *testing.T, ul userland) *installer {
	t.Helper()
	in := &installer{t: t, tools: ul.tools(t), script: filepath.Join(testsupport.ModuleRoot(t), "cross", "install.sh")}
	dir := t.TempDir()
	in.binary = filepath.Join(dir, "openflare-agent-linux-arm64")
	content := []byte("#!/bin/sh\necho fake openflare-agent\n")
	if err := os.WriteFile(in.binary, content, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	line := hex.EncodeToString(sum[:]) + "  openflare-agent-linux-arm64\n"
	if err := os.WriteFile(in.binary+".sha256", []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	return in
}

// run runs the installer; env adds environment variables. It returns the
// combined output and whether the script succeeded, and fails the test if
// a token shows up in the output.
func (in *installer) run(env []string, args ...string) (string, bool) {
	in.t.Helper()
	cmd := exec.Command(filepath.Join(in.tools, "sh"), append([]string{in.script}, args...)...)
	cmd.Env = append([]string{"PATH=" + in.tools}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			in.t.Fatal(err)
		}
	}
	for _, tok := range []string{discoveryToken, agentToken, newAgentToken} {
		enc, _ := json.Marshal(tok)
		for _, form := range []string{tok, string(enc[1 : len(enc)-1]), tok[:12]} {
			if strings.Contains(string(out), form) {
				in.t.Fatalf("install.sh printed a token (%q):\n%s", form, out)
			}
		}
	}
	return string(out), err == nil
}

// with is the installer for subtest t.
func (in *installer) with(t *testing.T) *installer {
	c := *in
	c.t = t
	return &c
}

// mustRun runs the installer into root and fails the test unless it succeeds.
func (in *installer) mustRun(root string, env []string, args ...string) string {
	in.t.Helper()
	out, ok := in.run(env, append([]string{"--root", root, "--binary", in.binary}, args...)...)
	if !ok {
		in.t.Fatalf("install.sh failed:\n%s", out)
	}
	return out
}

// tree maps every path under root to its mode and, for files, a digest.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		entry := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			entry += " " + hex.EncodeToString(sum[:8])
		}
		m[rel] = entry
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func modeOf(t *testing.T, p string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// readConf decodes agent.json as a flat object and loads it as the agent
// does (no environment).
func readConf(t *testing.T, path string) (map[string]any, *config.Config) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("agent.json is not valid JSON: %v\n%s", err, b)
	}
	cfg, warnings, err := config.Load(path, func(string) string { return "" })
	if err != nil {
		t.Fatalf("config.Load rejects the installed agent.json: %v", err)
	}
	if len(warnings) > 0 {
		t.Fatalf("config.Load warns: %q", warnings)
	}
	return m, cfg
}

// forEachUserland runs f once per userland, in parallel with other tests.
func forEachUserland(t *testing.T, f func(t *testing.T, in *installer)) {
	t.Parallel()
	for _, ul := range userlands {
		t.Run(ul.name, func(t *testing.T) {
			t.Parallel()
			f(t, newInstaller(t, ul))
		})
	}
}

const (
	serverURL = `https://openflare.example.com/of"api`
	nodeName  = `edge "lab" 01`
)

var freshArgs = []string{
	"--server-url", serverURL,
	"--discovery-token", discoveryToken,
	"--node-name", nodeName,
	"--openresty-path", "/usr/sbin/nginx",
}

// A fresh systemd install writes exactly the binary in a directory of its
// own, the link to it, agent.json, the unit and the two directories, with
// the right modes; a second run changes nothing.
func TestInstallFreshAndIdempotent(t *testing.T) {
	forEachUserland(t, func(t *testing.T, in *installer) {
		root := t.TempDir()
		out := in.mustRun(root, nil, freshArgs...)
		if !strings.Contains(out, "discovery_token ****") {
			t.Errorf("output does not mask the token as ****:\n%s", out)
		}
		got := tree(t, root)
		var paths []string
		for p := range got {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		want := []string{
			"etc", "etc/openflare", "etc/openflare/agent.json",
			"etc/systemd", "etc/systemd/system", "etc/systemd/system/openflare-agent.service",
			"usr", "usr/local", "usr/local/bin", "usr/local/bin/openflare-agent",
			"usr/local/lib", "usr/local/lib/openflare-agent", "usr/local/lib/openflare-agent/openflare-agent",
			"var", "var/lib", "var/lib/openflare",
		}
		if !reflect.DeepEqual(paths, want) {
			t.Fatalf("installed paths\n%s\nwant\n%s", strings.Join(paths, "\n"), strings.Join(want, "\n"))
		}
		for p, mode := range map[string]fs.FileMode{
			"etc/openflare/agent.json":                   0o600,
			"etc/openflare":                              0o750,
			"var/lib/openflare":                          0o751,
			"etc/systemd/system/openflare-agent.service": 0o644,
		} {
			if got := modeOf(t, filepath.Join(root, p)); got != mode {
				t.Errorf("%s: mode %v, want %v", p, got, mode)
			}
		}
		checkBinaryLayout(t, root, in.binary)
		sameFile(t, filepath.Join(root, "etc/systemd/system/openflare-agent.service"),
			filepath.Join(testsupport.ModuleRoot(t), "cross", "systemd", "openflare-agent.service"))

		m, cfg := readConf(t, filepath.Join(root, "etc/openflare/agent.json"))
		wantConf := map[string]any{
			"server_url":      serverURL,
			"discovery_token": discoveryToken,
			"node_name":       nodeName,
			"openresty_path":  "/usr/sbin/nginx",
			"data_dir":        "/var/lib/openflare",
		}
		if !reflect.DeepEqual(m, wantConf) {
			t.Errorf("agent.json %v, want %v", m, wantConf)
		}
		if cfg.DiscoveryToken != discoveryToken || cfg.ServerURL != serverURL || cfg.DataDir != "/var/lib/openflare" {
			t.Errorf("config.Load: server %q, data_dir %q, discovery token intact %v", cfg.ServerURL, cfg.DataDir, cfg.DiscoveryToken == discoveryToken)
		}

		out = in.mustRun(root, nil, freshArgs...)
		if after := tree(t, root); !reflect.DeepEqual(after, got) {
			t.Fatalf("second run changed the tree:\nbefore %v\nafter  %v", got, after)
		}
		if strings.Count(out, "unchanged") != 3 {
			t.Errorf("second run should leave agent.json, binary and unit unchanged:\n%s", out)
		}
	})
}

// checkBinaryLayout: under systemd the binary is 0755 in a 0755 directory
// of its own, the only one the unit lets self-update write, and
// /usr/local/bin/openflare-agent is an absolute link to it (absolute, so
// that it holds in the image a --root install builds).
func checkBinaryLayout(t *testing.T, root, binary string) {
	t.Helper()
	const real = "/usr/local/lib/openflare-agent/openflare-agent"
	for p, mode := range map[string]fs.FileMode{filepath.Dir(real): 0o755, real: 0o755} {
		if got := modeOf(t, filepath.Join(root, p)); got != mode {
			t.Errorf("%s: mode %v, want %v", p, got, mode)
		}
	}
	sameFile(t, filepath.Join(root, real), binary)
	if target, err := os.Readlink(filepath.Join(root, "usr/local/bin/openflare-agent")); err != nil || target != real {
		t.Errorf("/usr/local/bin/openflare-agent: link to %q (%v), want %s", target, err, real)
	}
	u := unitDirectives(t, root)
	if len(u["ExecStart"]) != 1 || !strings.HasPrefix(u["ExecStart"][0], real+" ") {
		t.Errorf("ExecStart %q, want %s", u["ExecStart"], real)
	}
	if rw := strings.Fields(strings.Join(u["ReadWritePaths"], " ")); !slices.Contains(rw, filepath.Dir(real)) || slices.Contains(rw, "/usr/local/bin") {
		t.Errorf("ReadWritePaths %q, want the binary's directory and not /usr/local/bin", rw)
	}
}

// An install of the old layout, the binary itself in /usr/local/bin and a
// unit running it from there, ends with the binary in its own directory,
// the link in its place and the unit replaced; nothing is left beside the
// link, and a second run changes nothing. A drop-in that made
// /usr/local/bin writable for self-update gets a note.
func TestInstallUpgradeFromBinaryInUsrLocalBin(t *testing.T) {
	forEachUserland(t, func(t *testing.T, in *installer) {
		root := t.TempDir()
		writeConf(t, root, `{"server_url": "https://openflare.example.com", "agent_token": "`+agentToken+`", "data_dir": "/var/lib/openflare"}`)
		old := filepath.Join(root, "usr/local/bin/openflare-agent")
		for p, content := range map[string]string{
			old: "#!/bin/sh\necho old openflare-agent\n",
			filepath.Join(root, "etc/systemd/system/openflare-agent.service"):               "[Service]\nExecStart=/usr/local/bin/openflare-agent -config /etc/openflare/agent.json\nProtectSystem=strict\nReadWritePaths=/var/lib/openflare /etc/openflare\n",
			filepath.Join(root, "etc/systemd/system/openflare-agent.service.d/update.conf"): "[Service]\nReadWritePaths=/usr/local/bin\n",
		} {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		// The running old agent's binary: the upgrade must leave its inode
		// as it was, only unlinked from /usr/local/bin.
		running, err := os.Open(old)
		if err != nil {
			t.Fatal(err)
		}
		defer running.Close()

		out := in.mustRun(root, nil)
		if !strings.Contains(out, "linked "+old+" -> /usr/local/lib/openflare-agent/openflare-agent") {
			t.Errorf("output does not say the link replaced the binary:\n%s", out)
		}
		if !strings.Contains(out, "update.conf makes /usr/local/bin writable") {
			t.Errorf("no note about the drop-in that makes /usr/local/bin writable:\n%s", out)
		}
		checkBinaryLayout(t, root, in.binary)
		if b, err := io.ReadAll(running); err != nil || string(b) != "#!/bin/sh\necho old openflare-agent\n" {
			t.Errorf("the old binary's inode changed: %q, %v", b, err)
		}
		entries, err := os.ReadDir(filepath.Join(root, "usr/local/bin"))
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Type() != fs.ModeSymlink {
			t.Errorf("/usr/local/bin holds %v, want only the link", entries)
		}

		before := tree(t, root)
		out = in.mustRun(root, nil)
		if after := tree(t, root); !reflect.DeepEqual(after, before) {
			t.Errorf("second run changed the tree:\nbefore %v\nafter  %v", before, after)
		}
		if strings.Contains(out, "linked") {
			t.Errorf("second run relinks:\n%s", out)
		}
	})
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	ab, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ab, bb) {
		t.Errorf("%s differs from %s", a, b)
	}
}

// A binary that does not match its checksum is refused before anything is
// written, and so is a binary with no checksum at all.
func TestInstallRefusesBadChecksum(t *testing.T) {
	forEachUserland(t, func(t *testing.T, in *installer) {
		root := t.TempDir()
		out, ok := in.run(nil, append([]string{"--root", root, "--binary", in.binary, "--sha256", strings.Repeat("0", 64)}, freshArgs...)...)
		if ok || !strings.Contains(out, "sha256 mismatch") || !strings.Contains(out, "nothing installed") {
			t.Fatalf("wrong --sha256: ok=%v\n%s", ok, out)
		}
		if got := tree(t, root); len(got) != 0 {
			t.Fatalf("files installed despite the mismatch: %v", got)
		}

		if err := os.WriteFile(in.binary+".sha256", []byte(strings.Repeat("ab", 32)+"  openflare-agent-linux-arm64\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, ok = in.run(nil, append([]string{"--root", root, "--binary", in.binary}, freshArgs...)...)
		if ok || !strings.Contains(out, "sha256 mismatch") {
			t.Fatalf("wrong .sha256 file: ok=%v\n%s", ok, out)
		}

		if err := os.Remove(in.binary + ".sha256"); err != nil {
			t.Fatal(err)
		}
		out, ok = in.run(nil, append([]string{"--root", root, "--binary", in.binary}, freshArgs...)...)
		if ok || !strings.Contains(out, "no checksum") {
			t.Fatalf("no checksum: ok=%v\n%s", ok, out)
		}
		if got := tree(t, root); len(got) != 0 {
			t.Fatalf("files installed without a checksum: %v", got)
		}
	})
}

// Re-running after the node registered keeps its agent_token (no second
// registration) and the keys the operator added; --agent-token replaces it.
func TestInstallKeepsRegisteredToken(t *testing.T) {
	forEachUserland(t, func(t *testing.T, in *installer) {
		root := t.TempDir()
		in.mustRun(root, nil, freshArgs...)
		conf := filepath.Join(root, "etc/openflare/agent.json")
		// As the agent leaves it after a discovery registration, plus keys
		// of the operator's own.
		registered := "{\n  \"agent_token\": \"" + agentToken + "\",\n" +
			"  \"server_url\": \"https://openflare.example.com\",\n  \"discovery_token\": \"\",\n" +
			"  \"node_ip\": \"198.51.100.7\",\n  \"openresty_resolvers\": [\"1.1.1.1\", \"8.8.8.8\"],\n" +
			"  \"heartbeat_interval\": \"30s\"\n}\n"
		if err := os.WriteFile(conf, []byte(registered), 0o600); err != nil {
			t.Fatal(err)
		}
		out := in.mustRun(root, nil, freshArgs...)
		if !strings.Contains(out, "agent_token **** (kept") {
			t.Errorf("output does not say the token was kept:\n%s", out)
		}
		m, cfg := readConf(t, conf)
		if cfg.AgentToken != agentToken || m["discovery_token"] != "" {
			t.Errorf("registered token not kept: agent.json %v", m)
		}
		if m["node_ip"] != "198.51.100.7" || m["heartbeat_interval"] != "30s" || len(cfg.OpenRestyResolvers) != 2 {
			t.Errorf("operator keys not kept: %v", m)
		}
		if m["server_url"] != serverURL || m["node_name"] != nodeName {
			t.Errorf("options not applied: %v", m)
		}
		if modeOf(t, conf) != 0o600 {
			t.Errorf("agent.json mode %v after a merge", modeOf(t, conf))
		}

		// A rotated token, from the environment rather than the command line.
		in.mustRun(root, []string{"OPENFLARE_AGENT_TOKEN=" + newAgentToken})
		m, cfg = readConf(t, conf)
		if cfg.AgentToken != newAgentToken || m["discovery_token"] != "" || m["node_ip"] != "198.51.100.7" {
			t.Errorf("agent token not replaced: %v", m)
		}
	})
}

// On OpenWrt the binary goes to /usr/bin with the procd init script, and
// --data-dir lands in agent.json.
func TestInstallOpenWrt(t *testing.T) {
	forEachUserland(t, func(t *testing.T, in *installer) {
		root := openWrtRoot(t)
		in.mustRun(root, nil, "--server-url", "https://openflare.example.com", "--agent-token", agentToken, "--data-dir", "/srv/openflare")
		if modeOf(t, filepath.Join(root, "usr/bin/openflare-agent")) != 0o755 {
			t.Error("binary not installed 0755 in /usr/bin")
		}
		if _, err := os.Stat(filepath.Join(root, "usr/local")); err == nil {
			t.Error("OpenWrt install wrote to /usr/local")
		}
		if _, err := os.Stat(filepath.Join(root, "etc/systemd")); err == nil {
			t.Error("OpenWrt install wrote a systemd unit")
		}
		initScript := filepath.Join(root, "etc/init.d/openflare-agent")
		if modeOf(t, initScript) != 0o755 {
			t.Error("init script not installed 0755")
		}
		sameFile(t, initScript, filepath.Join(testsupport.ModuleRoot(t), "cross", "openwrt", "openflare-agent.init"))
		m, cfg := readConf(t, filepath.Join(root, "etc/openflare/agent.json"))
		if cfg.AgentToken != agentToken || cfg.DataDir != "/srv/openflare" || m["discovery_token"] != "" {
			t.Errorf("agent.json %v", m)
		}
		if m["access_log_path"] != "/var/log/openflare/access.log" {
			t.Errorf("access_log_path %v, want nginx's logs in RAM", m["access_log_path"])
		}
		if modeOf(t, filepath.Join(root, "srv/openflare")) != 0o751 {
			t.Error("data dir not created 0751")
		}
	})
}

// A custom --data-dir also becomes the unit's writable path.
func TestInstallDataDirInUnit(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, userlands[0])
	root := t.TempDir()
	in.mustRun(root, nil, "--server-url", "https://openflare.example.com", "--agent-token", agentToken, "--data-dir", "/srv/edge|data")
	unit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/openflare-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "\nReadWritePaths=/srv/edge|data /etc/openflare /usr/local/lib/openflare-agent\n") || strings.Contains(string(unit), "/var/lib/openflare") {
		t.Fatalf("unit does not use the data dir:\n%s", unit)
	}
}

// openWrtRoot is an empty install root that looks like OpenWrt.
func openWrtRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/openwrt_release"), []byte("DISTRIB_ID='OpenWrt'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// writeConf puts an agent.json into root, as an earlier install left it.
func writeConf(t *testing.T, root, content string) string {
	t.Helper()
	conf := filepath.Join(root, "etc/openflare/agent.json")
	if err := os.MkdirAll(filepath.Dir(conf), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return conf
}

// On OpenWrt /var is a tmpfs: by default the data directory goes on flash
// (/etc/openflare/data) and nginx's logs, pid, temp files and cache, which
// the agent derives from the access log, go to RAM under /var.
func TestInstallOpenWrtDefaults(t *testing.T) {
	forEachUserland(t, func(t *testing.T, in *installer) {
		root := openWrtRoot(t)
		out := in.mustRun(root, nil, "--server-url", "https://openflare.example.com", "--agent-token", agentToken)
		if strings.Contains(out, "warning") || strings.Contains(out, "note") {
			t.Errorf("a fresh install warns:\n%s", out)
		}
		conf := filepath.Join(root, "etc/openflare/agent.json")
		m, cfg := readConf(t, conf)
		if m["data_dir"] != "/etc/openflare/data" || m["access_log_path"] != "/var/log/openflare/access.log" {
			t.Fatalf("agent.json %v", m)
		}
		if modeOf(t, filepath.Join(root, "etc/openflare/data")) != 0o751 {
			t.Error("data dir not created 0751")
		}
		// The workers (another user) reach the data directory through
		// /etc/openflare, which lists nothing to them.
		if modeOf(t, filepath.Join(root, "etc/openflare")) != 0o751 {
			t.Errorf("/etc/openflare mode %v, want 0751", modeOf(t, filepath.Join(root, "etc/openflare")))
		}
		if _, err := os.Stat(filepath.Join(root, "var")); err == nil {
			t.Error("the OpenWrt install created /var")
		}
		// What stays on flash and what goes to RAM, as the agent sees it.
		for what, p := range map[string]string{"state": cfg.StatePath, "main config": cfg.MainConfigPath, "runtime config": cfg.RuntimeConfigDir} {
			if !strings.HasPrefix(p, "/etc/openflare/data/") {
				t.Errorf("%s at %s, not under /etc/openflare/data", what, p)
			}
		}
		paths := landing.FromConfig(cfg)
		for what, p := range map[string]string{"error log": paths.ErrorLog, "pid": paths.PID, "temp": paths.TempDir, "proxy cache": paths.ProxyCache} {
			if !strings.HasPrefix(p, "/var/") {
				t.Errorf("nginx %s at %s, not under /var", what, p)
			}
		}
		if paths.PID != "/var/run/nginx.pid" {
			t.Errorf("pid %s", paths.PID)
		}

		before := tree(t, root)
		out = in.mustRun(root, nil)
		if after := tree(t, root); !reflect.DeepEqual(after, before) {
			t.Fatalf("second run changed the tree:\nbefore %v\nafter  %v", before, after)
		}
		if strings.Contains(out, "warning") || strings.Contains(out, "note") {
			t.Errorf("second run warns:\n%s", out)
		}
	})
}

// An OpenWrt node installed earlier keeps its data directory and nginx
// layout (moving the pid file from under a running nginx would lose it),
// with a warning when that directory is in RAM. Moving the data directory
// brings nginx's files to RAM with it; an access_log_path of the
// operator's is kept.
func TestInstallOpenWrtUpgrade(t *testing.T) {
	forEachUserland(t, func(t *testing.T, in *installer) {
		root := openWrtRoot(t)
		conf := writeConf(t, root, `{"server_url": "https://openflare.example.com", "agent_token": "`+agentToken+`", "data_dir": "/var/lib/openflare"}`)
		out := in.mustRun(root, nil)
		if !strings.Contains(out, "warning: data_dir /var/lib/openflare is in RAM") || !strings.Contains(out, "--data-dir /etc/openflare/data") {
			t.Errorf("no warning about a data_dir in RAM:\n%s", out)
		}
		m, _ := readConf(t, conf)
		if _, ok := m["access_log_path"]; ok || m["data_dir"] != "/var/lib/openflare" {
			t.Errorf("layout of the installed agent changed: %v", m)
		}

		out = in.mustRun(root, nil, "--data-dir", "/etc/openflare/data")
		if strings.Contains(out, "warning") {
			t.Errorf("warns about a data_dir on flash:\n%s", out)
		}
		m, _ = readConf(t, conf)
		if m["data_dir"] != "/etc/openflare/data" || m["access_log_path"] != "/var/log/openflare/access.log" {
			t.Errorf("agent.json after moving the data directory: %v", m)
		}

		// On flash without access_log_path, and staying there: a note.
		writeConf(t, root, `{"server_url": "https://openflare.example.com", "agent_token": "`+agentToken+`", "data_dir": "/srv/openflare"}`)
		out = in.mustRun(root, nil)
		if !strings.Contains(out, "note: agent.json sets no access_log_path") {
			t.Errorf("no note about nginx's files on flash:\n%s", out)
		}
		if m, _ = readConf(t, conf); m["data_dir"] != "/srv/openflare" {
			t.Errorf("data_dir %v", m["data_dir"])
		}

		writeConf(t, root, `{"server_url": "https://openflare.example.com", "agent_token": "`+agentToken+`", "access_log_path": "/mnt/usb/log/openflare/access.log"}`)
		in.mustRun(root, nil, "--data-dir", "/mnt/usb/openflare")
		if m, _ = readConf(t, conf); m["access_log_path"] != "/mnt/usb/log/openflare/access.log" || m["data_dir"] != "/mnt/usb/openflare" {
			t.Errorf("operator's access_log_path not kept: %v", m)
		}
	})
}

// badDataDirs are data directories the installer must refuse: it would run
// chown -R on them.
var badDataDirs = []string{
	"/", "//", "/.", "/usr", "/usr/", "//usr/./", "/etc", "/var", "/var/", "/bin", "/sbin", "/lib", "/lib64",
	"/boot", "/dev", "/proc", "/sys", "/run", "/home", "/root", "/srv", "/opt", "/tmp", "/data", "/openflare",
	"/usr/local", "/usr/lib", "/var/lib", "/var/log", "/srv/../usr", "/var/lib/openflare/..",
}

// A data directory that is /, a top-level or a system directory is refused
// before anything changes, from --data-dir and from an existing agent.json;
// directories below them are fine.
func TestInstallRefusesSystemDataDir(t *testing.T) {
	forEachUserland(t, func(t *testing.T, in *installer) {
		args := []string{"--server-url", "https://openflare.example.com", "--agent-token", agentToken}
		for _, dir := range append(badDataDirs, "relative/openflare") {
			t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
				t.Parallel()
				in := in.with(t)
				want := "data_dir " + dir + " (--data-dir) "
				if !strings.HasPrefix(dir, "/") {
					want = "--data-dir must be an absolute path"
				}
				root := t.TempDir()
				out, ok := in.run(nil, append([]string{"--root", root, "--binary", in.binary, "--data-dir", dir}, args...)...)
				if ok || !strings.Contains(out, want) {
					t.Errorf("--data-dir %s: ok=%v, want %q\n%s", dir, ok, want, out)
				}
				if got := tree(t, root); len(got) != 0 {
					t.Errorf("--data-dir %s: files installed: %v", dir, got)
				}

				root = t.TempDir()
				conf := writeConf(t, root, `{"server_url": "https://openflare.example.com", "agent_token": "`+agentToken+`", "data_dir": "`+dir+`"}`)
				before := tree(t, root)
				out, ok = in.run(nil, "--root", root, "--binary", in.binary)
				if ok || !strings.Contains(out, "data_dir") || !strings.Contains(out, "/etc/openflare/agent.json") || !strings.Contains(out, "pass --data-dir") {
					t.Errorf("data_dir %s in agent.json: ok=%v\n%s", dir, ok, out)
				}
				if after := tree(t, root); !reflect.DeepEqual(after, before) {
					t.Errorf("data_dir %s in agent.json: the tree changed:\nbefore %v\nafter  %v", dir, before, after)
				}
				// --data-dir overrides a bad one in agent.json.
				in.mustRun(root, nil, "--data-dir", "/var/lib/openflare")
				if m, _ := readConf(t, conf); m["data_dir"] != "/var/lib/openflare" {
					t.Errorf("data_dir %v after --data-dir", m["data_dir"])
				}
			})
		}

		// A symlink to / or to a system directory is refused by where it leads.
		root := t.TempDir()
		for name, target := range map[string]string{"opt/openflare": root, "srv/openflare": filepath.Join(root, "usr"), "srv/edge": "/usr"} {
			if err := os.MkdirAll(filepath.Join(root, "usr"), 0o755); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			before := tree(t, root)
			out, ok := in.run(nil, append([]string{"--root", root, "--binary", in.binary, "--data-dir", "/" + name}, args...)...)
			if ok || !strings.Contains(out, "nothing changed") {
				t.Errorf("--data-dir /%s (a symlink to %s): ok=%v\n%s", name, target, ok, out)
			}
			if after := tree(t, root); !reflect.DeepEqual(after, before) {
				t.Errorf("--data-dir /%s: the tree changed", name)
			}
		}

		for _, dir := range []string{"/etc/openflare/data", "/var/lib/openflare", "/srv/openflare", "/opt/openflare/data", "/usr/local/openflare", "/home/openflare"} {
			root := t.TempDir()
			in.mustRun(root, nil, append([]string{"--data-dir", dir}, args...)...)
			if m, _ := readConf(t, filepath.Join(root, "etc/openflare/agent.json")); m["data_dir"] != dir {
				t.Errorf("data_dir %v, want %s", m["data_dir"], dir)
			}
			if modeOf(t, filepath.Join(root, dir)) != 0o751 {
				t.Errorf("%s not created 0751", dir)
			}
		}
	})
}

// Account ids of the fake roots below: openflare stands for the service
// user of earlier installs, www-data for the shared web user the workers
// no longer get.
const (
	serviceUID = 4242
	workerUID  = 4243
)

// accountsRoot is an empty systemd install root whose /etc/passwd and
// /etc/group know root, the workers' users and, with serviceUser, the
// openflare user of earlier installs.
func accountsRoot(t *testing.T, serviceUser bool) string {
	t.Helper()
	root := t.TempDir()
	passwd := "root:x:0:0:root:/root:/bin/sh\n" +
		fmt.Sprintf("www-data:x:%d:%d:www-data:/var/www:/usr/sbin/nologin\n", workerUID, workerUID) +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	group := "root:x:0:\n" + fmt.Sprintf("www-data:x:%d:\n", workerUID) + "nogroup:x:65534:\n"
	if serviceUser {
		passwd += fmt.Sprintf("openflare:x:%d:%d::/var/lib/openflare:/usr/sbin/nologin\n", serviceUID, serviceUID)
		group += fmt.Sprintf("openflare:x:%d:\n", serviceUID)
	}
	for name, content := range map[string]string{"etc/passwd": passwd, "etc/group": group} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// owner is a path's uid and gid, of a symlink itself rather than its target.
func owner(t *testing.T, p string) [2]int {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return [2]int{int(st.Uid), int(st.Gid)}
}

// owners maps every path under dir (symlinks not followed) to its owner.
func owners(t *testing.T, dir string) map[string][2]int {
	t.Helper()
	m := map[string][2]int{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		m[p] = owner(t, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("changes file owners: run as root")
	}
}

// unitDirectives are the installed unit's Key=value lines, by key.
func unitDirectives(t *testing.T, root string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/openflare-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			m[k] = append(m[k], v)
		}
	}
	return m
}

// A fresh install as root: the unit runs the agent as root with no more
// than the capabilities nginx needs, agent.json is root's and 0600, and the
// workers' own user is pinned in it, so the control plane's template cannot
// choose it.
func TestInstallFreshRunsAsRoot(t *testing.T) {
	needRoot(t)
	forEachUserland(t, func(t *testing.T, in *installer) {
		root := accountsRoot(t, false)
		in.mustRun(root, nil, freshArgs...)

		u := unitDirectives(t, root)
		if u["User"] != nil || u["Group"] != nil || u["DynamicUser"] != nil || u["AmbientCapabilities"] != nil {
			t.Errorf("unit does not run the agent as root: User %q Group %q DynamicUser %q AmbientCapabilities %q", u["User"], u["Group"], u["DynamicUser"], u["AmbientCapabilities"])
		}
		caps := strings.Fields(strings.Join(u["CapabilityBoundingSet"], " "))
		sort.Strings(caps)
		want := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_SETGID", "CAP_SETUID"}
		if !reflect.DeepEqual(caps, want) {
			t.Errorf("CapabilityBoundingSet %v, want %v", caps, want)
		}
		for _, d := range []string{"NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=yes", "KillMode=process", "RestrictNamespaces=yes"} {
			k, v, _ := strings.Cut(d, "=")
			if !slices.Contains(u[k], v) {
				t.Errorf("unit lacks %s", d)
			}
		}

		conf := filepath.Join(root, "etc/openflare/agent.json")
		if o := owner(t, conf); o != [2]int{0, 0} || modeOf(t, conf) != 0o600 {
			t.Errorf("agent.json owner %v mode %v, want root's and 0600", o, modeOf(t, conf))
		}
		for _, d := range []string{"etc/openflare", "var/lib/openflare", "usr/local/lib/openflare-agent"} {
			if o := owner(t, filepath.Join(root, d)); o != [2]int{0, 0} {
				t.Errorf("%s owner %v, want root", d, o)
			}
		}
		m, cfg := readConf(t, conf)
		if m["nginx_user"] != "openflare-www:openflare-www" || cfg.NginxUser != "openflare-www:openflare-www" {
			t.Errorf("nginx_user %v, want openflare-www:openflare-www pinned", m["nginx_user"])
		}

		before := tree(t, root)
		out := in.mustRun(root, nil, freshArgs...)
		if after := tree(t, root); !reflect.DeepEqual(after, before) {
			t.Fatalf("second run changed the tree:\nbefore %v\nafter  %v", before, after)
		}
		if strings.Contains(out, "handed") {
			t.Errorf("second run hands something back:\n%s", out)
		}
	})
}

// A node installed with the old unit, its tree owned by openflare, is
// handed back to root: everything the old agent and nginx wrote is root's,
// except the temp and cache files below nginx's worker directories, which
// go to the workers; keys, state and agent.json are closed. Symlinks the
// old user planted lead nothing out of the tree, and a second run changes
// nothing.
func TestInstallUpgradeFromServiceUser(t *testing.T) {
	needRoot(t)
	forEachUserland(t, func(t *testing.T, in *installer) {
		root := accountsRoot(t, true)
		outside := t.TempDir()
		dd := filepath.Join(root, "var/lib/openflare")
		svc := [2]int{serviceUID, serviceUID}
		mk := func(rel string, mode fs.FileMode, content string, o [2]int) {
			t.Helper()
			p := filepath.Join(root, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(rel, "/") {
				if err := os.MkdirAll(p, mode); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(p, []byte(content), mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(p, o[0], o[1]); err != nil {
				t.Fatal(err)
			}
		}
		// As the old unit and agent left it.
		mk("etc/systemd/system/openflare-agent.service", 0o644, "[Service]\nUser=openflare\nGroup=openflare\nAmbientCapabilities=CAP_NET_BIND_SERVICE\n", [2]int{0, 0})
		mk("etc/openflare/", 0o750, "", svc)
		mk("etc/openflare/agent.json", 0o640, `{"server_url": "https://openflare.example.com", "agent_token": "`+agentToken+`", "data_dir": "/var/lib/openflare"}`, svc)
		mk("var/lib/openflare/", 0o750, "", svc)
		for _, d := range []string{"etc/", "etc/nginx/", "etc/nginx/certs/", "var/", "var/lib/", "var/log/", "var/log/openflare/", "var/run/", "var/cache/", "var/cache/nginx/"} {
			mk("var/lib/openflare/"+d, 0o755, "", svc)
		}
		mk("var/lib/openflare/etc/nginx/nginx.conf", 0o640, "events {}\n", svc)
		mk("var/lib/openflare/etc/nginx/certs/site.key", 0o644, "KEY\n", svc)
		mk("var/lib/openflare/etc/nginx/certs/site.crt", 0o644, "CRT\n", [2]int{0, serviceUID})
		mk("var/lib/openflare/var/lib/openflare/", 0o755, "", svc)
		mk("var/lib/openflare/var/lib/openflare/agent-state.json", 0o644, "{}\n", svc)
		mk("var/lib/openflare/var/log/openflare/access.log", 0o640, "", svc)
		mk("var/lib/openflare/var/run/nginx.pid", 0o644, "1\n", svc)
		mk("var/lib/openflare/var/cache/nginx/client_temp/", 0o700, "", svc)
		mk("var/lib/openflare/var/cache/nginx/client_temp/0000000001", 0o600, "body", svc)
		mk("var/lib/openflare/var/cache/openflare_proxy/", 0o700, "", svc)
		mk("var/lib/openflare/var/cache/openflare_proxy/c/", 0o700, "", svc)
		mk("var/lib/openflare/var/cache/openflare_proxy/c/29/", 0o700, "", svc)
		mk("var/lib/openflare/var/cache/openflare_proxy/c/29/b7f54b2df7773722d382f4809d65029c", 0o600, "cached", svc)
		// Planted: links from the tree to files and directories outside it.
		secret := filepath.Join(outside, "secret")
		dir := filepath.Join(outside, "dir")
		if err := os.WriteFile(secret, []byte("not the agent's"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{outside, secret, dir, filepath.Join(dir, "f")} {
			if err := os.Lchown(p, serviceUID, serviceUID); err != nil {
				t.Fatal(err)
			}
		}
		links := map[string]string{
			"var/lib/openflare/etc/nginx/certs/stolen.key":       secret,
			"var/lib/openflare/var/cache/openflare_proxy/escape": dir,
			"var/lib/openflare/var/cache/elsewhere":              dir,
			"etc/openflare/data":                                 dir,
		}
		for rel, target := range links {
			p := filepath.Join(root, rel)
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(p, serviceUID, serviceUID); err != nil {
				t.Fatal(err)
			}
		}
		outsideBefore := owners(t, outside)
		outsideModes := tree(t, outside)

		out := in.mustRun(root, nil)
		if !strings.Contains(out, "handed /etc/openflare and /var/lib/openflare back to root") {
			t.Errorf("output does not say the files were handed back:\n%s", out)
		}

		// The workers' new user, created by this run.
		worker := accountIDs(t, root, "openflare-www")
		workerDirs := []string{filepath.Join(dd, "var/cache/nginx/client_temp"), filepath.Join(dd, "var/cache/openflare_proxy")}
		for _, top := range []string{filepath.Join(root, "etc/openflare"), dd} {
			for p, o := range owners(t, top) {
				want := [2]int{0, 0}
				for _, w := range workerDirs {
					if p == w || strings.HasPrefix(p, w+"/") {
						want = worker
					}
				}
				if o != want {
					t.Errorf("%s: owner %v, want %v", strings.TrimPrefix(p, root), o, want)
				}
			}
		}
		if after := owners(t, outside); !reflect.DeepEqual(after, outsideBefore) {
			t.Errorf("owners outside the tree changed through a planted link:\nbefore %v\nafter  %v", outsideBefore, after)
		}
		if after := tree(t, outside); !reflect.DeepEqual(after, outsideModes) {
			t.Errorf("modes outside the tree changed through a planted link:\nbefore %v\nafter  %v", outsideModes, after)
		}
		for rel, mode := range map[string]fs.FileMode{
			"etc/openflare/agent.json":                             0o600,
			"etc/openflare":                                        0o750,
			"var/lib/openflare":                                    0o751,
			"var/lib/openflare/etc/nginx/certs/site.key":           0o600,
			"var/lib/openflare/etc/nginx/certs/site.crt":           0o644,
			"var/lib/openflare/var/lib/openflare":                  0o711,
			"var/lib/openflare/var/lib/openflare/agent-state.json": 0o600,
			"var/lib/openflare/var/cache/nginx/client_temp":        0o700,
			"var/lib/openflare/var/cache/openflare_proxy/c/29":     0o700,
		} {
			if got := modeOf(t, filepath.Join(root, rel)); got != mode {
				t.Errorf("%s: mode %v, want %v", rel, got, mode)
			}
		}
		if u := unitDirectives(t, root); u["User"] != nil || u["CapabilityBoundingSet"] == nil {
			t.Errorf("the old unit was not replaced: User %q", u["User"])
		}
		m, _ := readConf(t, filepath.Join(root, "etc/openflare/agent.json"))
		if m["nginx_user"] != "openflare-www:openflare-www" || m["agent_token"] != agentToken {
			t.Errorf("agent.json after the upgrade: %v", m)
		}
		if !strings.Contains(readPasswd(t, root), "openflare:") {
			t.Error("the openflare user was removed")
		}

		beforeTree, beforeOwners := tree(t, root), owners(t, root)
		out = in.mustRun(root, nil)
		if strings.Contains(out, "handed") {
			t.Errorf("second run hands back again:\n%s", out)
		}
		if after := tree(t, root); !reflect.DeepEqual(after, beforeTree) {
			t.Errorf("second run changed the tree:\nbefore %v\nafter  %v", beforeTree, after)
		}
		if after := owners(t, root); !reflect.DeepEqual(after, beforeOwners) {
			t.Errorf("second run changed owners")
		}
	})
}

func readPasswd(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An agent.json that is a symlink is refused before anything changes: the
// old service user could have planted it, and root writes through it.
func TestInstallRefusesLinkedAgentJSON(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, userlands[0])
	root := t.TempDir()
	target := writeConf(t, t.TempDir(), `{"server_url": "https://openflare.example.com", "agent_token": "`+agentToken+`"}`)
	if err := os.MkdirAll(filepath.Join(root, "etc/openflare"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(root, "etc/openflare/agent.json")); err != nil {
		t.Fatal(err)
	}
	before := tree(t, root)
	out, ok := in.run(nil, "--root", root, "--binary", in.binary)
	if ok || !strings.Contains(out, "symbolic link") {
		t.Errorf("linked agent.json: ok=%v\n%s", ok, out)
	}
	if after := tree(t, root); !reflect.DeepEqual(after, before) {
		t.Errorf("the tree changed:\nbefore %v\nafter  %v", before, after)
	}
}

// An operator who keeps the agent under a service user (a drop-in with
// User=) keeps their owners, and nothing is pinned for workers that share
// the agent's uid anyway; the output says what that means.
func TestInstallKeepsServiceUserDropIn(t *testing.T) {
	needRoot(t)
	t.Parallel()
	in := newInstaller(t, userlands[0])
	root := accountsRoot(t, true)
	dropIn := filepath.Join(root, "etc/systemd/system/openflare-agent.service.d/user.conf")
	if err := os.MkdirAll(filepath.Dir(dropIn), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dropIn, []byte("[Service]\nUser=openflare\nAmbientCapabilities=CAP_NET_BIND_SERVICE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := writeConf(t, root, `{"server_url": "https://openflare.example.com", "agent_token": "`+agentToken+`"}`)
	for _, p := range []string{filepath.Dir(conf), conf} {
		if err := os.Chown(p, serviceUID, serviceUID); err != nil {
			t.Fatal(err)
		}
	}
	out := in.mustRun(root, nil)
	if !strings.Contains(out, "drop-in runs the agent as openflare") || strings.Contains(out, "handed") {
		t.Errorf("output:\n%s", out)
	}
	if o := owner(t, conf); o != [2]int{serviceUID, serviceUID} {
		t.Errorf("agent.json owner %v, want the service user's", o)
	}
	if m, _ := readConf(t, conf); m["nginx_user"] != nil {
		t.Errorf("nginx_user pinned under a service user: %v", m["nginx_user"])
	}
}

// systemd itself accepts every line of the unit (an unknown or misspelt
// directive is only a warning at boot, and the sandbox would silently be
// weaker).
func TestSystemdUnitVerifies(t *testing.T) {
	t.Parallel()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian package systemd): the unit is not verified")
	}
	in := newInstaller(t, userlands[0])
	root := t.TempDir()
	in.mustRun(root, nil, freshArgs...)
	unit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/openflare-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	// verify wants ExecStart to exist: the fake binary stands in.
	if err := os.Chmod(in.binary, 0o755); err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(unit), "/usr/local/lib/openflare-agent/openflare-agent", in.binary)
	p := filepath.Join(t.TempDir(), "openflare-agent.service")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", p).CombinedOutput()
	if err != nil || strings.Contains(string(out), "openflare-agent.service") || strings.Contains(string(out), "gnoring") {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// writeFiles writes files (paths relative to root) as an install root holds
// them, with their modes.
func writeFiles(t *testing.T, root string, files map[string]string, modes map[string]fs.FileMode) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode, ok := modes[rel]
		if !ok {
			mode = 0o644
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// entries are the lines of root's /etc/FILE for the account name, split
// into fields.
func entries(t *testing.T, root, file, name string) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "etc", file))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, ":"); f[0] == name {
			out = append(out, f)
		}
	}
	return out
}

// accountIDs are the uid and gid of name in root's /etc/passwd.
func accountIDs(t *testing.T, root, name string) [2]int {
	t.Helper()
	db := osuser.DB{Root: root}
	id, err := db.Resolve(osuser.Host{EUID: 0}, name, "")
	if err != nil {
		t.Fatalf("the account %s in the install root: %v", name, err)
	}
	return [2]int{id.UID, id.GID}
}

// checkWorkerUser: root's account files hold the workers' user and its
// group exactly once, as a system account with id as uid and gid, no home
// and shell as its login shell; the shadow files, where root has them, an
// entry each with no password. agent.json pins the user, and the agent
// resolves it to that uid, the accounts written before it intact.
func checkWorkerUser(t *testing.T, root, shell string, id int) {
	t.Helper()
	ids := strconv.Itoa(id)
	_, err := os.Stat(filepath.Join(root, "etc/shadow"))
	hasShadow := err == nil
	// The password lies in the shadow file where there is one; either way
	// it is locked.
	pwField := "!"
	if hasShadow {
		pwField = "x"
	}
	wantPW := []string{"openflare-www", pwField, ids, ids, "openflare-agent nginx workers", "/nonexistent", shell}
	if pw := entries(t, root, "passwd", "openflare-www"); len(pw) != 1 || !reflect.DeepEqual(pw[0], wantPW) {
		t.Errorf("/etc/passwd entries for openflare-www: %q, want one %q", pw, strings.Join(wantPW, ":"))
	}
	if gr := entries(t, root, "group", "openflare-www"); len(gr) != 1 || !reflect.DeepEqual(gr[0], []string{"openflare-www", "x", ids, ""}) {
		t.Errorf("/etc/group entries for openflare-www: %q, want one with gid %d", gr, id)
	}
	if hasShadow {
		if sh := entries(t, root, "shadow", "openflare-www"); len(sh) != 1 || len(sh[0]) != 9 || sh[0][1] != "!" {
			t.Errorf("/etc/shadow entries for openflare-www: %q, want one locked", sh)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/gshadow")); err == nil {
		if gs := entries(t, root, "gshadow", "openflare-www"); len(gs) != 1 || gs[0][1] != "!" {
			t.Errorf("/etc/gshadow entries for openflare-www: %q, want one locked", gs)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "nonexistent")); err == nil {
		t.Error("the workers' user got a home directory")
	}
	m, cfg := readConf(t, filepath.Join(root, "etc/openflare/agent.json"))
	if m["nginx_user"] != "openflare-www:openflare-www" {
		t.Errorf("nginx_user %v, want openflare-www:openflare-www pinned", m["nginx_user"])
	}
	if got := accountIDs(t, root, cfg.NginxUser); got != [2]int{id, id} {
		t.Errorf("the agent resolves nginx_user %q to %v, want uid and gid %d", cfg.NginxUser, got, id)
	}
	if got := accountIDs(t, root, "nobody"); got != [2]int{65534, 65534} {
		t.Errorf("nobody resolves to %v after the install: an account file was damaged", got)
	}
}

// A fresh install into a Debian-like root creates the workers' own user and
// group, with the highest free system id, the no-login shell the root has
// and locked shadow entries, and pins it as nginx_user; a group file
// without a final newline keeps its last entry, the shadow file its mode.
// A second run changes nothing.
func TestInstallCreatesWorkerUser(t *testing.T) {
	forEachUserland(t, func(t *testing.T, in *installer) {
		root := t.TempDir()
		writeFiles(t, root, map[string]string{
			"etc/passwd": "root:x:0:0:root:/root:/bin/bash\nwww-data:x:33:33:www-data:/var/www:/usr/sbin/nologin\n" +
				"systemd-network:x:998:998::/:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			"etc/group":        "root:x:0:\nwww-data:x:33:\nsystemd-journal:x:999:\nsystemd-network:x:998:\nnogroup:x:65534:",
			"etc/shadow":       "root:*:19000:0:99999:7:::\nwww-data:*:19000:0:99999:7:::\n",
			"etc/gshadow":      "root:*::\nwww-data:*::\n",
			"usr/sbin/nologin": "#!/bin/sh\nexit 1\n",
		}, map[string]fs.FileMode{"etc/shadow": 0o640, "etc/gshadow": 0o640, "usr/sbin/nologin": 0o755})
		out := in.mustRun(root, nil, freshArgs...)
		if !strings.Contains(out, "created the system user openflare-www (uid 997)") {
			t.Errorf("output does not say the user was created:\n%s", out)
		}
		checkWorkerUser(t, root, "/usr/sbin/nologin", 997)
		if modeOf(t, filepath.Join(root, "etc/shadow")) != 0o640 {
			t.Errorf("/etc/shadow mode %v, want 0640 kept", modeOf(t, filepath.Join(root, "etc/shadow")))
		}

		before := tree(t, root)
		out = in.mustRun(root, nil, freshArgs...)
		if after := tree(t, root); !reflect.DeepEqual(after, before) {
			t.Fatalf("second run changed the tree:\nbefore %v\nafter  %v", before, after)
		}
		if strings.Contains(out, "created") {
			t.Errorf("second run creates the user again:\n%s", out)
		}
		checkWorkerUser(t, root, "/usr/sbin/nologin", 997)
	})
}

// OpenWrt's account files (shadow but no gshadow, no nologin, package
// users with fixed ids) get the workers' user too, with /bin/false as its
// shell, and a second run changes nothing.
func TestInstallOpenWrtCreatesWorkerUser(t *testing.T) {
	forEachUserland(t, func(t *testing.T, in *installer) {
		root := openWrtRoot(t)
		writeFiles(t, root, map[string]string{
			"etc/passwd": "root:x:0:0:root:/root:/bin/ash\ndaemon:*:1:1:daemon:/var:/bin/false\nftp:*:55:55:ftp:/home/ftp:/bin/false\n" +
				"network:*:101:101:network:/var:/bin/false\nnobody:*:65534:65534:nobody:/var:/bin/false\nntp:x:123:123:ntp:/var/run/ntp:/bin/false\n" +
				"dnsmasq:x:453:453:dnsmasq:/var/run/dnsmasq:/bin/false\nubus:x:81:81:ubus:/var/run/ubus:/bin/false\n",
			"etc/group": "root:x:0:\ndaemon:x:1:\nadm:x:4:\nwww-data:x:33:\nftp:x:55:\nusers:x:100:\nnetwork:x:101:\nnogroup:x:65534:\n" +
				"ntp:x:123:ntp\ndnsmasq:x:453:dnsmasq\nubus:x:81:ubus\n",
			"etc/shadow": "root:::0:99999:7:::\ndaemon:*:0:0:99999:7:::\nftp:*:0:0:99999:7:::\nnetwork:*:0:0:99999:7:::\nnobody:*:0:0:99999:7:::\n" +
				"ntp:x:0:0:99999:7:::\ndnsmasq:x:0:0:99999:7:::\nubus:x:0:0:99999:7:::\n",
		}, map[string]fs.FileMode{"etc/shadow": 0o600})
		out := in.mustRun(root, nil, "--server-url", "https://openflare.example.com", "--agent-token", agentToken)
		if strings.Contains(out, "warning") || strings.Contains(out, "note") {
			t.Errorf("a fresh install warns:\n%s", out)
		}
		checkWorkerUser(t, root, "/bin/false", 999)

		before := tree(t, root)
		in.mustRun(root, nil)
		if after := tree(t, root); !reflect.DeepEqual(after, before) {
			t.Fatalf("second run changed the tree:\nbefore %v\nafter  %v", before, after)
		}
		checkWorkerUser(t, root, "/bin/false", 999)
	})
}

// An nginx_user already in agent.json is the owner's: kept, and no user is
// created; a shared one gets a note. A node that pins none and is not
// handed back keeps resolving its workers as before: creating the
// workers' user would move them away from the cache files their user owns.
func TestInstallKeepsNginxUser(t *testing.T) {
	forEachUserland(t, func(t *testing.T, in *installer) {
		for _, tc := range []struct {
			nginxUser string // "" for none
			note      bool
		}{
			{"www-data:www-data", true},
			{"nobody", true},
			{"edge-workers:edge-workers", false},
			{"", false},
		} {
			root := accountsRoot(t, false)
			conf := `{"server_url": "https://openflare.example.com", "agent_token": "` + agentToken + `", "data_dir": "/var/lib/openflare"`
			if tc.nginxUser != "" {
				conf += `, "nginx_user": "` + tc.nginxUser + `"`
			}
			writeConf(t, root, conf+"}")
			out := in.mustRun(root, nil)
			if got := strings.Contains(out, "a user other services may share"); got != tc.note {
				t.Errorf("nginx_user %q: note about a shared user %v, want %v:\n%s", tc.nginxUser, got, tc.note, out)
			}
			m, _ := readConf(t, filepath.Join(root, "etc/openflare/agent.json"))
			if got, _ := m["nginx_user"].(string); got != tc.nginxUser {
				t.Errorf("nginx_user %q became %q", tc.nginxUser, got)
			}
			if e := entries(t, root, "passwd", "openflare-www"); len(e) != 0 {
				t.Errorf("nginx_user %q: openflare-www created: %q", tc.nginxUser, e)
			}
		}
	})
}
