package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"openflare/agent/protocol"
	"openflare/testing/controlplane"
	"openflare/testing/nstest"
	"openflare/testing/testsupport"
)

// `check` and `status` inspect the files the daemon writes wherever
// agent.json puts them: a data_dir of its own, and the main config, the
// access log (with it VAR: the pid file, temp and cache), the runtime
// config and the state outside it.
func TestCheckAndStatusFollowTheLayout(t *testing.T) {
	cp := controlPlane(t)
	ref := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1"))}})
	dir := nstest.TraversableTempDir(t)
	main := filepath.Join(dir, "nginx", "main.conf")
	state := filepath.Join(dir, "state", "agent-state.json")
	n := newNode(t, cp, map[string]any{
		"data_dir":           filepath.Join(dir, "node"),
		"main_config_path":   main,
		"access_log_path":    filepath.Join(dir, "var", "log", "edge", "access.log"),
		"runtime_config_dir": filepath.Join(dir, "runtime"),
		"state_path":         state,
	})
	defaultDD := n.dataDir
	// VAR is dir/var: where the harness looks for nginx's pid file, and
	// stops nginx at the end.
	n.dataDir = dir
	n.start()
	waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	waitServes(t, "app.test", "/", "origin-ok v1")
	master := n.nginxPID()
	if master == 0 {
		t.Fatal("no nginx master behind the pid file at VAR/run/nginx.pid")
	}
	for _, p := range []string{state, filepath.Join(dir, "runtime", "openresty_config.json"), filepath.Join(dir, "nginx", "mime.types")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the daemon wrote no %s: %v", p, err)
		}
	}
	for _, p := range []string{"etc/nginx/nginx.conf", "var/run/nginx.pid", "var/lib/openflare/agent-state.json", "etc/openflare/openresty_config.json"} {
		if _, err := os.Stat(filepath.Join(defaultDD, p)); err == nil {
			t.Errorf("%s at its default below data_dir", p)
		}
	}

	out, err := exec.Command(agentBinary(t), "-config", n.config, "status").CombinedOutput()
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	for _, want := range []string{
		"applied version:   " + ref.Version + " (checksum " + ref.Checksum + ")",
		fmt.Sprintf("running, master pid %d", master),
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	out, err = exec.Command(agentBinary(t), "-config", n.config, "check").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "landed config: "+main+" passes nginx -t") || strings.Contains(string(out), "error:") {
		t.Fatalf("check: %v\n%s", err, out)
	}
	// The file check tests is the one the daemon landed.
	if err := os.WriteFile(main, []byte(testsupport.ReadFile(t, main)+"\nbroken"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(agentBinary(t), "-config", n.config, "check").CombinedOutput(); err == nil {
		t.Fatalf("check passed the daemon's main config broken:\n%s", out)
	}
}
