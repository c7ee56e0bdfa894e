package command

import (
	"context"
	"fmt"
	"io"
	"os"

	"openflare/agent/config"
	"openflare/agent/landing"
	"openflare/agent/nginx"
	"openflare/internal/cliflag"
)

// loadConfig parses a command's flags (-config) and loads agent.json; a nil
// config comes with the exit code. warn prints the load's warnings.
func loadConfig(name, configPath string, args []string, stderr io.Writer, warn bool) (*config.Config, string, int) {
	fs := cliflag.New(name, stderr)
	fs.StringVar(&configPath, "config", configPath, "path of agent.json")
	if err := fs.Parse(args); err != nil {
		return nil, configPath, ExitUsage
	}
	cfg, warnings, err := config.Load(configPath, os.Getenv)
	for _, w := range warnings {
		if warn {
			fmt.Fprintln(stderr, "warning:", w)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return nil, configPath, 1
	}
	return cfg, configPath, 0
}

// Check validates agent.json and shows the resolved configuration, tokens
// masked, plus what the installed nginx needs adapted.
func Check(configPath string, args []string, stdout, stderr io.Writer) int {
	cfg, configPath, code := loadConfig("check", configPath, args, stderr, true)
	if cfg == nil {
		return code
	}
	fmt.Fprintf(stdout, "configuration (%s):\n%s", configPath, cfg.Describe())
	// The daemon's layout, as agent.New takes it: check inspects the files
	// the daemon writes.
	layout := cfg.Layout()
	paths := landing.FromConfig(cfg)
	files := nginx.Files{MainConfig: paths.Main, PIDFile: paths.PID, ErrorLog: paths.ErrorLog}
	node, err := nginx.Open(context.Background(), cfg.OpenRestyPath, cfg.NginxUser, files, nil)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	caps := node.Ctl.Caps
	fmt.Fprintf(stdout, "\nnginx: %s\n", caps.Summary())
	for _, n := range node.Notes() {
		fmt.Fprintf(stdout, "  adaptation: %s\n", n)
	}
	landed, _ := os.ReadFile(paths.Main)
	workers, err := node.Workers(string(landed), false)
	if err != nil {
		fmt.Fprintln(stderr, "error: nginx workers:", err)
		return 1
	}
	fmt.Fprintf(stdout, "nginx workers: %s (%s)\n", workers, workers.Why)
	tree := landing.Tree{Paths: paths, DataDir: layout.DataDir, StateDir: layout.StateDir}
	failed := false
	for _, p := range tree.Unreadable(workers) {
		if p.Fixed {
			fmt.Fprintln(stdout, "note:", p)
			continue
		}
		fmt.Fprintln(stderr, "error:", p)
		failed = true
	}
	if failed {
		return 1
	}
	if !caps.HasLua() {
		fmt.Fprintln(stderr, "error: the nginx binary has no Lua module; rendered configs need lua-nginx-module")
		return 1
	}
	if !caps.StubStatus {
		fmt.Fprintln(stderr, "error: the nginx binary has no stub_status module; health checks and the safe fallback need it")
		return 1
	}
	if _, err := os.Stat(paths.Main); err != nil {
		fmt.Fprintf(stdout, "landed config: none yet (%s)\n", paths.Main)
		return 0
	}
	if err := node.Test(context.Background(), paths.Main); err != nil {
		fmt.Fprintln(stderr, "error: landed config:", err)
		return 1
	}
	fmt.Fprintf(stdout, "landed config: %s passes nginx -t\n", paths.Main)
	return 0
}
