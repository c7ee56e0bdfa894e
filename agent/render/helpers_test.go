package render

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestSanitizeSiteName(t *testing.T) {
	tests := map[string]string{
		"demo":              "demo",
		"API Gateway (EU)":  "api_gateway__eu",
		"Café Ünicode 站点":   "caf___nicode",
		"中文站点":              "backend",
		`quote"back\slash`:  "quote_back_slash",
		"__x--y__":          "x__y",
		"":                  "backend",
		"MiXeD.Example.COM": "mixed_example_com",
		"a\x00b":            "a_b",
	}
	for in, want := range tests {
		if got := sanitizeSiteName(in); got != want {
			t.Errorf("sanitizeSiteName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLimitBurst(t *testing.T) {
	tests := map[string]int64{
		"10r/s": 20, "1r/s": 2, "0r/s": 0,
		"30r/m": 6, "7r/m": 5, "120r/m": 24, "24r/m": 5, "25r/m": 5, "26r/m": 5, "30r/m ": 5,
		"5r/h": 5, "junk": 5, "": 5, "r/s": 5, "-3r/s": 5, "+3r/s": 5, "1.5r/s": 5,
		"99999999999999999999999r/s": 5, "99999999999r/s": 199999999998, "9223372036854775807r/s": 5,
	}
	for in, want := range tests {
		if got := limitBurst(in); got != want {
			t.Errorf("limitBurst(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestLimitZone(t *testing.T) {
	tests := map[string]string{
		"10r/s":  "openflare_req_10rs",
		"120r/m": "openflare_req_120rm",
		"5R/S":   "openflare_req_5rs",
	}
	for in, want := range tests {
		if got := limitZone(in); got != want {
			t.Errorf("limitZone(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEffectiveLimits(t *testing.T) {
	cfg := &restyConfig{DefaultLimitConnPerServer: 200, DefaultLimitConnPerIP: 20, DefaultLimitRate: "256K", DefaultLimitReqPerIP: "5R/S"}
	inherit := effectiveLimits(&route{}, cfg)
	if inherit != (limits{200, 20, "256k", "5r/s"}) {
		t.Errorf("inherit = %+v", inherit)
	}
	off := effectiveLimits(&route{LimitConnPerServer: -1, LimitConnPerIP: -1, LimitRate: "-1", LimitReqPerIP: "-1"}, cfg)
	if off != (limits{}) {
		t.Errorf("disabled = %+v", off)
	}
	own := effectiveLimits(&route{LimitConnPerServer: 50, LimitRate: "64K", LimitReqPerIP: "0"}, cfg)
	if own != (limits{50, 20, "64k", "5r/s"}) {
		t.Errorf("override = %+v", own)
	}
	if none := effectiveLimits(&route{}, &restyConfig{DefaultLimitRate: "0", DefaultLimitReqPerIP: "-1"}); none != (limits{}) {
		t.Errorf("no defaults = %+v", none)
	}
}

func TestCacheTest(t *testing.T) {
	tests := []struct {
		policy string
		rules  []string
		want   string
	}{
		{"all", nil, ""},
		{"", []string{"x"}, ""},
		{" URL ", nil, ""},
		{"suffix", []string{"JPG", "tar.gz", "c++"}, `if ($uri !~* "\\.(?:JPG|tar\\.gz|c\\+\\+)$")`},
		{"path_prefix", []string{"/static/", "/", "/a.b(c)", `/say"hi"`, "/v1/api//"},
			`if ($uri !~ "^(?:/static(?:/|$)|/|/a\\.b\\(c\\)(?:/|$)|/say\"hi\"(?:/|$)|/v1/api(?:/|$))")`},
		{"PATH_EXACT", []string{"/price$", "/~user/*", "/q?x"}, `if ($uri !~ "^(?:/price\\$|/~user/\\*|/q\\?x)$")`},
		{"static", nil, `if ($uri !~* "\\.(?:css|js|mjs|map|ico|cur|gif|jpg|jpeg|png|webp|avif|svg|svgz|ttf|otf|woff|woff2|eot|mp3|mp4|webm|ogg|flac|wasm|pdf|zip|7z|gz|tar)$")`},
		{"something-new", nil, `if ($uri !~* "\\.(?:css|js|mjs|map|ico|cur|gif|jpg|jpeg|png|webp|avif|svg|svgz|ttf|otf|woff|woff2|eot|mp3|mp4|webm|ogg|flac|wasm|pdf|zip|7z|gz|tar)$")`},
	}
	for _, tt := range tests {
		got := cacheTest(tt.policy, tt.rules)
		want := ""
		if tt.want != "" {
			want = "        " + tt.want + " {\n            set $openflare_skip_cache 1;\n        }\n"
		}
		if got != want {
			t.Errorf("cacheTest(%q, %q) =\n%s\nwant\n%s", tt.policy, tt.rules, got, want)
		}
	}
}

func TestSPAFallback(t *testing.T) {
	tests := map[string]string{
		"":                  "/index.html",
		"/":                 "/index.html",
		"app//shell.html":   "/app/shell.html",
		"/spa/../evil.html": "/index.html",
		"/./x.html":         "/index.html",
		"/dir/":             "/index.html",
		`/a\b.html`:         "/index.html",
		`/a"b.html`:         "/index.html",
		"/a'b.html":         "/index.html",
		"/a;b.html":         "/index.html",
		"/a b.html":         "/index.html",
		"/a\tb.html":        "/index.html",
		"/a\u00a0b.html":    "/index.html",
		"shell.html":        "/shell.html",
		"/deep/x/200.html":  "/deep/x/200.html",
		"/x..y.html":        "/x..y.html",
	}
	for in, want := range tests {
		if got := spaFallback(in); got != want {
			t.Errorf("spaFallback(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExpandStatusTags(t *testing.T) {
	tests := []struct {
		tags []string
		want []int
		ok   bool
	}{
		{[]string{"404", "500-503", "502"}, []int{404, 500, 501, 502, 503}, true},
		{[]string{"502", "504", "520-526"}, []int{502, 504, 520, 521, 522, 523, 524, 525, 526}, true},
		{[]string{" 599 "}, []int{599}, true},
		{[]string{"400-400"}, []int{400}, true},
		{[]string{}, nil, true},
		{[]string{"500", "399"}, nil, false},
		{[]string{"600"}, nil, false},
		{[]string{"503-500"}, nil, false},
		{[]string{"5xx"}, nil, false},
		{[]string{"500-"}, nil, false},
		{[]string{"500-502-504"}, nil, false},
		{[]string{"+500"}, nil, false},
		{[]string{""}, nil, false},
	}
	for _, tt := range tests {
		got, ok := expandStatusTags(tt.tags)
		if ok != tt.ok || !slices.Equal(got, tt.want) {
			t.Errorf("expandStatusTags(%q) = %v, %v; want %v, %v", tt.tags, got, ok, tt.want, tt.ok)
		}
	}
}

// TestOriginErrorPageInvalidTag: one bad tag turns the whole feature off in
// the config, though the template file is still shipped.
func TestOriginErrorPageInvalidTag(t *testing.T) {
	cfg := &restyConfig{OriginErrorPageEnabled: true, OriginErrorPageCodes: []string{"502", "bogus"}}
	if p := newOriginErrorPage(cfg); p.active() {
		t.Errorf("error page active despite an invalid tag: %+v", p)
	}
	cfg.OriginErrorPageCodes = nil
	if p := newOriginErrorPage(cfg); len(p.codes) != 100 || p.codes[0] != 500 {
		t.Errorf("default codes = %v, want 500-599", p.codes)
	}
	src := minimalSource(`{"id":1,"site_name":"s","domains":["s.example"],"origin_url":"http://10.0.0.1"}`,
		`{"origin_error_page_enabled":true,"origin_error_page_status_codes":["5OO"]}`)
	out, err := Config(src, nil)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	if containsAny(out.Route, "error_page", "proxy_intercept_errors", "header_filter_by_lua_block") {
		t.Errorf("error page rendered despite an invalid tag:\n%s", out.Route)
	}
	if fileContent(out.Files, originErrorPagePath) != string(builtinOriginErrorHTML) {
		t.Errorf("template file not shipped with the built-in page")
	}
}

func TestAPIProxyPath(t *testing.T) {
	tests := map[string]string{
		"/api/":   "/api",
		"api":     "/api",
		"/api":    "/api",
		" /v1// ": "/v1",
		"/":       "",
		"":        "",
		"a/b/":    "/a/b",
	}
	for in, want := range tests {
		if got := apiProxyPath(in); got != want {
			t.Errorf("apiProxyPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPlanUpstream(t *testing.T) {
	tests := []struct {
		name      string
		r         route
		wantName  string
		wantHosts []string
		wantPass  string
	}{
		{"single with path and query", route{ID: 1, SiteName: "x", OriginURL: "http://h:1/a%20b/?q=1"}, "backend_x_1", []string{"h:1"}, "http://backend_x_1/a%20b/?q=1"},
		{"single root path dropped", route{ID: 2, SiteName: "x", Upstreams: []string{"https://10.0.3.3:8443/"}}, "backend_x_2", []string{"10.0.3.3:8443"}, "https://backend_x_2"},
		{"no port added", route{ID: 3, Domains: []string{"d.example"}, OriginURL: "https://origin"}, "backend_d_example_3", []string{"origin"}, "https://backend_d_example_3"},
		{"several", route{ID: 4, SiteName: "m", Upstreams: []string{"http://a:1", "http://b/", " "}}, "backend_m_4", []string{"a:1", "b"}, "http://backend_m_4"},
		{"several mixed schemes", route{ID: 5, SiteName: "m", OriginURL: "http://a/x?v=1", Upstreams: []string{"http://a/x?v=1", "https://b/x?v=1"}}, "", nil, "http://a/x?v=1"},
		{"several with a path", route{ID: 6, SiteName: "m", OriginURL: "http://a", Upstreams: []string{"http://a", "http://b/p"}}, "", nil, "http://a"},
		{"no scheme", route{ID: 7, SiteName: "m", OriginURL: "10.0.0.1:80"}, "", nil, "10.0.0.1:80"},
		{"unparsable", route{ID: 8, SiteName: "m", OriginURL: "http://[::1"}, "", nil, "http://[::1"},
	}
	for _, tt := range tests {
		got := planUpstream(&tt.r)
		if got.name != tt.wantName || !slices.Equal(got.hosts, tt.wantHosts) || got.proxyPass != tt.wantPass {
			t.Errorf("%s: plan = %+v, want {%s %v %s}", tt.name, got, tt.wantName, tt.wantHosts, tt.wantPass)
		}
	}
}

func TestProxyCachePath(t *testing.T) {
	tests := map[string]string{
		"":                      proxyCachePlaceholder,
		"/var/cache/openresty":  proxyCachePlaceholder,
		"/data/openflare/cache": "/data/openflare/cache",
		"/variant":              "/variant",
	}
	for in, want := range tests {
		if got := proxyCachePath(in); got != want {
			t.Errorf("proxyCachePath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNginxQuote(t *testing.T) {
	tests := map[string]string{
		"plain":           `"plain"`,
		`say "hi"`:        `"say \"hi\""`,
		`C:\temp`:         `"C:\\temp"`,
		"$host;{x} #y 中文": `"$host;{x} #y 中文"`,
	}
	for in, want := range tests {
		if got := quoted(in); got != want {
			t.Errorf("quoted(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSWJSCacheName(t *testing.T) {
	js := swJS(builtinOfflineHTML)
	if !strings.Contains(js, `var CACHE = "openflare-offline-26d3f897410f";`) {
		t.Errorf("built-in offline page: sw.js cache name wrong:\n%s", js[:60])
	}
}

func TestMainTemplateFallbacks(t *testing.T) {
	cfg := &restyConfig{MainConfigTemplate: "  \n", WorkerProcesses: "auto"}
	got := renderMain(cfg, nil)
	if !containsAll(got, "worker_processes auto;", "        return 421;\n", "    include __OPENFLARE_ROUTE_CONFIG__;\n") {
		t.Errorf("blank template did not fall back to the stock one:\n%s", got)
	}
	cfg.MainConfigTemplate = "a {{OpenRestyWorkerProcesses}} {{Unknown}} {{OpenRestyGzip}}"
	if got := renderMain(cfg, nil); got != "a auto {{Unknown}} off" {
		t.Errorf("unknown token handling: %q", got)
	}
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// quoteMeta must equal regexp.QuoteMeta byte for byte: cache and Pages
// regexes in the server's output are built with it.
func TestQuoteMetaMatchesRegexp(t *testing.T) {
	var all strings.Builder
	for c := 0; c < 256; c++ {
		all.WriteByte(byte(c))
	}
	for _, s := range []string{"", "plain", `a.b+c*d?e(f)g|h[i]j{k}l^m$n\o`, "ünïcødé/.css", all.String()} {
		if got, want := quoteMeta(s), regexp.QuoteMeta(s); got != want {
			t.Errorf("quoteMeta(%q) = %q, want %q", s, got, want)
		}
	}
}

// ipGroupIDsOf decodes a waf_config.json and lists its IP-group
// references, as Config does for the document it renders.
func ipGroupIDsOf(wafConfigJSON []byte) ([]uint64, error) {
	var doc wafDocument
	if err := json.Unmarshal(wafConfigJSON, &doc); err != nil {
		return nil, fmt.Errorf("decode waf config: %w", err)
	}
	return doc.ipGroupIDs()
}
