// Command wafbench measures what the WAF costs per request (part of `make
// bench`): a real nginx with the Lua module, the agent's Lua tree and a
// proxy route to a loopback origin, loaded through the same route with
// the WAF off and with each rule set of the table below. It reports
// requests per second, the mean latency of one keep-alive client, and the
// per-request overhead against the WAF off, in wall time and in nginx
// worker CPU time (steadier on a busy machine). Figures are reported,
// never asserted; the target is ≤ 50 µs of overhead per request. Then,
// unless -adversarial=false, it reports what one request costs at worst
// for every node type, with inputs at nginx's limits (adversarial.go).
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"openflare/agent/geosnap"
	"openflare/agent/ipgroups"
	"openflare/agent/landing"
	"openflare/agent/luaassets"
	"openflare/testing/benchkit"
	"openflare/testing/geodb"
	"openflare/testing/loadgen"
	"openflare/testing/nginxtest"
	"openflare/testing/nstest"
)

var (
	duration    = flag.Duration("duration", 3*time.Second, "length of one measurement")
	rounds      = flag.Int("rounds", 3, "interleaved rounds; the best round of each case is reported")
	conns       = flag.Int("conns", 16, "keep-alive connections of the throughput measurement")
	adversarial = flag.Bool("adversarial", true, "then measure the worst-case requests of every node type (adversarial.go)")
)

// obj is a JSON object literal.
type obj = map[string]any

// bench is the node under measurement: its directories and its nginx.
type bench struct {
	tb         *benchkit.ProgramTB
	luaDir     string
	runtimeDir string
	paths      landing.Paths
	nginx      *nginxtest.Server
}

// A row is one rule set. The WAF-off baseline is measured on the same
// path, so the row's overhead is what its rules add.
type row struct {
	name string
	// path is the request target.
	path string
	// node is the one check node of the row's graph, start → node, true →
	// allow, false → block; the request takes the allow edge. nil binds no
	// rule group at all: the empty rule set.
	node obj
	// allowOn is the node's handle that allows the request ("true" when
	// the node answers "did it pass?", "false" when it answers "did it
	// match?").
	allowOn string
	// prepare writes what the row needs before nginx starts; ready waits
	// until nginx serves with it.
	prepare func(b *bench) error
	ready   func(b *bench) error
}

func rows() []row {
	allFlags := obj{}
	for _, f := range []string{"sql_injection", "path_traversal", "command_injection", "xss", "ssrf", "file_inclusion", "malicious_upload", "xxe", "crlf_injection"} {
		allFlags[f] = true
	}
	return []row{
		{name: "empty rule set", path: "/"},
		{
			name: "ip_match over a 100 000-entry IP group", path: "/",
			node: obj{"type": "ip_match", "config": obj{"ip_group_ids": []int{3}}}, allowOn: "false",
			prepare: func(b *bench) error { return b.writeIPGroup(3, bigIPList()) },
			ready:   func(b *bench) error { return b.waitAdopted("IP group") },
		},
		{
			name: "geo_match, 10 countries, City and Country databases of 400 000 networks each", path: "/",
			node: obj{"type": "geo_match", "config": obj{"countries": geoCountries[:10]}}, allowOn: "false",
			prepare: func(b *bench) error { return b.writeGeo() },
			ready:   func(b *bench) error { return b.waitAdopted("geo") },
		},
		{
			name: "security_check, all nine flags, 4 KiB query", path: "/?" + benchkit.CleanQuery4K(),
			node: obj{"type": "security_check", "config": allFlags}, allowOn: "true",
		},
	}
}

func main() {
	flag.Parse()
	os.Exit(nstest.Run(live, nil))
}

func live() int {
	tb := benchkit.NewProgramTB("openflare-wafbench")
	defer tb.Close()
	origin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		benchkit.Fatal(err)
	}
	go http.Serve(origin, loadgen.Origin())

	b := newBench(tb)
	rs := rows()
	var sites []advSite
	if *adversarial {
		sites = advSites()
	}
	if err := b.start(rs, sites, origin.Addr().String()); err != nil {
		benchkit.Fatal(err)
	}

	// Hosts: waf-off.bench, then one per row; each with its row's path.
	type target struct{ host, path string }
	offFor := map[string]target{}
	var cases []target
	for _, r := range rs {
		if _, ok := offFor[r.path]; !ok {
			offFor[r.path] = target{"waf-off.bench", r.path}
			cases = append(cases, offFor[r.path])
		}
	}
	for i, r := range rs {
		cases = append(cases, target{rowHost(i), r.path})
	}
	best := map[target]result{}
	for round := 0; round < *rounds; round++ {
		for _, c := range cases {
			m := b.measure(c.host, c.path)
			prev, ok := best[c]
			best[c] = m
			if ok {
				best[c] = prev.best(m)
			}
		}
	}

	fmt.Println("| case | requests/s | latency | overhead vs WAF off | notes |")
	fmt.Println("|---|---|---|---|---|")
	printed := map[target]bool{}
	for i, r := range rs {
		off := best[offFor[r.path]]
		if !printed[offFor[r.path]] {
			printed[offFor[r.path]] = true
			fmt.Printf("| WAF off, %d-byte target | %.0f | %.1f µs (p50 %s, p99 %s) | – | nginx worker CPU %.1f µs/request |\n", len(r.path), off.rps, off.latency, off.p50, off.p99, off.cpu)
		}
		on := best[target{rowHost(i), r.path}]
		fmt.Printf("| %s | %.0f | %.1f µs (p50 %s, p99 %s) | %+.1f µs wall, %+.1f µs nginx CPU | nginx worker CPU %.1f µs/request; target ≤ 50 µs |\n",
			r.name, on.rps, on.latency, on.p50, on.p99, on.latency-off.latency, on.cpu-off.cpu, on.cpu)
	}
	fmt.Printf("\n%d rounds of %v per case; requests/s over %d keep-alive connections, latency and CPU from one connection; best round of each.\n", *rounds, *duration, *conns)
	if *adversarial {
		fmt.Printf("\nAt nginx's default header buffers (4 × %d KB): the target applies.\n", defaultLine/1024)
		b.adversarial(advInputs(defaultLine), true)
		fmt.Printf("\nAt the header buffers the agent renders (4 × %d KB):\n", renderedLine/1024)
		b.adversarial(advInputs(renderedLine), false)
	}
	return 0
}

func rowHost(i int) string { return fmt.Sprintf("row%d.bench", i) }

func newBench(tb *benchkit.ProgramTB) *bench {
	root := tb.TempDir()
	b := &bench{tb: tb, luaDir: filepath.Join(root, "lua"), runtimeDir: filepath.Join(root, "runtime")}
	b.paths = landing.Paths{RuntimeConfigDir: b.runtimeDir, CountryMMDB: filepath.Join(root, "country.mmdb"), CityMMDB: filepath.Join(root, "city.mmdb")}
	return b
}

// start lays out the Lua tree and the rules, runs each row's prepare and
// starts nginx with one server per row plus the WAF-off server and the
// adversarial part's sites, then waits for every row to be ready.
func (b *bench) start(rs []row, sites []advSite, origin string) error {
	for _, f := range luaassets.Files(b.paths.LuaReplacer()) {
		p := filepath.Join(b.luaDir, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Content, 0o644); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(b.runtimeDir, 0o755); err != nil {
		return err
	}
	groups, bindings := []obj{}, []obj{}
	var servers strings.Builder
	for i, r := range rs {
		site := strings.TrimSuffix(rowHost(i), ".bench")
		fmt.Fprintf(&servers, `
    server {
        listen 80;
        server_name %s;
        set $openflare_waf_site "%s";
        access_by_lua_file %s/waf/check.lua;
        location / { proxy_pass http://origin; }
    }`, rowHost(i), site, b.luaDir)
		if r.node == nil {
			continue
		}
		id := len(groups) + 1
		groups = append(groups, obj{"id": id, "name": r.name, "enabled": true, "is_global": false, "graph": checkGraph(r.node, r.allowOn)})
		bindings = append(bindings, obj{"route_id": len(bindings) + 1, "site_name": site, "rule_group_ids": []int{id}})
	}
	for _, st := range sites {
		servers.WriteString(st.server(b.luaDir))
		if st.graph == nil {
			continue
		}
		id := len(groups) + 1
		groups = append(groups, obj{"id": id, "name": st.site, "enabled": true, "is_global": false, "graph": st.graph})
		bindings = append(bindings, obj{"route_id": len(bindings) + 1, "site_name": st.site, "rule_group_ids": []int{id}})
	}
	doc, err := json.Marshal(obj{"rule_groups": groups, "bindings": bindings})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.runtimeDir, "waf_config.json"), doc, 0o644); err != nil {
		return err
	}
	for _, r := range rs {
		if r.prepare != nil {
			if err := r.prepare(b); err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
		}
	}
	b.nginx = nginxtest.Start(b.tb, fmt.Sprintf(`
    lua_package_path "%[1]s/?.lua;%[1]s/?/init.lua;;";
    lua_shared_dict openflare_observability 10m;
    lua_shared_dict openflare_pow_challenges 10m;
    lua_shared_dict openflare_pow_sessions 10m;
    lua_shared_dict openflare_pow_config 1m;
    lua_shared_dict openflare_waf_config 1m;
    lua_shared_dict openflare_waf_ip_groups 64m;
    init_worker_by_lua_block { require("waf.runtime").init() }
    upstream origin {
        server %[2]s;
        keepalive 64;
    }
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    # One connection for a whole measurement: no reconnects in the figures.
    keepalive_requests 100000000;
    # What the agent renders by default (the server's fresh-install
    # openresty_config): request and header lines of up to 16 KB.
    large_client_header_buffers 4 16k;
    client_max_body_size 64m;
    server {
        listen 80;
        server_name waf-off.bench;
        location / { proxy_pass http://origin; }
    }
%[3]s
`, b.luaDir, origin, servers.String()))
	nginxtest.WaitPort(b.tb, "127.0.0.1:80")
	for _, r := range rs {
		if r.ready != nil {
			if err := r.ready(b); err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
		}
	}
	if log := b.nginx.ErrorLog(); strings.Contains(log, "[error]") || strings.Contains(log, "[alert]") {
		return fmt.Errorf("nginx error log:\n%s", log)
	}
	return nil
}

// checkGraph is start → node, handle allowOn → allow, the other → block.
func checkGraph(node obj, allowOn string) obj {
	return graph(obj{"type": node["type"], "config": node["config"], "next": obj{allowOn: "allow", other(allowOn): "block"}})
}

// graph is start → n, with allow and block(403, "blocked") nodes for n's
// edges.
func graph(n obj) obj {
	return obj{
		"entry": "start",
		"nodes": obj{
			"start": obj{"type": "start", "config": obj{}, "next": obj{"next": "n"}},
			"n":     n,
			"allow": obj{"type": "allow", "config": obj{}},
			"block": obj{"type": "block", "config": obj{"status_code": 403, "response_body": "blocked"}},
		},
	}
}

func other(handle string) string {
	if handle == "true" {
		return "false"
	}
	return "true"
}

// writeIPGroup writes the IP-group snapshot the way the agent does
// (agent/ipgroups): the JSON, the compiled file, then the checksum file
// that names it.
func (b *bench) writeIPGroup(id int, list []string) error {
	data, err := json.Marshal(obj{"groups": obj{fmt.Sprint(id): obj{
		"id": id, "name": "bench", "type": "manual", "enabled": true, "ip_list": list, "checksum": strings.Repeat("0", 64),
	}}})
	if err != nil {
		return err
	}
	compiled, err := ipgroups.Compile(data)
	if err != nil {
		return err
	}
	// The checksum file holds the label: the SHA-256 of the JSON.
	sum := sha256.Sum256(data)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{ipgroups.SnapshotName, data},
		{ipgroups.CompiledName, compiled},
		{ipgroups.ChecksumName, []byte(hex.EncodeToString(sum[:]) + "\n")},
	} {
		if err := os.WriteFile(filepath.Join(b.runtimeDir, f.name), f.data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// waitAdopted waits until every worker has adopted a snapshot of what
// ("IP group", "geo").
func (b *bench) waitAdopted(what string) error {
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(b.nginx.ErrorLog(), "adopted "+what+" snapshot") < len(b.nginx.WorkerPIDs()) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the %s snapshot was not adopted within 30 s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// geoCountries are the codes of the generated databases.
var geoCountries = []string{"US", "DE", "FR", "GB", "JP", "CN", "BR", "IN", "RU", "IT", "NL", "SE", "PL", "ES", "CA"}

// writeGeo writes full-size City and Country databases with MaxMind's
// writer and compiles the geo snapshot as the agent does (agent/geosnap).
// The client, 127.0.0.1, is in neither database, so every request
// searches each listed country's ranges to the end.
func (b *bench) writeGeo() error {
	if why := geodb.Available(); why != "" {
		return errors.New(why)
	}
	for i, db := range []struct{ path, typ string }{{b.paths.CityMMDB, "GeoLite2-City"}, {b.paths.CountryMMDB, "GeoLite2-Country"}} {
		if err := geodb.Write(db.path, geodb.Options{Type: db.typ, Epoch: 1}, geodb.Synthetic(400_000, uint64(i+1), geoCountries)); err != nil {
			return err
		}
	}
	builder := &geosnap.Builder{Dir: b.runtimeDir, CityPath: b.paths.CityMMDB, CountryPath: b.paths.CountryMMDB}
	began := time.Now()
	if _, err := builder.Build(false); err != nil {
		return err
	}
	fi, err := os.Stat(filepath.Join(b.runtimeDir, geosnap.Name))
	if err != nil {
		return err
	}
	fmt.Printf("geo snapshot: compiled in %v, %.1f MiB (BenchmarkCompileFullSize in agent/geosnap has the memory figures)\n\n",
		time.Since(began).Round(time.Millisecond), float64(fi.Size())/(1<<20))
	return nil
}

// bigIPList is 100 000 distinct /32s spread over 10.0.0.0/8 with a few
// CIDRs; the benchmark's client (127.0.0.1) is in none of them, so every
// request searches the whole structure.
func bigIPList() []string {
	list := []string{"172.16.0.0/12", "192.168.7.0/24", "2001:db8::/32"}
	for i := 0; len(list) < 100_000; i++ {
		n := (i*40503 + 12345) & 0xffffff // an odd multiplier permutes the 24-bit space
		list = append(list, fmt.Sprintf("10.%d.%d.%d", n>>16, n>>8&0xff, n&0xff))
	}
	return list
}

type result struct {
	rps      float64 // requests per second over *conns connections
	latency  float64 // mean µs per request, one connection
	p50, p99 time.Duration
	cpu      float64 // nginx worker CPU µs per request, one connection
}

func (r result) best(o result) result {
	if o.latency < r.latency {
		r.latency, r.p50, r.p99 = o.latency, o.p50, o.p99
	}
	return result{rps: max(r.rps, o.rps), latency: r.latency, p50: r.p50, p99: r.p99, cpu: min(r.cpu, o.cpu)}
}

// measure runs one closed-loop client, then *conns of them, against host.
func (b *bench) measure(host, path string) result {
	workers := b.nginx.WorkerPIDs()
	cpu := func() time.Duration {
		var sum time.Duration
		for _, pid := range workers {
			sum += benchkit.CPUTime(pid)
		}
		return sum
	}
	c0 := cpu()
	lat := closedLoop(host, path, 1)
	var r result
	r.cpu = float64((cpu() - c0).Microseconds()) / float64(len(lat))
	r.latency = float64(duration.Microseconds()) / float64(len(lat))
	r.p50, r.p99 = benchkit.Pct(lat, 50), benchkit.Pct(lat, 99)
	r.rps = float64(len(closedLoop(host, path, *conns))) / duration.Seconds()
	return r
}

// closedLoop sends requests over n keep-alive connections for *duration,
// each as soon as the previous answer is in, and returns every request's
// latency. loadgen paces its clients with a ticker, whose granularity here
// (about a millisecond) would hide the microseconds measured.
func closedLoop(host, path string, n int) []time.Duration {
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
	deadline := time.Now().Add(*duration)
	out := make([][]time.Duration, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- func() error {
				c, err := net.Dial("tcp", "127.0.0.1:80")
				if err != nil {
					return err
				}
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					t0 := time.Now()
					if t0.After(deadline) {
						return nil
					}
					if _, err := c.Write(req); err != nil {
						return err
					}
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						return err
					}
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err != nil {
						return err
					}
					if resp.StatusCode != http.StatusOK {
						return fmt.Errorf("status %d", resp.StatusCode)
					}
					out[i] = append(out[i], time.Since(t0))
				}
			}()
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			benchkit.Fatal(fmt.Errorf("%s%s: %w", host, path, err))
		}
	}
	return slices.Concat(out...)
}
