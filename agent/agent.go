// Package agent is the run loop: start-up order, the channels to the
// server, and shutdown. Each long-running loop owns one goroutine and stops
// when its context is cancelled; nginx is never stopped on exit.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"openflare/agent/apply"
	"openflare/agent/config"
	"openflare/agent/controlplane"
	"openflare/agent/ipgroups"
	"openflare/agent/landing"
	"openflare/agent/logrotate"
	"openflare/agent/nginx"
	"openflare/agent/nodeip"
	"openflare/agent/observability"
	"openflare/agent/pages"
	"openflare/agent/policy"
	"openflare/agent/state"
	"openflare/agent/testhook"
	"openflare/agent/updater"
	"openflare/agent/wsclient"
	"openflare/internal/mailbox"
)

// Options wire an agent.
type Options struct {
	Config  *config.Config
	Version string // the agent's build version, sent as NodePayload.version
	// Fallback is the embedded fallback.conf.
	Fallback string
	Log      *slog.Logger
	// Update is the self-updater main started and configured
	// (updater.Start); nil without one.
	Update *updater.Updater
}

// Agent is one running agent.
type Agent struct {
	cfg     *config.Config
	version string
	log     *slog.Logger
	store   *state.Store
	cp      *controlplane.Client
	// extVersion is the nginx product version (NodePayload.ext_version).
	extVersion string
	engine     *apply.Engine
	ip         *nodeip.Detector
	obs        *observability.Collector
	ipg        *ipgroups.Store

	// statusNow asks for a beat before the interval is up: after IP groups
	// landed, so the server learns the new checksums at once and does not
	// send the same groups again.
	statusNow mailbox.Wake
	interval  atomic.Int64 // time.Duration: the server's heartbeat_interval once known
	wsAllowed atomic.Bool  // the server's websocket_upgrade_enabled
	// moreLogs: the last beat left access-log lines waiting (the per-beat
	// cap), so the next one goes out sooner.
	moreLogs atomic.Bool
	wsStats  wsclient.Stats
	work     workQueue

	pages     *pages.Syncer
	pagesWork pagesWork
	// geoip keeps the GeoLite2 databases current (geoiploop.go).
	geoip *geoipDBs
	// update replaces the agent's binary (updateloop.go); nil when off.
	update *selfUpdate
	// logs rotates nginx's logs (logloop.go).
	logs *logrotate.Rotator
}

// New opens local state and probes nginx; it does not talk to the server.
func New(ctx context.Context, o Options) (*Agent, error) {
	cfg := o.Config
	files := cfg.Layout()
	update := newSelfUpdate(cfg, o.Update, o.Log)
	store, err := state.Open(files.State, o.Log)
	if err != nil {
		return nil, err
	}
	if store.Get().NodeID == "" {
		// A placeholder until registration returns the server's id, as
		// the reference agent does; the server ignores the node_id we
		// send anyway.
		b := make([]byte, 8)
		rand.Read(b)
		if err := store.Update(func(s *state.State) { s.NodeID = "node-" + hex.EncodeToString(b) }); err != nil {
			return nil, err
		}
	}
	token := cfg.AgentToken
	if token == "" {
		token = cfg.DiscoveryToken
	}
	a := &Agent{
		cfg:       cfg,
		version:   o.Version,
		log:       o.Log,
		store:     store,
		cp:        controlplane.New(cfg.ServerURL, token, o.Version, cfg.RequestTimeout),
		ip:        nodeip.New(),
		work:      newWorkQueue(),
		statusNow: mailbox.NewWake(),
		pagesWork: pagesWork{box: mailbox.New()},
		update:    update,
	}
	// What one reply may cost follows the memory limit in force
	// (GOMEMLIMIT or memory_limit).
	a.cp.Budgets = controlplane.BudgetsFor(debug.SetMemoryLimit(-1))
	a.interval.Store(int64(cfg.HeartbeatInterval))
	paths := landing.FromConfig(cfg)
	a.pages = &pages.Syncer{Dir: files.PagesDir, CP: a.cp, Log: o.Log}
	a.geoip = newGeoIP(cfg, o.Log)
	a.geoip.published = a.publishSnapshots
	if a.ipg, err = ipgroups.Open(files.RuntimeConfigDir, o.Log); err != nil {
		return nil, err
	}
	a.obs, err = observability.New(observability.Options{
		AccessLogPath:     files.AccessLog,
		StateFile:         files.ObservabilityState,
		BufferPath:        files.ObservabilityBuffer,
		DataDir:           files.DataDir,
		MainConfigPath:    files.Main,
		ObservabilityPort: cfg.ObservabilityPort,
		ReplayMinutes:     cfg.ObservabilityReplayMinutes,
		Log:               o.Log,
		// Test builds may skew it to place a minute boundary (testhook).
		Now: testhook.Now,
	})
	if err != nil {
		return nil, err
	}
	// Releases before one-parse applies validated a staged copy here.
	os.RemoveAll(files.ApplyStaging)
	a.engine = &apply.Engine{
		CP:        a.cp,
		Store:     store,
		Paths:     paths,
		Tree:      landing.Tree{Paths: paths, DataDir: files.DataDir, StateDir: files.StateDir},
		Policy:    policy.Policy{Trusted: cfg.TemplatePolicy == "trusted", Allowed: cfg.AllowedPaths, AllowLinkLocalOrigins: cfg.AllowLinkLocalOrigins, Blind: testhook.PolicyBlind()},
		Fallback:  o.Fallback,
		BackupDir: files.ApplyBackup,
		ParseDir:  files.PolicyProbe,
		StageDir:  files.SupportStage,
		Resolve:   nginx.ResolveHost,
		Log:       o.Log,

		OnIPGroupsReferenced: a.reconcileIPGroups,
		OnLanded:             a.geoip.landed,
		OnReported:           a.beatSoon,
		OnPagesReferenced:    a.setPages,
	}
	a.engine.Nginx = nginxFor(ctx, cfg, paths, o.Log)
	if node, ok := a.engine.Nginx.(nginx.Node); ok {
		a.extVersion = node.Ctl.Caps.Version
	}
	a.logs = newLogRotation(cfg, paths, a.engine.Nginx, a.obs, o.Log)
	return a, nil
}

// nginxFor probes the configured binary: the agent's data plane, or the
// stand-in that says why there is none (applies then fail, not blocklisted,
// until it is installed).
func nginxFor(ctx context.Context, cfg *config.Config, paths landing.Paths, log *slog.Logger) apply.Nginx {
	node, err := nginx.Open(ctx, cfg.OpenRestyPath, cfg.NginxUser, nginxFiles(paths), log)
	if err != nil {
		log.Error("nginx binary not usable; applies will fail until it is installed", "err", err)
		return nginx.Unusable{Why: err.Error()}
	}
	log.Info("nginx found", "binary", node.Ctl.Caps.Binary, "caps", node.Ctl.Caps.Summary())
	for _, n := range node.Notes() {
		log.Info("nginx adaptation", "note", n)
	}
	if w, err := node.Worker(""); err != nil {
		log.Error("nginx worker identity", "err", err)
	} else {
		log.Info("nginx worker identity", "workers", w.String(), "why", w.Why)
	}
	return node
}

// nginxFiles are the paths of the node's layout that nginx control needs.
func nginxFiles(p landing.Paths) nginx.Files {
	return nginx.Files{MainConfig: p.Main, PIDFile: p.PID, ErrorLog: p.ErrorLog}
}

// Run starts nginx from the last landed config, registers when needed, and
// then keeps the channels to the server until ctx is cancelled. It never
// returns because the server is unreachable.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.engine.Boot(ctx); err != nil {
		a.log.Error("start from the landed config", "err", err)
	}
	s := a.newSession()
	s.register(ctx)
	a.restorePages()
	var loops sync.WaitGroup
	loops.Go(func() { a.applyLoop(ctx) })
	loops.Go(func() { a.pagesLoop(ctx) })
	loops.Go(func() { a.geoip.loop(ctx) })
	loops.Go(func() { a.update.loop(ctx) })
	loops.Go(func() { a.logLoop(ctx) })
	s.run(ctx)
	loops.Wait()
	a.cp.CloseIdle()
	a.obs.Close()
	a.log.Info("agent stopped; nginx left running")
	return nil
}
