// Command applybench measures applies (part of `make bench`): publish →
// serving over the WebSocket with 10, 100 and 1000 routes next to nginx's
// own `-t` time for the same config, how soon the apply log follows,
// applies under load (what clients see go wrong), and the agent at rest
// with 1000 routes and a 100 000-entry IP group. Figures are reported,
// never asserted. It runs in private namespaces (port 80 is nginx's) with
// the release binary: `make build` first.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/benchkit"
	"openflare/testing/controlplane"
	"openflare/testing/loadgen"
	"openflare/testing/nstest"
)

var (
	agentBin   = flag.String("agent", "bin/openflare-agent", "release agent binary")
	routeSets  = flag.String("routes", "10,100,1000", "route counts for publish→serving")
	publishes  = flag.Int("publishes", 20, "publishes per measurement")
	loadRate   = flag.Int("rate", 500, "requests per second during applies under load")
	idleFor    = flag.Duration("idle", 5*time.Minute, "how long the agent rests with 1000 routes and 100 000 IP-group entries (0: not measured)")
	withLoad   = flag.Bool("load", true, "measure applies under load")
	idleRoutes = flag.Int("idle-routes", 1000, "routes of the config at rest")
	idleIPs    = flag.Int("idle-ips", 100_000, "IP-group entries of the config at rest")
)

func main() {
	flag.Parse()
	bin, err := filepath.Abs(*agentBin)
	if err != nil {
		benchkit.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		benchkit.Fatal(fmt.Errorf("%v (run `make build`)", err))
	}
	os.Exit(nstest.Run(func() int { return live(bin) }, nil))
}

func live(bin string) int {
	origin := startOrigin()
	var rows [][3]string
	emit := func(what, value, note string) {
		rows = append(rows, [3]string{what, value, note})
		fmt.Fprintf(os.Stderr, "%s: %s (%s)\n", what, value, note)
	}
	for _, f := range strings.Split(*routeSets, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			benchkit.Fatal(fmt.Errorf("-routes: %q", f))
		}
		latency(bin, origin, n, emit)
	}
	if *withLoad {
		underLoad(bin, origin, 100, emit)
	}
	if *idleFor > 0 {
		atRest(bin, origin, emit)
	}

	fmt.Println("| measure | value | notes |")
	fmt.Println("|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s |\n", r[0], r[1], r[2])
	}
	return 0
}

// node is a control plane and an agent serving routes routes.
type node struct {
	cp     *controlplane.Server
	agent  *benchkit.Agent
	routes int
	origin string
	dir    string
}

// start publishes src (after the IP groups it references) and starts an
// agent that serves it, connected over the WebSocket.
func start(bin, origin string, routes int, src controlplane.Source, groups ...protocol.WAFIPGroup) *node {
	dir, err := os.MkdirTemp("", "openflare-applybench-")
	if err != nil {
		benchkit.Fatal(err)
	}
	// nginx workers run as another user when this runs as root.
	os.Chmod(dir, 0o755)
	cp := controlplane.New()
	if err := cp.Start(); err != nil {
		benchkit.Fatal(err)
	}
	cp.UpdateSettings("", func(s *protocol.AgentSettings) { s.HeartbeatInterval = 3000; s.WebsocketUpgradeEnabled = true })
	for _, g := range groups {
		cp.SetIPGroup(g)
	}
	if _, err := cp.Publish(src.JSON(), nil); err != nil {
		benchkit.Fatal(err)
	}
	n := &node{cp: cp, agent: benchkit.StartAgent(bin, dir, cp, nil), routes: routes, origin: origin, dir: dir}
	benchkit.WaitServes(fmt.Sprintf("r%d.bench", routes-1), "gen 0", 5*time.Millisecond)
	if err := cp.WaitWS(context.Background(), cp.Nodes()[0].NodeID, true); err != nil {
		benchkit.Fatal(err)
	}
	return n
}

// stop ends the agent and the nginx it started (the agent never stops
// nginx), so the next node has port 80.
func (n *node) stop() {
	n.agent.Stop()
	if b, err := os.ReadFile(n.agent.Data("var", "run", "nginx.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			syscall.Kill(pid, syscall.SIGQUIT)
			for i := 0; i < 500 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	n.cp.Close()
	os.RemoveAll(n.dir)
}

// source is a config of routes routes whose origin answers "gen <gen>".
func source(origin string, routes, gen int) controlplane.Source {
	var s controlplane.Source
	for i := 0; i < routes; i++ {
		s.Routes = append(s.Routes, controlplane.Route{
			ID: uint64(i + 1), SiteName: fmt.Sprintf("site%d", i), Domains: []string{fmt.Sprintf("r%d.bench", i)},
			OriginURL: origin + "/gen" + strconv.Itoa(gen),
		})
	}
	s.OpenResty = map[string]any{"origin_error_page_enabled": false}
	return s
}

// publish publishes gen and returns its version, how long until a random
// route serves it, and how long after that the apply log arrived
// (negative: before).
func (n *node) publish(gen int, src controlplane.Source) (version string, serving, logLag time.Duration) {
	start := time.Now()
	ref, err := n.cp.Publish(src.JSON(), nil)
	if err != nil {
		benchkit.Fatal(err)
	}
	logged := make(chan time.Time, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		n.cp.WaitApplyLog(ctx, func(r protocol.ApplyLogRecord) bool { return r.Version == ref.Version })
		logged <- time.Now()
	}()
	host := fmt.Sprintf("r%d.bench", rand.IntN(n.routes))
	want := "gen " + strconv.Itoa(gen)
	for benchkit.Get(host) != want {
		if time.Since(start) > 2*time.Minute {
			benchkit.Fatal(fmt.Errorf("%s never served %q", host, want))
		}
		time.Sleep(time.Millisecond)
	}
	served := time.Now()
	return ref.Version, served.Sub(start), (<-logged).Sub(served)
}

// step is one phase of an apply, as its "apply finished" line timed it.
type step struct {
	name string
	d    time.Duration
}

// applySteps reads the phases of each version's "apply finished" line
// (phases="wait=80ms fetch=1.2ms render=…"), in the order they ran.
func (n *node) applySteps() map[string][]step {
	log, err := os.ReadFile(filepath.Join(n.dir, "agent.log"))
	if err != nil {
		return nil
	}
	out := map[string][]step{}
	for _, l := range strings.Split(string(log), "\n") {
		_, rest, ok := strings.Cut(l, `msg="apply finished"`)
		if !ok {
			continue
		}
		_, version, ok := strings.Cut(rest, "version=")
		if !ok {
			continue
		}
		version, _, _ = strings.Cut(version, " ")
		_, p, ok := strings.Cut(rest, `phases="`)
		if !ok {
			continue
		}
		p, _, _ = strings.Cut(p, `"`)
		var steps []step
		for _, f := range strings.Fields(p) {
			name, v, _ := strings.Cut(f, "=")
			if d, err := time.ParseDuration(v); err == nil {
				steps = append(steps, step{name, d})
			}
		}
		out[version] = steps
	}
	return out
}

// breakdown is the median of each phase over the publishes (versions),
// in the order they ran, then what the phases leave of each publish's
// time to serving (other: the WebSocket push, the client's poll).
func breakdown(steps map[string][]step, versions []string, serving []time.Duration) string {
	var order []string
	by := map[string][]time.Duration{}
	var other []time.Duration
	for i, v := range versions {
		rest := serving[i]
		for _, s := range steps[v] {
			if _, seen := by[s.name]; !seen {
				order = append(order, s.name)
			}
			by[s.name] = append(by[s.name], s.d)
			rest -= s.d
		}
		other = append(other, rest)
	}
	if len(order) == 0 {
		return "n/a"
	}
	var out []string
	for _, name := range order {
		d := by[name]
		// A phase some applies did not have (no wait after a heartbeat)
		// counts as zero in those.
		for len(d) < len(versions) {
			d = append(d, 0)
		}
		out = append(out, name+" "+benchkit.Duration(benchkit.Pct(d, 50)))
	}
	return strings.Join(append(out, "other "+benchkit.Duration(benchkit.Pct(other, 50))), ", ")
}

// waited is how long each publish's apply was held back by the push's
// spread (its "wait" phase).
func waited(steps map[string][]step, versions []string) []time.Duration {
	out := make([]time.Duration, len(versions))
	for i, v := range versions {
		for _, s := range steps[v] {
			if s.name == "wait" {
				out[i] = s.d
			}
		}
	}
	return out
}

// nginxTest times nginx's own -t of the live config (median of five).
func (n *node) nginxTest() time.Duration {
	nginx, _ := exec.LookPath("nginx")
	var d []time.Duration
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		cmd := exec.Command(nginx, "-e", n.agent.Data("var", "log", "openflare", "error.log"), "-t", "-q", "-c", n.agent.Data("etc", "nginx", "nginx.conf"))
		if out, err := cmd.CombinedOutput(); err != nil {
			benchkit.Fatal(fmt.Errorf("nginx -t: %v: %s", err, out))
		}
		d = append(d, time.Since(t0))
	}
	return benchkit.Pct(d, 50)
}

func latency(bin, origin string, routes int, emit func(string, string, string)) {
	n := start(bin, origin, routes, source(origin, routes, 0))
	defer n.stop()
	var versions []string
	var serving, lags []time.Duration
	for i := 1; i <= *publishes; i++ {
		v, s, lag := n.publish(i, source(origin, routes, i))
		versions, serving, lags = append(versions, v), append(serving, s), append(lags, lag)
	}
	t := n.nginxTest()
	steps := n.applySteps()
	own := make([]time.Duration, len(serving))
	for i, w := range waited(steps, versions) {
		own[i] = serving[i] - w
	}
	med, ownMed := benchkit.Pct(serving, 50), benchkit.Pct(own, 50)
	emit(fmt.Sprintf("publish→serving, %d routes", routes),
		fmt.Sprintf("median %s, p95 %s; without the push's wait median %s, p95 %s", benchkit.Duration(med), benchkit.Duration(benchkit.Pct(serving, 95)), benchkit.Duration(ownMed), benchkit.Duration(benchkit.Pct(own, 95))),
		fmt.Sprintf("%d publishes over the WebSocket; nginx -t alone %s (×%.1f, without the wait ×%.1f; target ≤ 2.2); target 100 routes ≤ 250 ms", len(serving), benchkit.Duration(t), float64(med)/float64(t), float64(ownMed)/float64(t)))
	emit(fmt.Sprintf("where an apply's time goes, %d routes", routes), breakdown(steps, versions, serving),
		"median of each step over the publishes, from the agent's \"apply finished\" lines: wait is the push's spread (a random part of 250 ms, kept on purpose), parse the template policy's nginx parse, test the agent's nginx -t, reload until a new worker runs, handover until the old ones stopped accepting; other is the rest of publish→serving (the WebSocket push, the client's poll)")
	emit(fmt.Sprintf("apply log after serving, %d routes", routes),
		fmt.Sprintf("median %s, max %s", benchkit.Duration(benchkit.Pct(lags, 50)), benchkit.Duration(benchkit.Pct(lags, 100))),
		"time from the new config serving to the apply log at the control plane (target ≤ 30 ms)")
}

func underLoad(bin, origin string, routes int, emit func(string, string, string)) {
	n := start(bin, origin, routes, source(origin, routes, 0))
	defer n.stop()
	master := masterPID(n)
	load := loadgen.Start(context.Background(), loadgen.Options{
		Addr: "127.0.0.1:80", Host: "r0.bench", Path: "/", Rate: *loadRate, Conns: 16,
		Download: "/big", DownloadSize: loadgen.DownloadSize, Downloads: 3,
	})
	began := time.Now()
	for i := 1; i <= *publishes; i++ {
		n.publish(i, source(origin, routes, i))
		time.Sleep(200 * time.Millisecond)
	}
	res := load.Stop()
	took := time.Since(began)
	restarted := ""
	if masterPID(n) != master {
		restarted = "; nginx was RESTARTED"
	}
	emit("applies under load",
		fmt.Sprintf("%d failed, %d truncated", res.Failed, res.Truncated),
		fmt.Sprintf("%d publishes, %d routes, %.0f requests/s on 16 keep-alive connections, %d slow 5 MiB downloads completed, %d idle closes retried (target 0 failed, 0 truncated)%s",
			*publishes, routes, float64(res.Requests)/took.Seconds(), res.Downloads, res.Retried, restarted))
}

func masterPID(n *node) int {
	b, _ := os.ReadFile(n.agent.Data("var", "run", "nginx.pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func atRest(bin, origin string, emit func(string, string, string)) {
	src := source(origin, *idleRoutes, 0)
	src.WAF = &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), controlplane.IPMatchRuleGroup(2, "deny", 7)}}
	list := make([]string, 0, *idleIPs)
	for i := 0; len(list) < *idleIPs; i++ {
		list = append(list, fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff))
	}
	n := start(bin, origin, *idleRoutes, src, protocol.WAFIPGroup{ID: 7, Name: "deny", Type: "manual", Enabled: true, IPList: list})
	defer n.stop()
	// Settle: the IP groups land after the apply, and the first beats
	// carry their checksums.
	time.Sleep(10 * time.Second)
	pid := n.agent.PID()
	cpu0 := benchkit.CPUTime(pid)
	time.Sleep(*idleFor)
	perMin := time.Duration(float64(benchkit.CPUTime(pid)-cpu0) * float64(time.Minute) / float64(*idleFor))
	note := fmt.Sprintf("%d routes, a %d-entry IP group, WebSocket, status every 3 s, measured over %v", *idleRoutes, *idleIPs, *idleFor)
	emit("agent CPU at rest, large config", benchkit.Duration(perMin)+" per minute", note+" (target ≤ 30 ms/min)")
	emit("agent RSS at rest, large config", benchkit.MiB(benchkit.RSS(pid)), benchkit.RSSParts(pid)+"; target ≤ 12 MiB")
}

// startOrigin serves loadgen's origin on loopback.
func startOrigin() string {
	srv := &http.Server{Handler: loadgen.Origin()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		benchkit.Fatal(err)
	}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String()
}
