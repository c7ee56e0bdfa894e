package agent

import (
	"os"
	"path/filepath"
	"testing"

	"openflare/agent/landing"
)

// The daemon takes every path from agent.json's layout, the one `check`
// and `status` read (agent/command): with a data_dir of its own and the
// main config, the access log (and with it VAR), the runtime config,
// Pages and the state put outside it, nothing lands where the defaults
// would have put it.
func TestNewTakesItsPathsFromTheLayout(t *testing.T) {
	dir := t.TempDir()
	a, cfg := agentFrom(t, dir, map[string]any{
		"server_url": "http://127.0.0.1:1", "agent_token": "0123456789abcdef0123456789abcdef",
		"node_ip": "198.51.100.10", "data_dir": filepath.Join(dir, "node"),
		"main_config_path":   filepath.Join(dir, "nginx", "main.conf"),
		"access_log_path":    filepath.Join(dir, "var", "log", "edge", "access.log"),
		"runtime_config_dir": filepath.Join(dir, "runtime"),
		"pages_dir":          filepath.Join(dir, "pages"),
		"state_path":         filepath.Join(dir, "state", "agent-state.json"),
		"openresty_path":     filepath.Join(dir, "no-nginx"),
		"mmdb_download_url":  "off", "city_mmdb_download_url": "off", "update_repo": "off",
	})

	l := cfg.Layout()
	paths := landing.FromConfig(cfg)
	if a.engine.Paths != paths || a.engine.Tree != (landing.Tree{Paths: paths, DataDir: l.DataDir, StateDir: l.StateDir}) {
		t.Errorf("apply paths %+v, tree %+v; layout %+v", a.engine.Paths, a.engine.Tree, l)
	}
	for what, got := range map[string][2]string{
		"backup":  {a.engine.BackupDir, l.ApplyBackup},
		"probe":   {a.engine.ParseDir, l.PolicyProbe},
		"staging": {a.engine.StageDir, l.SupportStage},
		"pages":   {a.pages.Dir, l.PagesDir},
		"pid":     {paths.PID, filepath.Join(dir, "var", "run", "nginx.pid")},
	} {
		if got[0] != got[1] {
			t.Errorf("%s: %s, want %s", what, got[0], got[1])
		}
	}
	if _, err := os.Stat(l.State); err != nil {
		t.Errorf("the state is not where status reads it: %v", err)
	}
	if _, err := os.Stat(filepath.Join(l.DataDir, "var", "lib", "openflare", "agent-state.json")); err == nil {
		t.Error("a state at the default path")
	}
}
