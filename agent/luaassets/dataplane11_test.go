package luaassets_test

// DATAPLANE 11, the request-level cases no other test drives (23 and 24,
// origin error pages; 25, basic auth before the WAF), and the DATAPLANE 10
// row "origin error template missing". These need what the renderer emits
// for a route, not a hand-written server block, so they run the agent's
// whole path: render, adapt to this nginx, land, start. The package is
// external because agent/landing imports luaassets.
//
// Where the other §11 cases are tested (package luaassets):
//
//	1, 2, 3, 5, 6, 7        TestWAFDecisions
//	4, 8                    TestWAFLoading
//	9, 10, 11               TestUASecurity/ua_check_rules (per label: ua_check_labels, classifier)
//	12, 13                  TestSecurityCheckFlags/DATAPLANE_11_cases_12_and_13 (per flag: TestSecurityCheckFlags)
//	14, 15                  TestIPGroupSnapshots
//	16                      the geo_match tests
//	17–22                   TestPowFlow
//	26                      TestServiceWorker
//	27                      TestObservability/case27

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"openflare/agent/landing"
	"openflare/agent/luaassets"
	"openflare/agent/nginx"
	"openflare/agent/osuser"
	"openflare/agent/protocol"
	"openflare/agent/render"
	"openflare/testing/controlplane"
	"openflare/testing/nginxtest"
)

const (
	clientIP  = "127.0.0.10" // the client that case 1's graph blocks
	otherAddr = "127.0.0.11"
	obsPort   = 19181
)

// node is a rendered version landed under a temp dir and served by nginx.
type node struct {
	paths landing.Paths
	main  string // the landed main config
	route string // the landed route config
	nginx *nginxtest.Server
}

// landRendered renders src, adapts and lands it the way the agent's apply
// does, and starts nginx on it.
func landRendered(t *testing.T, src controlplane.Source, support ...protocol.SupportFile) *node {
	t.Helper()
	bin := nginxtest.Binary(t)
	caps, err := nginx.ReadCaps(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	if !caps.HasLua() {
		t.Skipf("%s has no Lua module (run `make deps`)", bin)
	}
	out, err := render.Config(src.JSON(), support)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	root := t.TempDir()
	// Workers run as another user when this runs as root.
	os.Chmod(root, 0o755)
	p := landing.Paths{
		Main:              filepath.Join(root, "nginx.conf"),
		Route:             filepath.Join(root, "etc", "openflare_routes.conf"),
		AccessLog:         filepath.Join(root, "var", "log", "openflare", "access.log"),
		ErrorLog:          filepath.Join(root, "var", "log", "openflare", "error.log"),
		PID:               filepath.Join(root, "nginx.pid"),
		TempDir:           filepath.Join(root, "var", "cache", "nginx"),
		ProxyCache:        filepath.Join(root, "var", "cache", "openflare_proxy"),
		CertDir:           filepath.Join(root, "certs"),
		OpenRestyCertDir:  filepath.Join(root, "certs"),
		LuaDir:            filepath.Join(root, "lua"),
		OpenRestyLuaDir:   filepath.Join(root, "lua"),
		RuntimeConfigDir:  filepath.Join(root, "runtime"),
		PagesDir:          filepath.Join(root, "pages"),
		CountryMMDB:       filepath.Join(root, "country.mmdb"),
		CityMMDB:          filepath.Join(root, "city.mmdb"),
		ObservabilityPort: obsPort,
		HTTPErrorLog:      filepath.Join(root, "var", "log", "openflare", "http-error.log"),
		SelfTestDir:       filepath.Join(root, "run", "selftest"),
		EmptyDir:          filepath.Join(root, "empty"),
	}
	tree := landing.Tree{Paths: p, DataDir: root, StateDir: filepath.Join(root, "state")}
	if err := tree.Prepare(osuser.Identity{}, false); err != nil {
		t.Fatal(err)
	}
	adapter := &nginx.Adapter{Caps: caps, Host: osuser.CurrentHost()}
	mainText, err := adapter.Main(out.Main)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	// nginx started as root runs workers as nobody unless told otherwise;
	// the test namespace maps one uid only (see testing/rendernginx).
	if !regexp.MustCompile(`(?m)^[ \t]*user[ \t]`).MatchString(mainText) {
		mainText = "user root;\n" + mainText
	}
	set, err := landing.Plan(p, mainText, adapter.Route(out.Route), out.Files)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if err := set.Write(nil); err != nil {
		t.Fatalf("land: %v", err)
	}
	n := &node{paths: p}
	for dst, path := range map[*string]string{&n.main: p.Main, &n.route: p.Route} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		*dst = string(b)
	}
	n.nginx = nginxtest.StartConf(t, bin, root, n.main)
	nginxtest.WaitPort(t, "127.0.0.1:80")
	return n
}

type answer struct {
	status  int
	body    string
	header  http.Header
	chunked bool
}

// do sends one request to nginx on port 80 from the client address from.
func do(t *testing.T, from, method, host, target string, header http.Header) answer {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	client := &http.Client{
		Transport:     &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true},
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("a=1")
	}
	req, err := http.NewRequest(method, "http://127.0.0.1"+target, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s%s: %v", method, host, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, body: string(b), header: resp.Header, chunked: len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"}
}

func expectAnswer(t *testing.T, what string, got answer, status int, body, contentType string) {
	t.Helper()
	if got.status != status || got.body != body {
		t.Errorf("%s: got %d %q, want %d %q", what, got.status, got.body, status, body)
	}
	if ct := got.header.Get("Content-Type"); contentType != "" && ct != contentType {
		t.Errorf("%s: Content-Type %q, want %q", what, ct, contentType)
	}
}

// origin answers by Host: "down.*" 503 "down", "missing.*" 404 "nope",
// anything else 200 "origin-ok". It counts what it serves per Host.
type origin struct {
	*httptest.Server
	mu   sync.Mutex
	hits map[string]int
}

func newOrigin(t *testing.T) *origin {
	o := &origin{hits: map[string]int{}}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.hits[r.Host]++
		o.mu.Unlock()
		switch {
		case strings.HasPrefix(r.Host, "down."):
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "down")
		case strings.HasPrefix(r.Host, "missing."):
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, "nope")
		default:
			io.WriteString(w, "origin-ok")
		}
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *origin) served(host string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hits[host]
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func rawConfig(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// case1Group is §11 case 1's graph: clientIP → B(451, "ip blocked").
func case1Group(id uint64) controlplane.RuleGroup {
	return controlplane.RuleGroup{ID: id, Name: "case1", Enabled: true, Graph: controlplane.Graph{Entry: "start", Nodes: map[string]controlplane.GraphNode{
		"start": {Type: "start", Next: map[string]string{"next": "m"}},
		"m":     {Type: "ip_match", Config: rawConfig(map[string]any{"ips": []string{clientIP}}), Next: map[string]string{"true": "block", "false": "allow"}},
		"block": {Type: "block", Config: rawConfig(map[string]any{"status_code": 451, "response_body": "ip blocked"})},
		"allow": {Type: "allow"},
	}}}
}

// errorPageSource is routes with an origin answering 503, 404 and 200, one
// whose origin port is closed, and §11 case 25's basic-auth route, all with
// the origin error page (default codes 500–599) in the given mode.
func errorPageSource(o *origin, closed string, getOnly bool) controlplane.Source {
	route := func(id uint64, host, originURL string) controlplane.Route {
		return controlplane.Route{ID: id, SiteName: strings.Split(host, ".")[0], Domains: []string{host}, OriginURL: originURL}
	}
	auth := route(25, "auth.example.com", o.URL)
	auth.BasicAuthEnabled, auth.BasicAuthUsername, auth.BasicAuthPassword = true, "alice", "s3cret"
	return controlplane.Source{
		Routes: []controlplane.Route{
			route(7, "down.example.com", o.URL),
			route(8, "missing.example.com", o.URL),
			route(9, "closed.example.com", "http://"+closed),
			auth,
		},
		OpenResty: map[string]any{
			"origin_error_page_enabled":  true,
			"origin_error_page_html":     "<p>{{status}} at {{host}}</p>",
			"origin_error_page_get_only": getOnly,
		},
		WAF: &controlplane.WAF{
			RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), case1Group(2)},
			Bindings:   []controlplane.Binding{{RouteID: 25, SiteName: "auth", RuleGroupIDs: []uint64{2}}},
		},
	}
}

// TestRenderedErrorPages is §11 cases 23 and 24, and the DATAPLANE 10 row
// "origin error template missing" in both modes.
func TestRenderedErrorPages(t *testing.T) {
	t.Run("case23 all methods", func(t *testing.T) {
		o := newOrigin(t)
		n := landRendered(t, errorPageSource(o, closedPort(t), false))
		const html = "text/html; charset=utf-8"
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			expectAnswer(t, method+" 503 origin", do(t, otherAddr, method, "down.example.com", "/", nil), 503, "<p>503 at down.example.com</p>\n", html)
		}
		expectAnswer(t, "closed origin port", do(t, otherAddr, http.MethodGet, "closed.example.com", "/", nil), 502, "<p>502 at closed.example.com</p>\n", html)
		expectAnswer(t, "404 origin", do(t, otherAddr, http.MethodGet, "missing.example.com", "/", nil), 404, "nope", "")
		if o.served("down.example.com") != 2 {
			t.Errorf("origin saw %d requests for down.example.com, want 2", o.served("down.example.com"))
		}

		t.Run("template missing", func(t *testing.T) {
			if err := os.Remove(filepath.Join(n.paths.OpenRestyCertDir, "error_pages", "origin_error.html.tmpl")); err != nil {
				t.Fatal(err)
			}
			for _, method := range []string{http.MethodGet, http.MethodPost} {
				expectAnswer(t, method+" 503 origin", do(t, otherAddr, method, "down.example.com", "/", nil), 503, "Error 503\n", html)
			}
			expectAnswer(t, "closed origin port", do(t, otherAddr, http.MethodGet, "closed.example.com", "/", nil), 502, "Error 502\n", html)
		})
	})

	t.Run("case24 GET only", func(t *testing.T) {
		o := newOrigin(t)
		n := landRendered(t, errorPageSource(o, closedPort(t), true))
		got := do(t, otherAddr, http.MethodGet, "down.example.com", "/", nil)
		expectAnswer(t, "GET 503 origin", got, 503, "<p>503 at down.example.com</p>", "text/html; charset=utf-8")
		if got.header.Get("Content-Length") != "" || !got.chunked {
			t.Errorf("GET 503 origin: Content-Length %q, chunked %v; want no length, chunked", got.header.Get("Content-Length"), got.chunked)
		}
		for _, method := range []string{http.MethodPost, http.MethodHead} {
			got := do(t, otherAddr, method, "down.example.com", "/", nil)
			want := "down"
			if method == http.MethodHead {
				want = ""
			}
			expectAnswer(t, method+" 503 origin", got, 503, want, "text/plain; charset=utf-8")
		}
		expectAnswer(t, "GET 404 origin", do(t, otherAddr, http.MethodGet, "missing.example.com", "/", nil), 404, "nope", "")

		t.Run("template missing", func(t *testing.T) {
			if err := os.Remove(filepath.Join(n.paths.OpenRestyCertDir, "error_pages", "origin_error.html.tmpl")); err != nil {
				t.Fatal(err)
			}
			got := do(t, otherAddr, http.MethodGet, "down.example.com", "/", nil)
			if got.status != 503 || got.header.Get("Content-Type") != "text/html; charset=utf-8" ||
				!regexp.MustCompile(`<title>[^<]*503[^<]*</title>`).MatchString(got.body) || !regexp.MustCompile(`<h1>[^<]*503[^<]*</h1>`).MatchString(got.body) {
				t.Errorf("got %d %q %q, want a minimal 503 page", got.status, got.header.Get("Content-Type"), got.body)
			}
			expectAnswer(t, "POST 503 origin", do(t, otherAddr, http.MethodPost, "down.example.com", "/", nil), 503, "down", "")
		})
	})
}

// TestRenderedBasicAuth is §11 case 25: basic auth runs before the WAF.
func TestRenderedBasicAuth(t *testing.T) {
	o := newOrigin(t)
	landRendered(t, errorPageSource(o, closedPort(t), false))
	good := http.Header{"Authorization": {"Basic YWxpY2U6czNjcmV0"}}
	for _, c := range []struct {
		name   string
		from   string
		header http.Header
		status int
		body   string
	}{
		{"(a) blocked client without auth", clientIP, nil, 401, ""},
		{"(b) blocked client with auth", clientIP, good, 451, "ip blocked\n"},
		{"(c) lower-case scheme", clientIP, http.Header{"Authorization": {"basic YWxpY2U6czNjcmV0"}}, 401, ""},
		{"(d) other client with auth", otherAddr, good, 200, "origin-ok"},
		{"wrong password", otherAddr, http.Header{"Authorization": {"Basic YWxpY2U6d3Jvbmc="}}, 401, ""},
	} {
		got := do(t, c.from, http.MethodGet, "auth.example.com", "/", c.header)
		if got.status != c.status {
			t.Errorf("%s: got %d %q, want %d", c.name, got.status, got.body, c.status)
			continue
		}
		switch c.status {
		case 401:
			if h := got.header.Get("WWW-Authenticate"); h != `Basic realm="Restricted"` || !strings.Contains(got.body, "<title>401 Authorization Required</title>") {
				t.Errorf("%s: WWW-Authenticate %q, body %q", c.name, h, got.body)
			}
		default:
			if got.body != c.body {
				t.Errorf("%s: body %q, want %q", c.name, got.body, c.body)
			}
		}
	}
	if n := o.served("auth.example.com"); n != 1 {
		t.Errorf("origin saw %d requests, want only (d)'s", n)
	}
}

var (
	luaFileRef  = regexp.MustCompile(`\b(\w+_by_lua_file)\s+([^;\s]+);`)
	dofileRef   = regexp.MustCompile(`dofile\("([^"]+)"\)`)
	requireRef  = regexp.MustCompile(`require\("([\w.]+)"\)`)
	aliasRef    = regexp.MustCompile(`\balias\s+([^;\s]+);`)
	dictDecl    = regexp.MustCompile(`lua_shared_dict\s+(\w+)\s`)
	dictUse     = regexp.MustCompile(`ngx\.shared\.(\w+)|ngx\.shared\[(\w+)\]`)
	errorPageTo = regexp.MustCompile(`\berror_page\s+[^;@]*(@\w+);`)
	execTarget  = regexp.MustCompile(`ngx\.exec\(([\w.]+)`)
)

// TestRenderedReferencesExist walks a landed config with every Lua-using
// feature the renderer has (WAF, PoW, error pages in both modes, basic
// auth, the service worker on an HTTPS route) and checks that every Lua file, shared dict and location it or its
// scripts reference exists: the renderer and the scripts agree.
func TestRenderedReferencesExist(t *testing.T) {
	o := newOrigin(t)
	certPEM, keyPEM := controlplane.SelfSignedCert(1, "sw.example.com")
	for _, getOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("get_only=%v", getOnly), func(t *testing.T) {
			src := errorPageSource(o, closedPort(t), getOnly)
			pow := controlplane.RuleGroup{ID: 3, Name: "pow", Enabled: true, Graph: controlplane.Graph{Entry: "start", Nodes: map[string]controlplane.GraphNode{
				"start": {Type: "start", Next: map[string]string{"next": "pow"}},
				"pow":   {Type: "pow", Config: rawConfig(map[string]any{"algorithm": "fast", "difficulty": 1, "session_ttl": 600, "challenge_ttl": 300}), Next: map[string]string{"next": "allow"}},
				"allow": {Type: "allow"},
			}}}
			src.WAF.RuleGroups = append(src.WAF.RuleGroups, pow)
			src.WAF.Bindings = append(src.WAF.Bindings, controlplane.Binding{RouteID: 7, SiteName: "down", RuleGroupIDs: []uint64{3}})
			src.Routes = append(src.Routes, controlplane.Route{ID: 10, SiteName: "sw", Domains: []string{"sw.example.com"}, OriginURL: o.URL, EnableHTTPS: true, DomainCertIDs: []uint64{1}})
			src.OpenResty["sw_offline_enabled"] = true
			src.OpenResty["sw_offline_domains"] = []string{"sw.example.com"}
			n := landRendered(t, src, controlplane.CertFiles(1, certPEM, keyPEM)...)
			text := n.main + "\n" + n.route

			exists := func(what, p string) {
				t.Helper()
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s %s: %v", what, p, err)
				}
			}
			refs := 0
			for _, m := range luaFileRef.FindAllStringSubmatch(text, -1) {
				exists(m[1], m[2])
				refs++
			}
			for _, m := range dofileRef.FindAllStringSubmatch(text, -1) {
				exists("dofile", m[1])
			}
			for _, m := range aliasRef.FindAllStringSubmatch(text, -1) {
				exists("alias", m[1])
			}
			if refs == 0 || !strings.Contains(text, "waf.runtime") {
				t.Fatalf("the landed config runs no Lua:\n%s", text)
			}

			// Every Lua source that runs: the landed files and the inline blocks.
			sources := map[string]string{"inline blocks": text}
			lua := luaassets.Files(landing.Paths{}.LuaReplacer())
			for dir, files := range map[string][]luaassets.File{
				n.paths.OpenRestyLuaDir:  lua,
				n.paths.OpenRestyCertDir: luaassets.CertDirFiles(lua),
			} {
				for _, f := range files {
					if strings.HasSuffix(f.Path, ".lua") {
						b, err := os.ReadFile(filepath.Join(dir, f.Path))
						if err != nil {
							t.Fatalf("landed Lua file: %v", err)
						}
						sources[filepath.Join(filepath.Base(dir), f.Path)] = string(b)
					}
				}
			}
			declared, dicts, execs := map[string]bool{}, 0, 0
			for _, m := range dictDecl.FindAllStringSubmatch(n.main, -1) {
				declared[m[1]] = true
			}
			for name, src := range sources {
				for _, m := range requireRef.FindAllStringSubmatch(src, -1) {
					mod := m[1]
					if builtinModule(mod) {
						continue
					}
					file := strings.ReplaceAll(mod, ".", "/")
					_, e1 := os.Stat(filepath.Join(n.paths.OpenRestyLuaDir, file+".lua"))
					_, e2 := os.Stat(filepath.Join(n.paths.OpenRestyLuaDir, file, "init.lua"))
					if e1 != nil && e2 != nil {
						t.Errorf("%s requires %s, which is not in the Lua dir", name, mod)
					}
				}
				for _, m := range dictUse.FindAllStringSubmatch(src, -1) {
					dict := m[1]
					if dict == "" {
						c := regexp.MustCompile(`local\s+` + m[2] + `\s*=\s*"(\w+)"`).FindStringSubmatch(src)
						if c == nil {
							t.Errorf("%s: cannot resolve ngx.shared[%s]", name, m[2])
							continue
						}
						dict = c[1]
					}
					dicts++
					if !declared[dict] {
						t.Errorf("%s uses shared dict %s, which the main config does not declare", name, dict)
					}
				}
			}

			// Locations the config and the scripts send requests to.
			for _, m := range errorPageTo.FindAllStringSubmatch(text, -1) {
				if !strings.Contains(text, "location "+m[1]+" ") {
					t.Errorf("error_page names %s, which no location defines", m[1])
				}
			}
			for name, src := range sources {
				for _, m := range execTarget.FindAllStringSubmatch(src, -1) {
					uri := luaStringConst(src, m[1])
					if uri == "" {
						t.Errorf("%s: ngx.exec(%s): cannot resolve the target", name, m[1])
						continue
					}
					execs++
					servers := []string{text}
					if _, file, ok := strings.Cut(name, "/"); ok {
						servers = serversUsing(n.route, strings.TrimSuffix(file, ".lua"))
					}
					for _, server := range servers {
						if !strings.Contains(server, "location = "+uri+" ") {
							t.Errorf("%s execs %s, but a server running it has no such location:\n%s", name, uri, server)
						}
					}
				}
			}
			for _, server := range serversUsing(n.route, "pow/runtime") {
				for _, loc := range []string{"location = /.within.website/x/cmd/anubis/api/make-challenge ", "location = /.within.website/x/cmd/anubis/api/pass-challenge ", "location /.within.website/x/cmd/anubis/static/ "} {
					if !strings.Contains(server, loc) {
						t.Errorf("a PoW server lacks %q:\n%s", loc, server)
					}
				}
			}
			if len(serversUsing(n.route, "pow/runtime")) == 0 || len(serversUsing(n.route, "sw/runtime")) == 0 || dicts == 0 || execs < 2 {
				t.Errorf("the walk found %d PoW servers, %d SW servers, %d dict uses, %d internal redirects",
					len(serversUsing(n.route, "pow/runtime")), len(serversUsing(n.route, "sw/runtime")), dicts, execs)
			}
		})
	}
}

// builtinModule reports modules that come with LuaJIT or the nginx Lua
// packages rather than from the agent's Lua dir.
func builtinModule(mod string) bool {
	switch mod {
	case "bit", "ffi", "jit", "cjson", "cjson.safe", "table.new", "table.clear", "string.buffer":
		return true
	}
	return strings.HasPrefix(mod, "ngx.") || strings.HasPrefix(mod, "resty.") || strings.HasPrefix(mod, "jit.")
}

// luaStringConst resolves a Lua expression naming a URI: string literals
// and constants ("local X = ...", "_M.X = ...") joined with "..". It
// returns "" for anything else.
func luaStringConst(src, expr string) string {
	var b strings.Builder
	for _, part := range strings.Split(expr, "..") {
		part = strings.TrimSpace(part)
		if len(part) >= 2 && part[0] == '"' && part[len(part)-1] == '"' {
			b.WriteString(part[1 : len(part)-1])
			continue
		}
		m := regexp.MustCompile(`(?m)^(?:local\s+)?` + regexp.QuoteMeta(part) + `\s*=\s*(.+?)\s*$`).FindStringSubmatch(src)
		if m == nil {
			return ""
		}
		v := luaStringConst(src, m[1])
		if v == "" {
			return ""
		}
		b.WriteString(v)
	}
	return b.String()
}

// serversUsing returns the server blocks of a route config that run the
// given Lua module (by require name or file path).
func serversUsing(route, module string) []string {
	var out []string
	for _, block := range strings.Split(route, "\nserver {")[1:] {
		if strings.Contains(block, `require("`+strings.ReplaceAll(module, "/", ".")+`")`) || strings.Contains(block, module+".lua") {
			out = append(out, block)
		}
	}
	return out
}

// securityDiffer runs random query strings through security_check with
// every flag on, which proves most of them clean from the whole query
// string, and through a scan of each argument as the node reads it (the
// key, and the value under the key's name, each decoded once); it answers
// "<disagreements> <hits> <queries>". The fragments are attack tokens in
// several encodings and cases, their near-misses and separators.
const securityDiffer = `
local security = require("waf.security")
local config = {}
for _, f in ipairs(security.FLAGS) do
    config[f] = true
end
local frags = { "union", " ", "+", "select", "%20", "%2520", "&", "=", "&=", "'", "%27", "%2527", " or ", "1=1",
    "sleep(", "SLEEP(", "5", "x", "benchmark(", "javascript:", "JavaScript:", "alert", "(", '"', "eval(", "eval",
    "window.", "<script", "%3Cscript", "%253Cscript", "..", "/", "%2f", "%252f", "\\", "%5c", "%00", "%2500",
    "php://", "file://", ";wget", "|sh ", "|sh%09", "\96id\96", "$(id)", "&&curl", "http://127.0.0.1", "169.254.",
    "%0d%0a", "%250d%250a", "%0D", "%0a", "onerror=", "ONLOAD=", "document.cookie", "%", "%2", "%G", "a", "B",
    ",", ";", "<", "information_schema", "/**/", "%26", "%3d", "hello", "world", "k1=v1", "%252", "5",
    "%25253Cscript", "%2525", "%25", "3C", "script", "%252527", "%25252f", "=javascript:", "&javascript:(",
    "page=", "%u002e", "%c0%af", "${jndi:", "Set-Cookie:", "%3C?php", "etc/passwd" }
math.randomseed(tonumber(ngx.var.arg_seed))
local function scan_args(q)
    for piece in q:gmatch("[^&]+") do
        local eq = piece:find("=", 1, true)
        local k = ngx.unescape_uri(eq and piece:sub(1, eq - 1) or piece)
        local v = eq and ngx.unescape_uri(piece:sub(eq + 1)) or ""
        if security.hits(config, "QUERY", k) or (v ~= "" and security.hits(config, "QUERY", v, k:lower())) then
            return true
        end
    end
    return false
end
local differ, hits, n = 0, 0, tonumber(ngx.var.arg_n)
for _ = 1, n do
    local t = {}
    for k = 1, math.random(1, 10) do
        t[k] = frags[math.random(#frags)]
    end
    local q = table.concat(t)
    ngx.req.set_uri_args(q)
    local hit = scan_args(q)
    if hit then
        hits = hits + 1
    end
    if security.check(config) == hit then
        differ = differ + 1
        ngx.log(ngx.ERR, "security_check and the per-argument scan disagree on ", q)
    end
end
ngx.print(differ, " ", hits, " ", n)
`

// TestSecurityQueryWholeMatchesArgs: security_check decides most query
// strings from the whole string; on random queries it must agree with the
// per-argument scan (DATAPLANE 2.6) it stands for.
func TestSecurityQueryWholeMatchesArgs(t *testing.T) {
	root := t.TempDir()
	luaDir := filepath.Join(root, "lua")
	for _, f := range luaassets.Files(landing.Paths{RuntimeConfigDir: root}.LuaReplacer()) {
		p := filepath.Join(luaDir, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := nginxtest.Start(t, fmt.Sprintf(`
    lua_package_path "%[1]s/?.lua;%[1]s/?/init.lua;;";
    server {
        listen 80;
        location = /differ { content_by_lua_block { %[2]s } }
    }
`, luaDir, securityDiffer))
	nginxtest.WaitPort(t, "127.0.0.1:80")
	for seed := 1; seed <= 3; seed++ {
		got := do(t, otherAddr, http.MethodGet, "differ.test", fmt.Sprintf("/differ?seed=%d&n=10000", seed), nil)
		var differ, hits, n int
		if _, err := fmt.Sscan(got.body, &differ, &hits, &n); err != nil || got.status != 200 {
			t.Fatalf("seed %d: %d %q\n%s", seed, got.status, got.body, s.ErrorLog())
		}
		t.Logf("seed %d: %d of %d random queries hit", seed, hits, n)
		if differ != 0 {
			t.Errorf("seed %d: %d of %d queries decided differently:\n%s", seed, differ, n, s.ErrorLog())
		}
		if hits < n/10 || hits > n*9/10 {
			t.Errorf("seed %d: %d hits in %d queries: the fragments no longer exercise both outcomes", seed, hits, n)
		}
	}
}
