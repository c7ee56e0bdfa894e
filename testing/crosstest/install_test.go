package crosstest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/openflare/openflare-agent/agent/config"
	"github.com/openflare/openflare-agent/agent/landing"
	"github.com/openflare/openflare-agent/testing/testsupport"
)

// The tools install.sh may use. PATH holds only these, so neither systemctl
// nor useradd is found, and a tool the script starts to need shows up here.
var installTools = []string{"sh", "awk", "cat", "chmod", "chown", "cmp", "cp", "dirname", "find", "id", "mkdir", "mv", "rm", "sed", "sha256sum", "sleep", "tr"}

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

// A fresh systemd install writes exactly the binary, agent.json, the unit
// and the two directories, with the right modes; a second run changes
// nothing.
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
			"var", "var/lib", "var/lib/openflare",
		}
		if !reflect.DeepEqual(paths, want) {
			t.Fatalf("installed paths\n%s\nwant\n%s", strings.Join(paths, "\n"), strings.Join(want, "\n"))
		}
		for p, mode := range map[string]fs.FileMode{
			"etc/openflare/agent.json":                   0o600,
			"etc/openflare":                              0o750,
			"var/lib/openflare":                          0o751,
			"usr/local/bin/openflare-agent":              0o755,
			"etc/systemd/system/openflare-agent.service": 0o644,
		} {
			if got := modeOf(t, filepath.Join(root, p)); got != mode {
				t.Errorf("%s: mode %v, want %v", p, got, mode)
			}
		}
		sameFile(t, filepath.Join(root, "usr/local/bin/openflare-agent"), in.binary)
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
	if !strings.Contains(string(unit), "\nReadWritePaths=/srv/edge|data /etc/openflare\n") || strings.Contains(string(unit), "/var/lib/openflare") {
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
		// The workers (nobody) reach the data directory through
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
