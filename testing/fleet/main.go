// Command fleet runs a fleet of real agent processes (default 200) against
// one test control plane, inside private namespaces, and prints what the
// server sees: registrations, steady-state traffic per node, the return of
// every node after the server was stopped, the spread of the HTTP beats
// after every WebSocket dropped, and the spread of the E4 fetches after a
// publish. The agents have no nginx (openresty_path names a missing
// binary, which they report): the fleet measures the channels, not the
// data plane. `make bench` runs it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/benchkit"
	"openflare/testing/controlplane"
	"openflare/testing/nstest"
)

var (
	count    = flag.Int("agents", 200, "agent processes")
	agentBin = flag.String("agent", "", "agent binary to run; empty builds this module's once")
	steady   = flag.Duration("steady", 30*time.Second, "how long steady-state traffic is measured")
	outages  = flag.String("outages", "20s,90s", "how long the server is stopped, one measurement each, comma-separated")
	after    = flag.Duration("after", 10*time.Second, "how long connection attempts are counted after the server returns")
)

// binEnv hands the binary built outside to the run inside the namespaces.
const binEnv = "OPENFLARE_FLEET_AGENT"

func main() {
	flag.Parse()
	if os.Getenv("OPENFLARE_NSTEST_ROLE") != "" {
		os.Exit(nstest.Run(func() int { return live(os.Getenv(binEnv)) }, nil))
	}
	stops()
	os.Exit(outside())
}

// outside builds the agent unless -agent names one, then runs the fleet
// inside the namespaces.
func outside() int {
	bin := *agentBin
	if bin == "" {
		dir, err := os.MkdirTemp("", "openflare-fleet-bin-")
		if err != nil {
			benchkit.Fatal(err)
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "openflare-agent")
		fmt.Fprintln(os.Stderr, "fleet: building the agent")
		build := exec.Command("go", "build", "-tags", "nethttpomithttp2", "-trimpath", "-ldflags", "-s -w -X main.version=fleet", "-o", bin, ".")
		build.Dir = moduleRoot()
		build.Env = append(os.Environ(), "CGO_ENABLED=0") // as `make build` links it
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			benchkit.Fatal(fmt.Errorf("build the agent: %w", err))
		}
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		benchkit.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		benchkit.Fatal(err)
	}
	os.Setenv(binEnv, bin)
	start := time.Now()
	code := nstest.Run(func() int { return live(bin) }, nil)
	fmt.Fprintf(os.Stderr, "fleet: %v in all\n", time.Since(start).Round(time.Second))
	return code
}

// stops is -outages.
func stops() []time.Duration {
	var out []time.Duration
	for _, s := range strings.Split(*outages, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d <= 0 {
			benchkit.Fatal(fmt.Errorf("-outages: %q is not a duration", s))
		}
		out = append(out, d)
	}
	return out
}

func moduleRoot() string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		benchkit.Fatal(fmt.Errorf("no go.mod: run from the module (%v)", err))
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// fleet is the control plane, the front the agents talk to, and the agents.
type fleet struct {
	bin    string
	dir    string
	cp     *controlplane.Server
	front  *front
	reqs   *requests
	agents []*exec.Cmd
	rows   [][3]string
}

func (f *fleet) row(what, value, note string) {
	f.rows = append(f.rows, [3]string{what, value, note})
	fmt.Fprintf(os.Stderr, "fleet: %s = %s\n", what, value)
}

func live(bin string) int {
	dir, err := os.MkdirTemp("", "openflare-fleet-")
	if err != nil {
		benchkit.Fatal(err)
	}
	defer os.RemoveAll(dir)
	f := &fleet{bin: bin, dir: dir, reqs: &requests{seen: map[string][]time.Time{}}}
	f.cp = controlplane.New()
	f.cp.Logger = slog.New(f.reqs)
	if err := f.cp.Start(); err != nil {
		benchkit.Fatal(err)
	}
	defer f.cp.Close()
	if f.front, err = newFront(strings.TrimPrefix(f.cp.URL(), "http://")); err != nil {
		benchkit.Fatal(err)
	}
	defer f.front.close()
	// The server's defaults: a beat every 3 s, the WebSocket on.
	f.cp.UpdateSettings("", func(s *protocol.AgentSettings) { s.HeartbeatInterval = 3000; s.WebsocketUpgradeEnabled = true })
	f.publish()

	began := time.Now()
	f.start()
	defer f.stop()
	f.waitConnected()
	took := time.Since(began)
	f.row("agents", fmt.Sprint(*count), fmt.Sprintf("processes of %s, no nginx; %d CPUs", filepath.Base(bin), runtime.NumCPU()))
	f.row("nodes registered", fmt.Sprint(len(f.cp.Nodes())), fmt.Sprintf("discovery token; all on the WebSocket %s after the first start", benchkit.Duration(took)))

	f.steadyState()

	f.stop()
	began = time.Now()
	f.start()
	f.waitConnected()
	took = time.Since(began)
	f.row("nodes after restarting every agent", fmt.Sprint(len(f.cp.Nodes())), fmt.Sprintf("all back on the WebSocket %s after the restart", benchkit.Duration(took)))

	for _, d := range stops() {
		f.outage(d)
		f.waitConnected()
	}
	f.dropAll()
	f.waitConnected()
	f.fanOut()
	f.row("total agent RSS", benchkit.MiB(f.rss()), "at the end, after every measurement")
	f.print()
	return 0
}

func (f *fleet) publish() {
	src := controlplane.Source{Routes: []controlplane.Route{{ID: 1, SiteName: "fleet", Domains: []string{"fleet.test"}, OriginURL: "http://127.0.0.1:9"}}}
	if _, err := f.cp.Publish(src.JSON(), nil); err != nil {
		benchkit.Fatal(err)
	}
}

// start runs every agent, each in its own directory: registered with the
// discovery token the first time, with the token it saved afterwards.
func (f *fleet) start() {
	f.agents = f.agents[:0]
	for i := range *count {
		dir := filepath.Join(f.dir, fmt.Sprintf("agent-%03d", i))
		conf := filepath.Join(dir, "agent.json")
		if _, err := os.Stat(conf); err != nil {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				benchkit.Fatal(err)
			}
			b, _ := json.Marshal(map[string]any{
				"server_url": f.front.URL(), "discovery_token": f.cp.DiscoveryToken(),
				"node_name": fmt.Sprintf("fleet-%03d", i), "node_ip": "198.51.100.10",
				"data_dir": filepath.Join(dir, "data"), "openresty_path": filepath.Join(dir, "no-openresty"),
				"mmdb_download_url": "off", "city_mmdb_download_url": "off", "update_repo": "off",
			})
			if err := os.WriteFile(conf, b, 0o600); err != nil {
				benchkit.Fatal(err)
			}
		}
		log, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			benchkit.Fatal(err)
		}
		cmd := exec.Command(f.bin, "-config", conf)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			benchkit.Fatal(err)
		}
		log.Close()
		f.agents = append(f.agents, cmd)
	}
}

// stop ends every agent with SIGTERM and waits for them all.
func (f *fleet) stop() {
	for _, a := range f.agents {
		a.Process.Signal(syscall.SIGTERM)
	}
	for _, a := range f.agents {
		a.Wait()
	}
	f.agents = f.agents[:0]
}

// waitConnected waits until every node is registered and on the
// WebSocket.
func (f *fleet) waitConnected() {
	start := time.Now()
	for {
		nodes := f.cp.Nodes()
		up := 0
		for _, n := range nodes {
			if f.cp.WSConnected(n.NodeID) {
				up++
			}
		}
		if len(nodes) >= *count && up >= *count {
			return
		}
		if time.Since(start) > 3*time.Minute {
			benchkit.Fatal(fmt.Errorf("after 3 min %d nodes registered, %d on the WebSocket, want %d (agent logs in %s)", len(nodes), up, *count, f.dir))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rss is the agents' total resident memory, KiB.
func (f *fleet) rss() int64 {
	var kib int64
	for _, a := range f.agents {
		kib += benchkit.RSS(a.Process.Pid)
	}
	return kib
}

func (f *fleet) cpu() time.Duration {
	var d time.Duration
	for _, a := range f.agents {
		d += benchkit.CPUTime(a.Process.Pid)
	}
	return d
}

func (f *fleet) beats() int {
	n := 0
	for _, node := range f.cp.Nodes() {
		n += node.Heartbeats
	}
	return n
}

// steadyState measures what the fleet costs the server at rest.
func (f *fleet) steadyState() {
	time.Sleep(10 * time.Second)
	from, beats0, cpu0 := time.Now(), f.beats(), f.cpu()
	in0, out0 := f.front.toServer.Load(), f.front.toAgents.Load()
	time.Sleep(*steady)
	to := time.Now()
	secs := to.Sub(from).Seconds() * float64(*count)
	beats, http := f.beats()-beats0, f.reqs.countIn(from, to, protocol.PathHeartbeat)
	in, out := f.front.toServer.Load()-in0, f.front.toAgents.Load()-out0
	f.row("steady state: requests per node", fmt.Sprintf("%.3f /s", float64(beats+http)/secs),
		fmt.Sprintf("%.3f status or heartbeat /s, %.3f other HTTP /s; over %v", float64(beats)/secs, float64(http)/secs, *steady))
	f.row("steady state: bytes per node", fmt.Sprintf("%.0f B/s", float64(in+out)/secs), fmt.Sprintf("%.0f B/s to the server, %.0f B/s back (TCP payload)", float64(in)/secs, float64(out)/secs))
	cpu := float64(f.cpu()-cpu0) / float64(to.Sub(from))
	var per []int64
	for _, a := range f.agents {
		per = append(per, benchkit.RSS(a.Process.Pid))
	}
	slices.Sort(per)
	f.row("steady state: total agent RSS", benchkit.MiB(f.rss()), fmt.Sprintf("per agent median %s, max %s; the fleet's CPU %.0f %% of one core", benchkit.MiB(per[len(per)/2]), benchkit.MiB(per[len(per)-1]), 100*cpu))
}

// outage stops the server for d and measures the fleet's return.
func (f *fleet) outage(d time.Duration) {
	down := time.Now()
	f.front.setDown(true)
	if err := f.cp.SetDown(true); err != nil {
		benchkit.Fatal(err)
	}
	time.Sleep(d)
	if err := f.cp.SetDown(false); err != nil {
		benchkit.Fatal(err)
	}
	f.front.setDown(false)
	up := time.Now()
	first := f.firstBeats(up, 3*time.Minute)
	if rest := time.Until(up.Add(*after)); rest > 0 {
		time.Sleep(rest)
	}
	during := f.front.acceptsIn(down, up)
	// The first two seconds hold the HTTP beat that follows every
	// socket's drop; the retries come after.
	label := fmt.Sprintf("server stopped %v: ", d)
	f.row(label+"first beat after it returned", spread(first, true), fmt.Sprintf("min / median / p95 / max over %d nodes", len(first)))
	f.row(label+"attempts per node while stopped", fmt.Sprintf("%.1f", float64(len(during))/float64(*count)),
		fmt.Sprintf("one per %.1f s; fleet's peak %d connects/s in the first 2 s (sockets dropped), %d/s after",
			d.Seconds()*float64(*count)/float64(max(len(during), 1)), peak(f.front.acceptsIn(down, down.Add(2*time.Second)), time.Second),
			peak(f.front.acceptsIn(down.Add(2*time.Second), up), time.Second)))
	back := f.front.acceptsIn(up, up.Add(*after))
	f.row(label+"connects after it returned", fmt.Sprintf("peak %d /s", peak(back, time.Second)), fmt.Sprintf("%d in the first %v (HTTP beat and WebSocket per node)", len(back), *after))
}

// firstBeats is, per node, how long after t its first accepted beat came.
func (f *fleet) firstBeats(t time.Time, limit time.Duration) []time.Duration {
	deadline := time.Now().Add(limit)
	for {
		n := 0
		for _, node := range f.cp.Nodes() {
			if !node.LastSeen.Before(t) {
				n++
			}
		}
		if n >= *count {
			break
		}
		if time.Now().After(deadline) {
			benchkit.Fatal(fmt.Errorf("%d of %d nodes beat within %v of the server's return", n, *count, limit))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return f.firstSince(t, "")
}

// firstSince is, per node, the offset from t of its first beat at or
// after t on channel ("" for either).
func (f *fleet) firstSince(t time.Time, channel string) []time.Duration {
	seen := map[string]bool{}
	var out []time.Duration
	for _, b := range f.cp.Heartbeats() {
		if b.At.Before(t) || seen[b.NodeID] || (channel != "" && b.Channel != channel) {
			continue
		}
		seen[b.NodeID] = true
		out = append(out, b.At.Sub(t))
	}
	return out
}

// dropAll closes every node's WebSocket at once, the server staying up,
// and measures the HTTP beats that follow.
func (f *fleet) dropAll() {
	nodes := f.cp.Nodes()
	dropped := time.Now()
	for _, n := range nodes {
		f.cp.DropWS(n.NodeID)
	}
	deadline := time.Now().Add(time.Minute)
	var first []time.Duration
	for {
		if first = f.firstSince(dropped, controlplane.ChannelHTTP); len(first) >= len(nodes) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var at []time.Time
	for _, d := range first {
		at = append(at, dropped.Add(d))
	}
	f.row("every WebSocket dropped: HTTP beat after", spread(first, false), fmt.Sprintf("min / median / max over %d nodes; peak %d in 100 ms", len(first), peak(at, 100*time.Millisecond)))
}

// fanOut publishes a version and measures the E4 fetches it sets off.
func (f *fleet) fanOut() {
	published := time.Now()
	f.publish()
	deadline := time.Now().Add(time.Minute)
	var fetches []time.Time
	for {
		if fetches = f.reqs.since(protocol.PathActive, published); len(fetches) >= *count || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var offs []time.Duration
	for _, t := range fetches {
		offs = append(offs, t.Sub(published))
	}
	f.row("publish: E4 fetch after it", spread(offs, false), fmt.Sprintf("min / median / max over %d fetches; peak %d in 100 ms", len(offs), peak(fetches, 100*time.Millisecond)))
}

// spread formats min / median [/ p95] / max.
func spread(d []time.Duration, p95 bool) string {
	if len(d) == 0 {
		return "none"
	}
	parts := []string{benchkit.Duration(slices.Min(d)), benchkit.Duration(benchkit.Pct(d, 50))}
	if p95 {
		parts = append(parts, benchkit.Duration(benchkit.Pct(d, 95)))
	}
	return strings.Join(append(parts, benchkit.Duration(slices.Max(d))), " / ")
}

// peak is the most events in any window of width w (sliding).
func peak(at []time.Time, w time.Duration) int {
	s := slices.Clone(at)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	best, lo := 0, 0
	for hi := range s {
		for s[hi].Sub(s[lo]) >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

func (f *fleet) print() {
	host, _ := os.Hostname()
	fmt.Printf("\nopenflare-agent fleet — %s, %s/%s, %d CPUs, %s, %s\n\n", host, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format(time.RFC3339))
	w := 0
	for _, r := range f.rows {
		w = max(w, len([]rune(r[0])))
	}
	fmt.Printf("| %-*s | %-32s | %s\n", w, "measure", "value", "notes")
	fmt.Printf("|%s|%s|%s\n", strings.Repeat("-", w+2), strings.Repeat("-", 34), strings.Repeat("-", 30))
	for _, r := range f.rows {
		fmt.Printf("| %-*s | %-32s | %s\n", w+len(r[0])-len([]rune(r[0])), r[0], r[1], r[2])
	}
}
