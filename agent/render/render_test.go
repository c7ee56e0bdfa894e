package render

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"openflare/agent/protocol"
)

// vectorBSource is test vector B of PROTOCOL 4.3.
const vectorBSource = `{"routes":[{"id":7,"site_name":"demo","domains":["demo.example.com"],"origin_url":"http://10.0.0.5:8080","upstreams":["http://10.0.0.5:8080"],"enabled":true,"enable_https":false,"redirect_http":false,"cache_enabled":false,"upstream_type":"direct"}],"openresty_config":{"worker_processes":"auto","websocket_enabled":true,"main_config_template":"workers {{OpenRestyWorkerProcesses}};\ninclude {{OpenRestyRouteConfigInclude}};\n","origin_error_page_enabled":false},"waf":{"rule_groups":[],"bindings":[{"route_id":7,"site_name":"demo","rule_group_ids":[]}]}}`

func TestVectorB(t *testing.T) {
	out, err := Config(vectorBSource, nil)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	if want := "workers auto;\ninclude __OPENFLARE_ROUTE_CONFIG__;\n"; out.Main != want {
		t.Errorf("Main = %q, want %q", out.Main, want)
	}
	if got, want := out.RouteChecksum(), "3a5b774c9813e5d7985a97e0323748d4cc089c0904f4f3a16014988c374977a1"; got != want {
		t.Errorf("sha256(ROUTE) = %s, want %s\nROUTE:\n%s", got, want, out.Route)
	}
	if got, want := fileContent(out.Files, WAFConfigFile), `{"rule_groups":[],"bindings":[{"route_id":7,"site_name":"demo","rule_group_ids":[]}]}`; got != want {
		t.Errorf("waf_config.json = %s, want %s", got, want)
	}
	if got, want := out.Checksum(), "a852b4f14bda0fa0bbab4b0a809f02f5347f80d4e138a2ede4d0eb8c32e8ca47"; got != want {
		t.Errorf("Checksum() = %s, want %s", got, want)
	}
	if got := filePaths(out.Files); strings.Join(got, ",") != "openresty_config.json,waf_config.json" {
		t.Errorf("files = %v", got)
	}
}

func TestRenderDeterministic(t *testing.T) {
	type input struct {
		name    string
		source  string
		support []protocol.SupportFile
	}
	inputs := []input{{name: "vector B", source: vectorBSource}}
	for _, c := range loadFixtures(t) {
		inputs = append(inputs, input{c.name, c.e4.SourceConfigJSON, c.e4.SupportFiles})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, in := range inputs {
		first, err1 := Config(in.source, in.support)
		shuffled := append([]protocol.SupportFile(nil), in.support...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for round, support := range [][]protocol.SupportFile{in.support, shuffled} {
			again, err2 := Config(in.source, support)
			if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
				t.Fatalf("%s round %d: errors differ: %v / %v", in.name, round, err1, err2)
			}
			if err1 != nil {
				continue
			}
			if first.Main != again.Main || first.Route != again.Route || first.Checksum() != again.Checksum() {
				t.Errorf("%s round %d: output differs between renders", in.name, round)
			}
			if strings.Join(filePaths(first.Files), ",") != strings.Join(filePaths(again.Files), ",") {
				t.Errorf("%s round %d: file order differs", in.name, round)
			}
		}
	}
}

// minimalSource builds a one-route source around a route JSON object.
func minimalSource(routeJSON, configJSON string) string {
	if configJSON == "" {
		configJSON = `{"worker_processes":"auto","websocket_enabled":true}`
	}
	return `{"routes":[` + routeJSON + `],"openresty_config":` + configJSON + `,"waf":{"rule_groups":[],"bindings":[]}}`
}

func TestRenderErrors(t *testing.T) {
	good := testCertPEM(t, 1, "*.example.org", "example.org")
	tests := []struct {
		name    string
		source  string
		support []protocol.SupportFile
		want    string // substring of the error
	}{
		{name: "empty", source: "", want: "source config is empty"},
		{name: "bad JSON", source: `{"routes":[`, want: "decode source config"},
		{name: "not an object", source: `"x"`, want: "not a JSON object"},
		{name: "legacy bare array", source: `[{"id":1}]`, want: "legacy bare route array"},
		{name: "wrong type", source: `{"routes":[{"id":"one"}]}`, want: "decode source config"},
		{name: "wrong waf type", source: `{"routes":[],"waf":{"rule_groups":{}}}`, want: "decode source config"},
		{name: "no domains, no name", source: minimalSource(`{"id":4,"origin_url":"http://a"}`, ""), want: "route #4 domains are invalid"},
		{name: "blank domain", source: minimalSource(`{"site_name":"s","domains":["a.example.org",""]}`, ""), want: "route s domains are invalid"},
		{name: "domain with a semicolon", source: minimalSource(`{"site_name":"s","domains":["a;b"]}`, ""), want: "route s domains are invalid"},
		{
			name:   "no certificate ids",
			source: minimalSource(`{"site_name":"s","domains":["a.example.org"],"enable_https":true}`, ""),
			want:   "路由 s 未配置证书",
		},
		{
			name:   "certificate missing",
			source: minimalSource(`{"site_name":"s","domains":["a.example.org"],"enable_https":true,"domain_cert_ids":[3]}`, ""),
			want:   "route s certificate 3 does not exist",
		},
		{
			name:    "certificate not PEM",
			source:  minimalSource(`{"site_name":"s","domains":["a.example.org"],"enable_https":true,"domain_cert_ids":[3]}`, ""),
			support: []protocol.SupportFile{{Path: "3.crt", Content: "not a certificate"}},
			want:    "site s certificate validation failed: certificate 3: no CERTIFICATE PEM block",
		},
		{
			name:    "certificate DER garbage",
			source:  minimalSource(`{"site_name":"s","domains":["a.example.org"],"enable_https":true,"domain_cert_ids":[3]}`, ""),
			support: []protocol.SupportFile{{Path: "3.crt", Content: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}},
			want:    "site s certificate validation failed: certificate 3: x509:",
		},
		{
			name:    "certificate does not cover",
			source:  minimalSource(`{"site_name":"bad","domains":["example.org","a.b.example.org"],"enable_https":true,"domain_cert_ids":[1,1]}`, ""),
			support: []protocol.SupportFile{{Path: "1.crt", Content: good}},
			want:    "site bad certificate validation failed: certificate does not cover domain a.b.example.org",
		},
		{
			name:   "pages without deployment",
			source: minimalSource(`{"site_name":"p","domains":["p.example.org"],"upstream_type":"pages"}`, ""),
			want:   "route p is a Pages route without pages_deployment",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Config(tt.source, tt.support)
			if err == nil {
				t.Fatalf("Render succeeded, want error containing %q; route:\n%s", tt.want, out.Route)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %q, want it to contain %q", err.Error(), tt.want)
			}
		})
	}
}

// TestHTTPSWildcard covers the wildcard rules of VerifyHostname: one label
// under the wildcard, and the apex only through its own SAN.
func TestHTTPSWildcard(t *testing.T) {
	support := []protocol.SupportFile{{Path: "9.crt", Content: testCertPEM(t, 9, "*.example.io")}}
	ok := minimalSource(`{"id":1,"site_name":"w","domains":["app.example.io","api.example.io"],"origin_url":"http://10.0.0.1","enable_https":true,"domain_cert_ids":[9,9],"redirect_http":true}`, "")
	out, err := Config(ok, support)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	for _, want := range []string{
		"    server_name app.example.io api.example.io;\n\n    return 301 https://$host$request_uri;\n",
		"    ssl_certificate __OPENFLARE_CERT_DIR__/9.crt;\n",
	} {
		if !strings.Contains(out.Route, want) {
			t.Errorf("route config lacks %q", want)
		}
	}
	for _, domain := range []string{"example.io", "a.b.example.io"} {
		src := minimalSource(`{"id":1,"site_name":"w","domains":["`+domain+`"],"origin_url":"http://10.0.0.1","enable_https":true,"domain_cert_ids":[9]}`, "")
		if _, err := Config(src, support); err == nil || !strings.Contains(err.Error(), "does not cover domain "+domain) {
			t.Errorf("%s: err = %v, want a coverage error", domain, err)
		}
	}
}

// TestSupportFilesLastWins: a path shipped twice keeps its last content, and
// the renderer's own files replace shipped copies.
func TestSupportFilesLastWins(t *testing.T) {
	out, err := Config(vectorBSource, []protocol.SupportFile{
		{Path: "x.txt", Content: "first"},
		{Path: WAFConfigFile, Content: "stale"},
		{Path: "x.txt", Content: "second"},
	})
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	if got := fileContent(out.Files, "x.txt"); got != "second" {
		t.Errorf("x.txt = %q, want second", got)
	}
	if got := fileContent(out.Files, WAFConfigFile); got == "stale" {
		t.Errorf("waf_config.json kept the shipped copy")
	}
	if got := strings.Join(filePaths(out.Files), ","); got != "openresty_config.json,waf_config.json,x.txt" {
		t.Errorf("files = %s", got)
	}
}

// TestWAFLegacyGroup: a legacy group without a graph keeps its flattened keys
// and serialises an empty graph, which fails closed at runtime.
func TestWAFLegacyGroup(t *testing.T) {
	src := `{"routes":[],"openresty_config":{},"waf":{"rule_groups":[{"id":3,"name":"old","enabled":true,"is_global":false,"block_status_code":403,"ip_whitelist_group_ids":[5],"ip_blacklist_group_ids":[2,5],"country_blacklist":["KP"],"unknown":1}],"ip_groups":[],"bindings":[]}}`
	out, err := Config(src, nil)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	want := `{"rule_groups":[{"id":3,"name":"old","enabled":true,"is_global":false,"block_status_code":403,"ip_whitelist_group_ids":[5],"ip_blacklist_group_ids":[2,5],"country_blacklist":["KP"],"graph":{"entry":"","nodes":null}}],"bindings":[]}`
	if got := fileContent(out.Files, WAFConfigFile); got != want {
		t.Errorf("waf_config.json =\n%s\nwant\n%s", got, want)
	}
}

func TestPowBindingByRouteID(t *testing.T) {
	src := `{"routes":[{"id":1,"site_name":"a","domains":["a.example"],"origin_url":"http://10.0.0.1"},{"id":2,"site_name":"b","domains":["b.example"],"origin_url":"http://10.0.0.2"}],` +
		`"openresty_config":{"websocket_enabled":true},` +
		`"waf":{"rule_groups":[{"id":9,"enabled":true,"graph":{"entry":"s","nodes":{"s":{"type":"start","next":{"next":"p"}},"p":{"type":"pow","config":{}}}}},` +
		`{"id":10,"enabled":false,"is_global":true,"graph":{"entry":"p","nodes":{"p":{"type":"pow"}}}}],` +
		`"bindings":[{"route_id":2,"site_name":"b","rule_group_ids":[9]}]}}`
	out, err := Config(src, nil)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	a, b, _ := strings.Cut(out.Route, "upstream backend_b_2")
	if strings.Contains(a, "pow.runtime") {
		t.Errorf("route a got PoW although only route 2 is bound and the global group is disabled")
	}
	if strings.Count(b, `require("pow.runtime").check()`) != 1 || !strings.Contains(b, powStaticLocation) {
		t.Errorf("route b lacks its PoW access check or static location:\n%s", b)
	}
}

func TestPagesProjectIDs(t *testing.T) {
	src := `{"routes":[` +
		`{"site_name":"a","upstream_type":"pages","pages_project_id":7},` +
		`{"site_name":"b","upstream_type":"pages","pages_deployment":{"project_id":3}},` +
		`{"site_name":"c","upstream_type":"direct"},` +
		`{"site_name":"d","upstream_type":"pages","pages_project_id":3,"pages_deployment":{"project_id":99}}]}`
	ids, err := PagesProjectIDs(src)
	if err != nil {
		t.Fatalf("PagesProjectIDs: %v", err)
	}
	if got := jsonOf(ids); got != "[3,7]" {
		t.Errorf("ids = %s, want [3,7]", got)
	}
	_, err = PagesProjectIDs(`{"routes":[{"site_name":"lost","upstream_type":"pages","pages_deployment":{}}]}`)
	if err == nil || err.Error() != "route lost is a Pages route without a project id" {
		t.Errorf("err = %v", err)
	}
	if ids, err := PagesProjectIDs(vectorBSource); err != nil || len(ids) != 0 {
		t.Errorf("vector B: ids = %v, err = %v", ids, err)
	}
	if _, err := PagesProjectIDs(`[`); err == nil {
		t.Errorf("malformed source: no error")
	}
}

func TestIPGroupIDs(t *testing.T) {
	doc := `{"rule_groups":[` +
		`{"id":1,"ip_whitelist_group_ids":[9,4],"ip_blacklist_group_ids":[4],"graph":{"entry":"","nodes":null}},` +
		`{"id":2,"graph":{"entry":"s","nodes":{` +
		`"a":{"type":"ip_match","config":{"ips":["192.0.2.1"],"ip_group_ids":[2,9]}},` +
		`"b":{"type":"ip_match","config":{}},` +
		`"c":{"type":"ip_match"},` +
		`"d":{"type":"geo_match","config":{"ip_group_ids":[100]}}}}}],"bindings":[]}`
	ids, err := ipGroupIDsOf([]byte(doc))
	if err != nil {
		t.Fatalf("IPGroupIDs: %v", err)
	}
	if got := jsonOf(ids); got != "[2,4,9]" {
		t.Errorf("ids = %s, want [2,4,9]", got)
	}
	if ids, err := ipGroupIDsOf([]byte(`{"rule_groups":[],"bindings":[]}`)); err != nil || len(ids) != 0 {
		t.Errorf("empty: ids = %v, err = %v", ids, err)
	}
	bad := `{"rule_groups":[{"id":5,"graph":{"nodes":{"x":{"type":"ip_match","config":{"ip_group_ids":"7"}}}}}]}`
	if _, err := ipGroupIDsOf([]byte(bad)); err == nil || !strings.Contains(err.Error(), `rule group 5 node "x"`) {
		t.Errorf("bad config: err = %v", err)
	}
	if _, err := ipGroupIDsOf([]byte(`nope`)); err == nil {
		t.Errorf("malformed document: no error")
	}
}

func jsonOf(v any) string {
	data, _ := json.Marshal(v)
	return string(data)
}

// TestPagesWithPow: Pages servers get the PoW check and locations like proxy
// servers, and never the origin error page.
func TestPagesWithPow(t *testing.T) {
	src := `{"routes":[{"id":3,"site_name":"p","domains":["p.example.org"],"upstream_type":"pages","pages_deployment":{"project_id":3}}],` +
		`"openresty_config":{"origin_error_page_enabled":true},` +
		`"waf":{"rule_groups":[{"id":1,"enabled":true,"is_global":true,"graph":{"entry":"p","nodes":{"p":{"type":"pow"}}}}],"bindings":[]}}`
	out, err := Config(src, nil)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	if !containsAll(out.Route, accessBlockPow, powAPILocations, powStaticLocation,
		`    root "__OPENFLARE_PAGES_DIR__";`+"\n"+`    index "index.html";`,
		"        try_files /index.html =404;\n", "        try_files $uri $uri/ =404;\n") {
		t.Errorf("Pages route lacks PoW or defaults:\n%s", out.Route)
	}
	if containsAny(out.Route, "error_page", "proxy_intercept_errors") {
		t.Errorf("Pages route got the origin error page:\n%s", out.Route)
	}
}
