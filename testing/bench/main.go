// Command bench measures openflare-agent on this machine and prints one
// table: binary sizes, memory and CPU at rest and under load,
// publish-to-serving latency over HTTP polling and over the WebSocket, and
// the Go benchmarks of the hot paths. Every figure comes from a real run;
// `make bench` builds the binaries and runs this.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"openflare/agent/nginx"
	"openflare/agent/protocol"
	"openflare/testing/benchkit"
	"openflare/testing/controlplane"
	"openflare/testing/nstest"
)

var (
	agentBin  = flag.String("agent", "bin/openflare-agent", "release agent binary")
	distDir   = flag.String("dist", "dist", "cross binaries (from `make cross`)")
	idleFor   = flag.Duration("idle", 60*time.Second, "how long the agent idles before its RSS and CPU are read")
	loadFor   = flag.Duration("load", 30*time.Second, "how long 1000 requests/s flow before RSS is read")
	publishes = flag.Int("publishes", 20, "publishes per latency measurement")
	routes    = flag.Int("routes", 100, "routes in the measured config")
)

type row struct{ what, value, note string }

// rowsEnv names the file the live part (inside the namespaces) appends its
// rows to, for the outer process to print in the one table.
const rowsEnv = "OPENFLARE_BENCH_ROWS"

func main() {
	flag.Parse()
	bin, err := filepath.Abs(*agentBin)
	if err != nil {
		benchkit.Fatal(err)
	}
	runLive := func() int { return live(bin) }
	if os.Getenv("OPENFLARE_NSTEST_ROLE") != "" {
		os.Exit(nstest.Run(runLive, nil))
	}
	if _, err := os.Stat(bin); err != nil {
		benchkit.Fatal(fmt.Errorf("%v (run `make build`)", err))
	}
	rows := append(sizes(*distDir), goBenchmarks()...)
	f, err := os.CreateTemp("", "openflare-bench-rows-")
	if err != nil {
		benchkit.Fatal(err)
	}
	f.Close()
	defer os.Remove(f.Name())
	os.Setenv(rowsEnv, f.Name())
	if code := nstest.Run(runLive, nil); code != 0 {
		benchkit.Fatal(fmt.Errorf("live measurements exited %d", code))
	}
	data, _ := os.ReadFile(f.Name())
	for _, line := range strings.Split(string(data), "\n") {
		var r struct{ What, Value, Note string }
		if json.Unmarshal([]byte(line), &r) == nil {
			rows = append(rows, row{r.What, r.Value, r.Note})
		}
	}
	printTable(rows)
}

func emit(what, value, note string) {
	b, _ := json.Marshal(struct{ What, Value, Note string }{what, value, note})
	f, err := os.OpenFile(os.Getenv(rowsEnv), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		benchkit.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\n", b)
	fmt.Fprintf(os.Stderr, "measured: %s = %s\n", what, value)
}

func printTable(rows []row) {
	host, _ := os.Hostname()
	fmt.Printf("\nopenflare-agent bench — %s, %s/%s, %d CPUs (%s), %s, %s\n\n", host, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), runtime.Version(), time.Now().UTC().Format(time.RFC3339))
	w := 0
	for _, r := range rows {
		w = max(w, len(r.what))
	}
	fmt.Printf("| %-*s | %-24s | %s\n", w, "measure", "value", "notes")
	fmt.Printf("|%s|%s|%s\n", strings.Repeat("-", w+2), strings.Repeat("-", 26), strings.Repeat("-", 30))
	for _, r := range rows {
		fmt.Printf("| %-*s | %-24s | %s\n", w, r.what, r.value, r.note)
	}
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if i := strings.IndexByte(l, ':'); i > 0 {
				return strings.TrimSpace(l[i+1:])
			}
		}
	}
	return "unknown CPU"
}

// sizes lists the cross binaries.
func sizes(dir string) []row {
	files, _ := filepath.Glob(filepath.Join(dir, "openflare-agent-linux-*"))
	var rows []row
	for _, f := range files {
		if strings.HasSuffix(f, ".sha256") {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			continue
		}
		note := ""
		if strings.HasSuffix(f, "-arm64") {
			note = "budget 7.25 MiB (testing/crosstest)"
		}
		rows = append(rows, row{"binary size " + strings.TrimPrefix(filepath.Base(f), "openflare-agent-"), fmt.Sprintf("%.2f MiB (%d B)", float64(fi.Size())/(1<<20), fi.Size()), note})
	}
	if len(rows) == 0 {
		rows = append(rows, row{"binary sizes", "n/a", "run `make cross` first"})
	}
	return rows
}

// goBenchmarks runs the hot-path benchmarks and reports one figure each.
func goBenchmarks() []row {
	type bench struct {
		pkg, name, what, target string
		lines                   bool
	}
	list := []bench{
		{"./agent/render", "BenchmarkRender1000$", "render 1000 routes", "target < 20 ms", false},
		{"./agent/render", "BenchmarkRender100$", "render 100 routes", "", false},
		{"./agent/ipgroups", "BenchmarkPush100k$", "land a 100 000-entry IP group", "target < 200 ms, no reload", false},
		{"./agent/observability", "BenchmarkParseJSONLine$", "access-log parse rate (JSON)", "target ≥ 300 000 lines/s/core", true},
		{"./internal/linux", "BenchmarkSample$", "host sample", "target < 200 µs, < 20 allocs", false},
		{"./internal/mmdb", "BenchmarkCountry$", "MMDB country lookup", "", false},
	}
	var rows []row
	re := regexp.MustCompile(`^(Benchmark\S+)\s+\d+\s+([\d.]+) ns/op(?:.*?\s([\d.]+) allocs/op)?`)
	for _, b := range list {
		if _, err := os.Stat(b.pkg); err != nil {
			rows = append(rows, row{b.what, "n/a", b.pkg + " not present"})
			continue
		}
		cmd := exec.Command("go", "test", "-run=NONE", "-bench="+b.name, "-benchmem", "-count=3", b.pkg)
		out, err := cmd.CombinedOutput()
		if err != nil {
			rows = append(rows, row{b.what, "failed", strings.TrimSpace(lastLine(string(out)))})
			continue
		}
		var ns []float64
		allocs := ""
		for _, l := range strings.Split(string(out), "\n") {
			if m := re.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
				v, _ := strconv.ParseFloat(m[2], 64)
				ns = append(ns, v)
				allocs = m[3]
			}
		}
		if len(ns) == 0 {
			rows = append(rows, row{b.what, "n/a", "no result"})
			continue
		}
		slices.Sort(ns)
		med := ns[len(ns)/2]
		val := fmtDuration(time.Duration(med))
		if b.lines {
			val = fmt.Sprintf("%.0f lines/s", 1e9/med)
		}
		note := b.target
		if allocs != "" {
			note = strings.TrimSpace(note + fmt.Sprintf(" (%s allocs/op, median of 3)", allocs))
		}
		rows = append(rows, row{b.what, val, note})
	}
	return rows
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.1f µs", float64(d)/1e3)
	default:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
}

// live runs inside the namespaces and prints ROW lines.
func live(bin string) int {
	dir, err := os.MkdirTemp("", "openflare-bench-")
	if err != nil {
		benchkit.Fatal(err)
	}
	defer os.RemoveAll(dir)
	origin := startOrigin()
	cp := controlplane.New()
	if err := cp.Start(); err != nil {
		benchkit.Fatal(err)
	}
	defer cp.Close()
	cp.UpdateSettings("", func(s *protocol.AgentSettings) { s.HeartbeatInterval = 3000; s.WebsocketUpgradeEnabled = true })
	if _, err := cp.Publish(source(origin, 0).JSON(), nil); err != nil {
		benchkit.Fatal(err)
	}
	a := benchkit.StartAgent(bin, dir, cp, nil)
	defer a.Stop()
	benchkit.WaitServes(fmt.Sprintf("r%d.bench", *routes-1), "gen 0", 5*time.Millisecond)
	nodeID := cp.Nodes()[0].NodeID
	if err := cp.WaitWS(context.Background(), nodeID, true); err != nil {
		benchkit.Fatal(err)
	}

	// At rest: 100 routes, WebSocket up, a status every 3 s. CPU is read
	// over the whole idle period after a 10 s settle (10 ms clock ticks).
	time.Sleep(10 * time.Second)
	// "5" resets VmHWM to the current RSS: the peak read after is the
	// idle period's own.
	hwmReset := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", a.PID()), []byte("5"), 0)
	cpu0, faults0 := benchkit.CPUTime(a.PID()), benchkit.MinorFaults(a.PID())
	time.Sleep(*idleFor)
	cpu1, faults1 := benchkit.CPUTime(a.PID()), benchkit.MinorFaults(a.PID())
	hwm := "n/a"
	if hwmReset == nil {
		hwm = benchkit.MiB(benchkit.StatusKiB(a.PID(), "VmHWM:"))
	}
	perMin := time.Duration(float64(cpu1-cpu0) * float64(time.Minute) / float64(*idleFor))
	emit("agent RSS at rest", benchkit.MiB(benchkit.RSS(a.PID())), fmt.Sprintf("%s; %d routes, WebSocket, status every 3 s, after %v (target ≤ 10 MiB)", benchkit.RSSParts(a.PID()), *routes, *idleFor))
	emit("agent VmHWM at rest", hwm, fmt.Sprintf("the peak over those %v (target ≤ 12 MiB)", *idleFor))
	emit("agent CPU at rest", fmtDuration(perMin)+" per minute", fmt.Sprintf("%.0f minor faults a minute (target ≤ 40 ms/min)", float64(faults1-faults0)*float64(time.Minute)/float64(*idleFor)))

	// Under load: 1000 requests/s through nginx, tailed and reported.
	stop := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 2 * time.Second}
			tick := time.NewTicker(8 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/load", nil)
				req.Host = "r0.bench"
				if resp, err := c.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					sent.Add(1)
				}
			}
		}()
	}
	time.Sleep(*loadFor)
	peak, parts := benchkit.RSS(a.PID()), benchkit.RSSParts(a.PID())
	close(stop)
	wg.Wait()
	emit("agent RSS under load", benchkit.MiB(peak), fmt.Sprintf("%s; %.0f requests/s through nginx for %v (target < 20 MiB)", parts, float64(sent.Load())/loadFor.Seconds(), *loadFor))

	// Publish → serving, over the WebSocket (pushed) and over HTTP polling.
	ws := latencies(cp, origin, 1)
	emit("publish→serving over WebSocket", fmt.Sprintf("median %s, p95 %s", fmtDuration(benchkit.Pct(ws, 50)), fmtDuration(benchkit.Pct(ws, 95))), fmt.Sprintf("%d publishes, %d routes (target median < 300 ms)", len(ws), *routes))
	gen := 1 + len(ws)
	pushes, hashed := ipGroupPushes(cp, origin, dir, gen)
	emit("IP-group push over WebSocket → 403 from every worker", fmt.Sprintf("median %s, p95 %s", fmtDuration(benchkit.Pct(pushes, 50)), fmtDuration(benchkit.Pct(pushes, 95))),
		fmt.Sprintf("%d pushes of a 100 000-entry group, each blocking a new address, from the frame queued (the test server hashed and encoded the group before, median %s) (target median ≤ 150 ms, p95 ≤ 300 ms; landing alone: \"land a 100 000-entry IP group\")", len(pushes), fmtDuration(benchkit.Pct(hashed, 50))))
	cp.UpdateSettings(nodeID, func(s *protocol.AgentSettings) { s.WebsocketUpgradeEnabled = false })
	if err := cp.WaitWS(context.Background(), nodeID, false); err != nil {
		benchkit.Fatal(err)
	}
	http1 := latencies(cp, origin, gen+1)
	emit("publish→serving over HTTP polling", fmt.Sprintf("median %s, p95 %s", fmtDuration(benchkit.Pct(http1, 50)), fmtDuration(benchkit.Pct(http1, 95))), fmt.Sprintf("%d publishes, heartbeat every 3 s", len(http1)))

	// The agent's default memory_limit (32 MiB) refuses a 15 MB group; the
	// workers are what this measures.
	a.RestartWith(map[string]any{"memory_limit": "192MiB"})
	benchkit.WaitServes("r0.bench", "gen "+strconv.Itoa(gen+len(http1)), 5*time.Millisecond)
	bigIPGroup(cp, origin, dir, gen+len(http1)+1)
	return 0
}

// bigIPGroup lands a 1 000 000-entry IP group (every other address from
// 10.0.0.0, so one range per entry) with the version that references it,
// and reports what each nginx worker holds once the group is enforced.
// ipGroupPushes publishes version gen, whose WAF denies the addresses of a
// 100 000-entry IP group, and then pushes the group over the WebSocket
// again and again, each time with one more member, 127.0.0.20 on: the time
// from the push to a 403 for the new member from every worker (four
// fresh connections per worker in a row).
func ipGroupPushes(cp *controlplane.Server, origin, dir string, gen int) (pushes, hashed []time.Duration) {
	base := make([]string, 0, 100_000)
	for i := 0; len(base) < cap(base)-1; i++ {
		a := 10<<24 + 2*i
		base = append(base, fmt.Sprintf("%d.%d.%d.%d", a>>24, a>>16&0xff, a>>8&0xff, a&0xff))
	}
	group := protocol.WAFIPGroup{ID: 8, Name: "pushed", Enabled: true, IPList: append(base, "127.0.0.19")}
	cp.SetIPGroup(group)
	src := source(origin, gen)
	src.WAF = &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), controlplane.IPMatchRuleGroup(2, "pushed", 8)}}
	if _, err := cp.Publish(src.JSON(), nil); err != nil {
		benchkit.Fatal(err)
	}
	benchkit.WaitServes("r0.bench", "gen "+strconv.Itoa(gen), 5*time.Millisecond)
	run := 4 * len(nginxWorkers(filepath.Join(dir, "data", "var", "run", "nginx.pid")))
	everyWorker := func(from string) bool {
		for range run {
			if statusFrom(from) != http.StatusForbidden {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(time.Minute); !everyWorker("127.0.0.19"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			benchkit.Fatal(fmt.Errorf("the pushed group was never enforced"))
		}
	}
	for k := range 10 {
		member := fmt.Sprintf("127.0.0.%d", 20+k)
		group.IPList = append(base, member)
		stored := time.Now()
		cp.SetIPGroup(group)
		// The push starts when the frame is queued: the test server hashes
		// and encodes the group first, as a server does when it is saved.
		start := time.Now()
		hashed = append(hashed, start.Sub(stored))
		for deadline := start.Add(30 * time.Second); !everyWorker(member); time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				benchkit.Fatal(fmt.Errorf("push %d: %s never blocked", k+1, member))
			}
		}
		pushes = append(pushes, time.Since(start))
	}
	return pushes, hashed
}

func bigIPGroup(cp *controlplane.Server, origin, dir string, gen int) {
	const member, neighbour = "127.0.0.10", "127.0.0.11"
	pidFile := filepath.Join(dir, "data", "var", "run", "nginx.pid")
	// The version that references the group reloads nginx: the workers
	// measured after are new ones, compared with the largest old one.
	var before int64
	for _, pid := range nginxWorkers(pidFile) {
		before = max(before, benchkit.RSS(pid))
	}
	list := make([]string, 0, 1_000_000)
	for i := 0; len(list) < cap(list)-1; i++ {
		a := 10<<24 + 2*i
		list = append(list, fmt.Sprintf("%d.%d.%d.%d", a>>24, a>>16&0xff, a>>8&0xff, a&0xff))
	}
	list = append(list, member)
	cp.SetIPGroup(protocol.WAFIPGroup{ID: 9, Name: "huge", Enabled: true, IPList: list})
	src := source(origin, gen)
	src.WAF = &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), controlplane.IPMatchRuleGroup(2, "huge", 9)}}
	start := time.Now()
	if _, err := cp.Publish(src.JSON(), nil); err != nil {
		benchkit.Fatal(err)
	}
	benchkit.WaitServes("r0.bench", "gen "+strconv.Itoa(gen), 5*time.Millisecond)
	for deadline := time.Now().Add(2 * time.Minute); statusFrom(member) != http.StatusForbidden; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			benchkit.Fatal(fmt.Errorf("the 1 000 000-entry group was never enforced for %s", member))
		}
	}
	enforced := time.Since(start)
	// Every worker adopts within its next 1 s tick.
	time.Sleep(2 * time.Second)
	for range 20 {
		statusFrom(member)
	}
	workers := nginxWorkers(pidFile)
	if len(workers) == 0 {
		emit("nginx worker RSS, 1M-entry IP group", "n/a", "no nginx workers found")
		return
	}
	var worst int64
	var parts []string
	for _, pid := range workers {
		r := benchkit.RSS(pid)
		worst = max(worst, r)
		parts = append(parts, fmt.Sprintf("%s (%s)", benchkit.MiB(r), benchkit.RSSParts(pid)))
	}
	note := fmt.Sprintf("%d workers: %s; before the group %s; member %d, neighbour %d; publish→enforced %s (report only)",
		len(workers), strings.Join(parts, ", "), benchkit.MiB(before), statusFrom(member), statusFrom(neighbour), fmtDuration(enforced))
	emit("nginx worker RSS, 1M-entry IP group", "max "+benchkit.MiB(worst), note)
}

// statusFrom sends GET / for r0.bench from a local address, on a fresh
// connection so that requests spread over the workers.
func statusFrom(from string) int {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}}
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	req.Host = "r0.bench"
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// nginxWorkers lists the worker processes of the nginx whose master's pid
// is in pidFile (not its cache manager or loader).
func nginxWorkers(pidFile string) []int {
	master, _ := strconv.Atoi(strings.TrimSpace(readFile(pidFile)))
	pids := nginx.WorkerPIDs(master)
	slices.Sort(pids)
	return pids
}

// source is a config of *routes routes whose origin answers "gen <gen>".
func source(origin string, gen int) controlplane.Source {
	var s controlplane.Source
	for i := 0; i < *routes; i++ {
		s.Routes = append(s.Routes, controlplane.Route{
			ID: uint64(i + 1), SiteName: fmt.Sprintf("site%d", i), Domains: []string{fmt.Sprintf("r%d.bench", i)},
			OriginURL: origin + "/gen" + strconv.Itoa(gen),
		})
	}
	s.OpenResty = map[string]any{"origin_error_page_enabled": false}
	return s
}

// latencies publishes *publishes versions, each changing every route's
// origin path, and times publish → the change is served.
func latencies(cp *controlplane.Server, origin string, first int) []time.Duration {
	var out []time.Duration
	for i := 0; i < *publishes; i++ {
		gen := first + i
		host := fmt.Sprintf("r%d.bench", rand.IntN(*routes))
		start := time.Now()
		if _, err := cp.Publish(source(origin, gen).JSON(), nil); err != nil {
			benchkit.Fatal(err)
		}
		benchkit.WaitServes(host, "gen "+strconv.Itoa(gen), 5*time.Millisecond)
		out = append(out, time.Since(start))
	}
	return out
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

func startOrigin() string {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "gen %s", strings.TrimPrefix(strings.SplitN(r.URL.Path, "/", 3)[1], "gen"))
	})}
	ln, err := netListen()
	if err != nil {
		benchkit.Fatal(err)
	}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String()
}
