// Command openflare-agent keeps a local OpenResty/nginx in step with an
// OpenFlare control plane. This file only parses flags and wires packages;
// the run loop lives in package agent.
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/openflare/openflare-agent/agent"
	"github.com/openflare/openflare-agent/agent/config"
	"github.com/openflare/openflare-agent/agent/landing"
	"github.com/openflare/openflare-agent/agent/nginx"
	"github.com/openflare/openflare-agent/agent/osuser"
	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/render"
)

// Stamped at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

//go:embed fallback.conf
var fallbackConf string

const usage = `usage:
  openflare-agent [-config agent.json]            run the agent
  openflare-agent [-config agent.json] check      validate agent.json, the nginx binary and the landed config
  openflare-agent [-config agent.json] status     show the node's state from local files (works offline)
  openflare-agent render -snapshot active.json -out DIR
                                                  render an E4 reply to files, without touching nginx
  openflare-agent -version                        print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("openflare-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	configPath := fs.String("config", "./agent.json", "path of agent.json")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "openflare-agent %s (commit %s) %s %s/%s\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	}
	rest := fs.Args()
	cmd := ""
	if len(rest) > 0 {
		cmd, rest = rest[0], rest[1:]
	}
	switch cmd {
	case "":
		return runAgent(*configPath, stderr)
	case "check":
		return check(*configPath, rest, stdout, stderr)
	case "render":
		return renderCmd(rest, stdout, stderr)
	case "status":
		return status(*configPath, rest, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "unknown command %q\n%s", cmd, usage)
		return 2
	}
}

func newLogger(w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	switch strings.ToLower(strings.TrimSpace(os.Getenv("LOG_LEVEL"))) {
	case "debug":
		level = slog.LevelDebug
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

func runAgent(configPath string, stderr io.Writer) int {
	log := newLogger(os.Stdout)
	cfg, warnings, err := config.Load(configPath, os.Getenv)
	for _, w := range warnings {
		log.Warn(w)
	}
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	// Small-device runtime defaults; the usual environment variables win.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(cfg.MemoryLimit)
	}
	if os.Getenv("GOGC") == "" {
		// The heap at rest is ~1.5 MiB and allocation is slow between
		// beats: collecting at +50% instead of +100% keeps RSS about a MiB
		// lower for no measurable CPU.
		debug.SetGCPercent(50)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("openflare-agent starting", "version", version, "config", configPath, "server", cfg.ServerURL)
	a, err := agent.New(ctx, agent.Options{Config: cfg, Version: version, Fallback: fallbackConf, Log: log})
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	if err := a.Run(ctx); err != nil {
		log.Error("agent stopped", "err", err)
		return 1
	}
	return 0
}

// check validates agent.json and shows the resolved configuration, tokens
// masked, plus what the installed nginx needs adapted.
func check(configPath string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&configPath, "config", configPath, "path of agent.json")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, warnings, err := config.Load(configPath, os.Getenv)
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	fmt.Fprintf(stdout, "configuration (%s):\n%s", configPath, cfg.Describe())
	caps, err := nginx.Probe(context.Background(), cfg.OpenRestyPath)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nnginx: %s\n", caps.Summary())
	adapter := &nginx.Adapter{Caps: caps, Host: osuser.CurrentHost(), NginxUser: cfg.NginxUser}
	for _, n := range adapter.Notes() {
		fmt.Fprintf(stdout, "  adaptation: %s\n", n)
	}
	paths := landing.FromConfig(cfg)
	landed, _ := os.ReadFile(paths.Main)
	workers, err := adapter.Worker(nginx.TemplateUser(string(landed)))
	if err != nil {
		fmt.Fprintln(stderr, "error: nginx workers:", err)
		return 1
	}
	fmt.Fprintf(stdout, "nginx workers: %s (%s)\n", workers, workers.Why)
	tree := landing.Tree{Paths: paths, DataDir: cfg.DataDir, StateDir: filepath.Dir(cfg.StatePath)}
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
	ctl := &nginx.Ctl{Caps: caps, MainConfig: paths.Main, PIDFile: paths.PID, ErrorLog: paths.ErrorLog}
	if err := ctl.Test(context.Background(), paths.Main); err != nil {
		fmt.Fprintln(stderr, "error: landed config:", err)
		return 1
	}
	fmt.Fprintf(stdout, "landed config: %s passes nginx -t\n", paths.Main)
	return 0
}

// status prints the node's state from local files only.
func status(configPath string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&configPath, "config", configPath, "path of agent.json")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, _, err := config.Load(configPath, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	fmt.Fprint(stdout, agent.Status(cfg, time.Now()))
	return 0
}

// renderCmd renders an E4 reply (its data object or the whole envelope)
// into DIR: nginx.conf and openflare_routes.conf with placeholders intact,
// as the server checksums them, and the support files under files/.
func renderCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	snapshot := fs.String("snapshot", "", "E4 reply (JSON) to render")
	out := fs.String("out", "", "directory to write the rendered files to")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *snapshot == "" || *out == "" {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ac, err := readSnapshot(*snapshot)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	o, err := render.Config(ac.SourceConfigJSON, ac.SupportFiles)
	if err != nil {
		fmt.Fprintf(stderr, "error: render version %s: %v\n", ac.Version, err)
		return 1
	}
	files := map[string]string{"nginx.conf": o.Main, "openflare_routes.conf": o.Route}
	for _, f := range o.Files {
		files[filepath.Join("files", filepath.FromSlash(f.Path))] = f.Content
	}
	for name, content := range files {
		p := filepath.Join(*out, name)
		if !strings.HasPrefix(p, filepath.Clean(*out)+string(filepath.Separator)) {
			fmt.Fprintf(stderr, "error: support file %q escapes the output directory\n", name)
			return 1
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".key") || name == filepath.Join("files", "openresty_config.json") {
			mode = 0o600 // private keys, and the raw source with basic-auth passwords
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
	}
	sum := o.Checksum()
	fmt.Fprintf(stdout, "rendered version %s into %s (%d support files)\n", ac.Version, *out, len(o.Files))
	if sum == ac.Checksum {
		fmt.Fprintf(stdout, "checksum matches: %s\n", sum)
	} else {
		fmt.Fprintf(stdout, "checksum MISMATCH: rendered %s, server %s\n", sum, ac.Checksum)
	}
	return 0
}

func readSnapshot(path string) (*protocol.ActiveConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var env protocol.Envelope
	if json.Unmarshal(data, &env) == nil && len(env.Data) > 0 && string(env.Data) != "null" {
		data = env.Data
	}
	var ac protocol.ActiveConfig
	if err := json.Unmarshal(data, &ac); err != nil {
		return nil, fmt.Errorf("%s: not an E4 reply: %w", path, err)
	}
	if ac.SourceConfigJSON == "" {
		return nil, errors.New(path + ": no source_config_json")
	}
	return &ac, nil
}
