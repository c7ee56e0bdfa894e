// GOMAXPROCS follows the CPUs and the cgroup's limit found at start, and is
// not looked up again: the runtime's monitor thread would otherwise redo
// the lookup every second it is awake, most of the agent's syscalls at rest
// after its own, and a router's CPUs do not change under a running agent.
//
//go:debug updatemaxprocs=0

// Command openflare-agent keeps a local OpenResty/nginx in step with an
// OpenFlare control plane. This file only parses flags and wires packages;
// the run loop lives in package agent.
package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"openflare/agent"
	"openflare/agent/command"
	"openflare/agent/config"
	"openflare/agent/testhook"
	"openflare/agent/updater"
	"openflare/internal/cliflag"
)

// Stamped at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

//go:embed fallback.conf
var fallbackConf []byte

const usage = `usage:
  openflare-agent [-config agent.json]            run the agent
  openflare-agent [-config agent.json] check      validate agent.json, the nginx binary and the landed config
  openflare-agent [-config agent.json] status     show the node's state from local files (works offline)
  openflare-agent render -snapshot active.json -out DIR
                                                  render an E4 reply to files, without touching nginx
  openflare-agent [-config agent.json] join <server_url> [<discovery_token>]
                                                  write them into agent.json (default /etc/openflare/agent.json)
                                                  and restart the service; the token may come from
                                                  OPENFLARE_DISCOVERY_TOKEN instead
  openflare-agent -version                        print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	// Resolved before anything can fail: a failing start of a freshly
	// updated binary rolls back, and needs to know which file it is.
	exe, exeErr := updater.Executable()
	start := func(log *slog.Logger) *updater.Updater {
		if exeErr != nil {
			log.Warn("self-update unavailable", "err", exeErr)
			return nil
		}
		return updater.Start(exe, version, log)
	}
	fs := cliflag.New("openflare-agent", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	configPath := fs.String("config", "./agent.json", "path of agent.json")
	showVersion := fs.Bool("version", "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if daemonArgs(args) {
			// A flag the unit passes and this version rejects.
			start(newLogger(os.Stdout)).Abort(fmt.Errorf("command line: %w", err))
		}
		return command.ExitUsage
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
		return runAgent(*configPath, start)
	case "check":
		return command.Check(*configPath, rest, stdout, stderr)
	case "render":
		return command.Render(rest, stdout, stderr)
	case "status":
		return command.Status(*configPath, rest, stdout, stderr)
	case "join":
		// Not ./agent.json: the file the installed service reads.
		path := command.JoinConfigPath
		if fs.Given("config") {
			path = *configPath
		}
		return command.Join(path, rest, os.Getenv, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "unknown command %q\n%s", cmd, usage)
		return command.ExitUsage
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

// daemonArgs reports whether a command line that failed to parse was meant
// to run the agent: an operator's mistyped status must not roll an update
// back.
func daemonArgs(args []string) bool {
	for _, a := range args {
		switch name := strings.TrimLeft(a, "-"); {
		case a == "check" || a == "status" || a == "render" || a == "join":
			return false
		case name != a && (name == "version" || strings.HasPrefix(name, "version=")):
			return false
		}
	}
	return true
}

func runAgent(configPath string, start func(*slog.Logger) *updater.Updater) int {
	log := newLogger(os.Stdout)
	// Counted before agent.json is read: a release that rejects it must
	// still roll back.
	up := start(log)
	// A test build dies here when told to: a release that crashes at
	// every start, which the boot count must roll back.
	testhook.Crash("start-" + version)
	cfg, warnings, err := config.Load(configPath, os.Getenv)
	for _, w := range warnings {
		log.Warn(w)
	}
	if err != nil {
		log.Error("cannot start", "err", err)
		up.Abort(err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	up.Configure(ctx, updater.Config{APIURL: cfg.UpdateAPIURL, Repo: cfg.UpdateRepo, PublicKey: cfg.UpdatePublicKey, ConfirmTimeout: cfg.UpdateConfirmTimeout})
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
	log.Info("openflare-agent starting", "version", version, "config", configPath, "server", cfg.ServerURL)
	a, err := agent.New(ctx, agent.Options{Config: cfg, Version: version, Fallback: string(fallbackConf), Log: log, Update: up})
	if err != nil {
		log.Error("cannot start", "err", err)
		if ctx.Err() == nil {
			up.Abort(err)
		}
		return 1
	}
	if err := a.Run(ctx); err != nil {
		log.Error("agent stopped", "err", err)
		return 1
	}
	return 0
}
