package rendernginx

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"openflare/agent/protocol"
	"openflare/agent/render"
	"openflare/testing/controlplane"
)

// chooser drives the generator: a seeded PRNG in the regular test, the fuzz
// input in the fuzz target. Every choice is "one of n".
type chooser interface{ intn(n int) int }

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int) int { return c.r.IntN(n) }

// byteChooser spends one input byte per choice; once the input runs out
// every choice is 0, so a short input still yields a complete source.
type byteChooser struct{ data []byte }

func (c *byteChooser) intn(n int) int {
	if n <= 1 || len(c.data) == 0 {
		return 0
	}
	v := int(c.data[0])
	c.data = c.data[1:]
	return v % n
}

// generator builds sources that mix valid values, edge values and garbage
// for every value the renderer writes into nginx text (openresty_config
// scalars and route fields), starting from a valid source and perturbing a
// few fields each time, so that a good share still renders and reaches
// nginx -t.
type generator struct {
	c chooser
	// dir is where valid cache paths point: nginx -t creates the cache
	// directory, so it must be one the test owns.
	dir string
	cfg map[string]any // openresty_config overrides of the source being built
}

func (g *generator) pick(pool []string) string { return pool[g.c.intn(len(pool))] }
func (g *generator) chance(percent int) bool   { return g.c.intn(100) < percent }

// injections are what a compromised server could try to smuggle into a
// directive: separators, quotes, block delimiters, line breaks, variables,
// escapes, comment starts, traversal, NUL and non-ASCII text.
var injections = []string{";", `"`, "}", "{", "\n", "$", `\`, "'", "#", " ", "é", "\x00", "\t", "\r\n", "${", "$host", "/../", "中"}

// values is a field's candidates: forms that must render (including edge
// values) and forms nginx would reject or misread.
type values[T any] struct{ valid, invalid []T }

// choose takes a valid value 70% of the time, so that a source with a few
// perturbed fields still renders often enough to reach nginx -t.
func choose[T any](g *generator, v values[T]) T {
	pool := v.valid
	if len(v.invalid) > 0 && !g.chance(70) {
		pool = v.invalid
	}
	return pool[g.c.intn(len(pool))]
}

// str chooses a string and now and then injects one of the injections.
func (g *generator) str(v values[string]) string {
	s := choose(g, v)
	if g.chance(10) {
		i := g.c.intn(len(s) + 1)
		s = s[:i] + g.pick(injections) + s[i:]
	}
	return s
}

func strs(valid []string, invalid ...string) values[string] { return values[string]{valid, invalid} }
func ints(valid []int64, invalid ...int64) values[int64]    { return values[int64]{valid, invalid} }

const maxTimeout = 9223372036854775 // the largest whole-second timeout nginx takes

var (
	longExact = strings.Repeat("n", 42) + ".com"                // 46 bytes: the longest exact name the default hash holds
	tooLong   = strings.Repeat("n", 43) + ".com"                // 47 bytes
	longLabel = "*." + strings.Repeat("l", 46) + ".example.com" // a wildcard label at the limit
	veryLong  = strings.Repeat("v", 76) + ".com"                // fits a bucket of 128 only
)

// bucketTemplate is the stock template with a larger server-name hash
// bucket, under which longer domains load.
var bucketTemplate = strings.Replace(controlplane.StockMainTemplate, "http {\n", "http {\n    server_names_hash_bucket_size 128;\n", 1)

// configField perturbs one openresty_config key.
type configField struct {
	key   string
	value func(g *generator) any
}

func strField(key string, v values[string]) configField {
	return configField{key, func(g *generator) any { return g.str(v) }}
}

func intField(key string, v values[int64]) configField {
	return configField{key, func(g *generator) any { return choose(g, v) }}
}

func boolField(key string) configField {
	return configField{key, func(g *generator) any { return g.chance(50) }}
}

// cacheField perturbs a cache key and turns the cache on, without which
// the cache values are never written.
func cacheField(key string, v values[string]) configField {
	return configField{key, func(g *generator) any {
		g.cfg["cache_enabled"] = true
		return g.str(v)
	}}
}

func timeoutField(key string) configField {
	return intField(key, ints([]int64{15, 1, maxTimeout}, 0, -3, maxTimeout+1))
}

var configFields = []configField{
	strField("worker_processes", strs([]string{"auto", "1", " auto ", "16"}, "0", "-1", "", "two", "99999999999999999999")),
	intField("worker_connections", ints([]int64{4096, 1024, 8, 1 << 40}, 7, 0, -1)),
	intField("worker_rlimit_nofile", ints([]int64{65535, 1}, 0, -5)),
	strField("events_use", strs([]string{"epoll", "", " epoll "}, "poll", "kqueue", "select", "/dev/poll")),
	intField("default_server_return_status", ints([]int64{421, 444, 0, 100, 999}, 1000, -1, 99)),
	intField("keepalive_timeout", ints([]int64{20, 0, 65, maxTimeout}, -1, maxTimeout+1)),
	intField("keepalive_requests", ints([]int64{1000, 0}, -1)),
	timeoutField("client_header_timeout"),
	timeoutField("client_body_timeout"),
	timeoutField("send_timeout"),
	timeoutField("proxy_connect_timeout"),
	timeoutField("proxy_send_timeout"),
	timeoutField("proxy_read_timeout"),
	strField("client_max_body_size", strs([]string{"64m", "0", "1g", "10M", " 64m", "8589934591G"}, "8589934592G", "lots", "64 m", "1t", "")),
	strField("large_client_header_buffers", strs([]string{"4 16k", "4 512", "2\t8k"}, "4 511", "0 1k", "4", "4 16k 2", "4 1g", "x y")),
	strField("proxy_buffers", strs([]string{"16 16k", "8 16k", "9 8k"}, "1 16k", "16 0", "16 1g", "16", "9223372036854775807 16k", "2 8k")),
	strField("proxy_buffer_size", strs([]string{"8k", "4k", "0", "16k"}, "1g", "2000m", "x", "64k")),
	strField("proxy_busy_buffers_size", strs([]string{"64k", "16k", "112k"}, "8k", "1m", "0", "1g", "241k")),
	intField("gzip_min_length", ints([]int64{1024, 0}, -1)),
	intField("gzip_comp_level", ints([]int64{5, 1, 9}, 0, 10)),
	strField("resolvers", strs([]string{"", "1.1.1.1 8.8.8.8", "127.0.0.1:53 valid=30s ipv6=off", "[::1]:53", "localhost", "1.1.1.1\tvalid=1h30m"},
		"::1", "valid=30s", "1.1.1.1 ipv4=off", "1.1.1.1:0", "1.1.1.1 ipv6=no", "1.1.1.1 valid=5S", "1.1.1.1; user root")),
	boolField("cache_enabled"),
	{"cache_path", func(g *generator) any {
		g.cfg["cache_enabled"] = true
		return g.str(strs([]string{"", "/var/cache/openresty", filepath.Join(g.dir, "cache-a"), filepath.Join(g.dir, "cache-b") + "/"},
			"relative/cache", filepath.Join(g.dir, "cache b"), filepath.Join(g.dir, "ca;che"), g.dir+"/../escape", g.dir+"/./cache"))
	}},
	cacheField("cache_levels", strs([]string{"1:2", "1", "2:2:2", "2"}, "1:2:2:2", "3", "10:20", " 1:2", "1:", "")),
	cacheField("cache_inactive", strs([]string{"30m", "10m", "1d", "1M", "1h30m", "0"}, "500ms", "5S", "", "30 m")),
	cacheField("cache_max_size", strs([]string{"1g", "512m", "0", "1G"}, "1t", "", " 1g")),
	cacheField("cache_key_template", strs([]string{"$scheme$host$request_uri", "$host$uri$is_args$args", "${host}x", "$http_x_user $cookie_sid", `a"b`},
		"$nope", "", "$", "line\nbreak", "$openflare_waf_site")),
	cacheField("cache_lock_timeout", strs([]string{"5s", "500ms", "3", "0"}, "1y", "", "5 s")),
	cacheField("cache_use_stale", strs([]string{"error timeout updating http_500 http_502 http_503 http_504", "error timeout", "off", "http_429 invalid_header"},
		"error http_401", "", "error;")),
	intField("default_limit_conn_per_server", ints([]int64{200, 0, 65535, -1}, 65536)),
	intField("default_limit_conn_per_ip", ints([]int64{20, 0, 65535, -1}, 65536)),
	strField("default_limit_rate", strs([]string{"256k", "", "0", "-1", "2048"}, "1g", "fast")),
	strField("default_limit_req_per_ip", strs([]string{"5r/s", "", "30r/m", "-1", "5R/S"}, "0r/s", "10r/h", "10")),
	boolField("http3_enabled"),
	boolField("websocket_enabled"),
	boolField("origin_error_page_get_only"),
	{"origin_error_page_status_codes", func(g *generator) any {
		return [][]string{{"500-599"}, {"404", "500-503", "502"}, {"400-599"}, {"5xx"}, {}}[g.c.intn(5)]
	}},
	{"main_config_template", func(g *generator) any {
		if g.chance(50) {
			return bucketTemplate
		}
		return controlplane.StockMainTemplate
	}},
	{"sw_offline_enabled", func(g *generator) any {
		g.cfg["sw_offline_domains"] = []string{"secure.example.com"}
		return g.chance(70)
	}},
}

// routeField perturbs one route. Pages fields go into the deployment.
type routeField func(g *generator, r *controlplane.Route, d map[string]any)

var routeFields = []routeField{
	func(g *generator, r *controlplane.Route, _ map[string]any) {
		r.SiteName = g.str(strs([]string{"app", "Café 站点", `quote"back\slash`, "API Gateway (EU)", ""}, "a$b", "line\nbreak", "x\x00"))
	},
	func(g *generator, r *controlplane.Route, _ map[string]any) {
		domains := strs([]string{"app.test", "*.wild.test", ".dot.test", "www.tail.*", "é.test", "UPPER.test", "under_score.test", "[::1]", longExact, longLabel},
			veryLong, tooLong, "a;b", "~regex(", "#c", "", "*", "a..b", "$var.test", `bad\name`, "[::1")
		r.Domains = []string{g.str(domains)}
		if g.chance(30) {
			r.Domains = append(r.Domains, g.str(domains))
		}
	},
	func(g *generator, r *controlplane.Route, _ map[string]any) {
		r.OriginURL = g.str(strs([]string{"http://127.0.0.1:8081", "https://127.0.0.1:8443/", "http://127.0.0.1:8081/base/p%C3%A4th/?lang=zh&x=%2F",
			"http://[::1]:8081", "http://localhost:8081", "HTTP://127.0.0.1"},
			"127.0.0.1:8081", "ftp://127.0.0.1", "http://127.0.0.1:0", "http://127.0.0.1:99999", "http://u:p@127.0.0.1", "http://127.0.0.1/a;b",
			"http://127.0.0.1/$host", "http://127.0.0.1/#frag", "", "http://", "http://bad_host!:80", "http://127.0.0.1/a b", `http://127.0.0.1/"q`,
			"http://127.0.0.1/{x}", "http://[fe80::1%25lo]:80"))
	},
	func(g *generator, r *controlplane.Route, _ map[string]any) {
		r.Upstreams = choose(g, values[[]string]{
			valid: [][]string{
				{"http://127.0.0.1:8081", "http://127.0.0.1:8082/"},
				{"http://127.0.0.1:8081/app?v=1", "https://127.0.0.1:8443/app?v=1"},
				{"http://127.0.0.1:8081", "http://127.0.0.1:8082/p"},
				{"", " "},
			},
			invalid: [][]string{{"http://127.0.0.1:8081", "http://;"}, {"ftp://x"}, {"http://127.0.0.1:8082/$x"}},
		})
	},
	func(g *generator, r *controlplane.Route, _ map[string]any) {
		r.OriginHost = g.str(strs([]string{"app.example.org:8443", "", "internal.example.net", "[::1]:8443"},
			"h:0", "h:65536", "a b", "a$b", "x\r\nInjected: 1", "é.test"))
	},
	func(g *generator, r *controlplane.Route, _ map[string]any) {
		keys := strs([]string{"X-Test", "X_Unicode-1", "  X-Pad  ", "X.Dot!", ""}, "#x", "'x", "X Y", "X;Y", "X{", `X"`)
		vals := strs([]string{"v", `say "hi"`, `C:\temp\new`, "$host;$remote_addr {braces} #hash", "héllo ✓ 中文", "", "$1",
			"${host}-x", "$http_x_req_id", "\ttabbed"},
			"$nope", "a$", "${host", "line\nbreak", "x\r\nInjected: yes", strings.Repeat("a", 4100), "$0")
		for range 1 + g.c.intn(3) {
			r.CustomHeaders = append(r.CustomHeaders, controlplane.Header{Key: g.str(keys), Value: g.str(vals)})
		}
	},
	func(g *generator, r *controlplane.Route, _ map[string]any) {
		conns := values[int]{[]int{100, 0, -1, 65535, 1}, []int{65536}}
		switch g.c.intn(4) {
		case 0:
			r.LimitConnPerServer = choose(g, conns)
		case 1:
			r.LimitConnPerIP = choose(g, conns)
		case 2:
			r.LimitRate = g.str(strs([]string{"512k", "", "1m", "2048", "-1", "0", "1M", " 64k "}, "1g", "fast", "-2"))
		default:
			r.LimitReqPerIP = g.str(strs([]string{"10r/s", "", "30r/m", "7R/M", "-1", "0"}, "0r/s", "10r/h", "10", "99999999999999999r/s"))
		}
	},
	func(g *generator, r *controlplane.Route, _ map[string]any) {
		g.cfg["cache_enabled"] = true
		r.CacheEnabled = true
		r.CachePolicy = g.str(strs([]string{"all", "", "url", "static", "suffix", "path_prefix", "path_exact", "bogus", " PATH_EXACT "}))
		many := make([]string, 600)
		for i := range many {
			many[i] = fmt.Sprintf("/p%d", i)
		}
		r.CacheRules = choose(g, values[[]string]{
			valid:   [][]string{{"jpg", "css"}, {"/static/", "/"}, {"/a.b(c)", `/say"hi"`, "/price$", "/~user/*", `C:\x`}, {}, {""}},
			invalid: [][]string{{"a\x00b"}, {"a\nb"}, {"\tx"}, many},
		})
	},
	func(g *generator, r *controlplane.Route, _ map[string]any) {
		r.BasicAuthEnabled = true
		r.BasicAuthUsername = g.str(strs([]string{"admin", "", "ü"}, strings.Repeat("u", 3000)))
		r.BasicAuthPassword = g.str(strs([]string{`p@ss:w0rd "q" ü`, "", "x"}))
	},
	func(g *generator, r *controlplane.Route, _ map[string]any) {
		// HTTPS with the golden certificates: 1 covers secure.example.com
		// and www.secure.example.com, 2 covers *.example.net.
		r.EnableHTTPS, r.RedirectHTTP = true, g.chance(50)
		r.Domains = []string{"secure.example.com", "app.example.net", "plain.example.org", "www.secure.example.com"}
		r.DomainCertIDs = choose(g, values[[]uint64]{
			valid:   [][]uint64{{1, 2, 0, 1}, {1, 2, 0, 0}, {2, 2, 0, 1}},
			invalid: [][]uint64{{0, 0, 0, 0}, {3, 0, 0, 0}, {2, 1, 0, 0}},
		})
	},
	func(g *generator, r *controlplane.Route, d map[string]any) {
		r.UpstreamType, r.OriginURL = "pages", "openflare-pages://project/1"
		switch g.c.intn(4) {
		case 0:
			d["entry_file"] = g.str(strs([]string{"index.html", "", "main.html", "sub/page.html"}, "../etc/passwd", "a b.html", "a;b", "$x.html", "a{b}.html", "./index.html"))
			d["local_root"] = g.str(strs([]string{"__OPENFLARE_PAGES_DIR__/projects/1/current", "", "/srv/site"}, "/a$b", "x\ny"))
		case 1:
			d["spa_fallback_enabled"] = true
			d["spa_fallback_path"] = g.str(strs([]string{"/ok.html", "", "/", "app//shell.html", "/spa/../evil.html", "/x y.html"}, "/a{b}.html", "/$x", "/x\x00y"))
		default:
			d["api_proxy_enabled"] = true
			d["api_proxy_path"] = g.str(strs([]string{"/api/", "api", "/", "/v1/data"}, "/a b", "/a{", "/v1;"))
			d["api_proxy_pass"] = g.str(strs([]string{"http://127.0.0.1:8090", "https://127.0.0.1:8443/", "http://127.0.0.1:8090/base", ""},
				"127.0.0.1:8090", "http://127.0.0.1:8090/$x"))
			d["api_proxy_rewrite"] = g.str(strs([]string{"/v2/", "/", "", "v3"}, "/$x", "/a b"))
		}
	},
}

// powWAF is a WAF document whose global group holds a pow node, which adds
// the PoW access block and locations to every server.
var powWAF = &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{{
	ID: 1, Name: "pow", Enabled: true, IsGlobal: true,
	Graph: controlplane.Graph{Entry: "p", Nodes: map[string]controlplane.GraphNode{"p": {Type: "pow"}}},
}}}

// source generates one source_config_json.
func (g *generator) source() string {
	g.cfg = map[string]any{}
	for range g.c.intn(4) {
		f := configFields[g.c.intn(len(configFields))]
		g.cfg[f.key] = f.value(g)
	}
	src := controlplane.Source{OpenResty: g.cfg}
	if g.chance(20) {
		src.WAF = powWAF
	}
	deployments := map[int]map[string]any{}
	for i := range 1 + g.c.intn(3) {
		r := controlplane.Route{
			ID: uint64(i + 1), SiteName: fmt.Sprintf("site-%d", i+1),
			Domains: []string{fmt.Sprintf("r%d.example.com", i+1)}, OriginURL: "http://127.0.0.1:8081",
		}
		d := map[string]any{"project_id": 1, "deployment_id": 1}
		for range g.c.intn(3) {
			routeFields[g.c.intn(len(routeFields))](g, &r, d)
		}
		if i > 0 && g.chance(5) {
			// Same id and site as the first route: one upstream name twice.
			r.ID, r.SiteName = src.Routes[0].ID, src.Routes[0].SiteName
		}
		if r.UpstreamType == "pages" {
			deployments[i] = d
		}
		src.Routes = append(src.Routes, r)
	}
	out := src.JSON()
	for i, d := range deployments {
		out = withPages(out, i, 1, d)
	}
	return out
}

// checkAccepted is the property: Render fails with a message, or what it
// renders loads in nginx. It reports whether nginx -t ran.
func checkAccepted(t *testing.T, l *loader, source string, support []protocol.SupportFile) bool {
	t.Helper()
	out, err := render.Config(source, support)
	if err != nil {
		if err.Error() == "" {
			t.Errorf("render failed with an empty message\nsource: %s", source)
		}
		return false
	}
	if err := l.load(out, l.cacheUnderRoot); err != nil {
		t.Errorf("rendered, but nginx rejects it: %v\nsource: %s", err, source)
	}
	return true
}

// cacheUnderRoot refuses a main config whose proxy_cache_path leaves the
// loader's directory: nginx -t would create (and chown) that directory, and
// every valid cache path the generator offers is inside it or the
// placeholder, which staging points at the loader's proxy cache.
func (l *loader) cacheUnderRoot(mainText string) (string, error) {
	for _, m := range cachePathRe.FindAllStringSubmatch(mainText, -1) {
		if m[2] != "__OPENFLARE_PROXY_CACHE_PATH__" && !strings.HasPrefix(m[2], l.root+string(filepath.Separator)) {
			return "", fmt.Errorf("proxy_cache_path %q is outside the test directory %s; the renderer accepted a cache path it should refuse", m[2], l.root)
		}
	}
	return mainText, nil
}

// TestAcceptedInputsPassNginxT runs the property over 300 sources from a
// fixed seed.
func TestAcceptedInputsPassNginxT(t *testing.T) {
	support := goldenCerts(t)
	l := newLoader(t)
	g := &generator{c: randChooser{rand.New(rand.NewPCG(20260718, 1))}, dir: l.root}
	const n = 300
	loaded := 0
	for range n {
		if checkAccepted(t, l, g.source(), support) {
			loaded++
		}
		if t.Failed() {
			break
		}
	}
	t.Logf("%d of %d sources rendered and passed nginx -t; the rest failed to render", loaded, n)
	// The property says little unless both outcomes are common.
	if loaded < n/5 || loaded > n*4/5 {
		t.Errorf("%d of %d sources rendered: the generator is out of balance", loaded, n)
	}
}

// FuzzRenderNginxT is the same property with the generator's choices taken
// from the fuzz input.
func FuzzRenderNginxT(f *testing.F) {
	support := goldenCerts(f)
	f.Add([]byte{})
	f.Add([]byte("\x03\x01\x15\x02\x00\x07\x01\x02\x09\x00\x01\x00"))
	f.Add([]byte("\x01\x22\x04\x03\x0a\x00\x00\x01\x01\x09\x05\x06\x07\x08"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l := newLoader(t)
		g := &generator{c: &byteChooser{data: data}, dir: l.root}
		checkAccepted(t, l, g.source(), support)
	})
}
