package rendernginx

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"openflare/agent/protocol"
	"openflare/agent/render"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current renderer (certificates are created only when absent)")

const goldenDir = "testdata/golden"

// goldenCertHosts are the test certificates: 1 covers the "secure" site,
// 2 is a wildcard for another domain.
var goldenCertHosts = map[uint64][]string{
	1: {"secure.example.com", "www.secure.example.com"},
	2: {"*.example.net"},
}

// goldenCerts returns the certificates as support files. They are made once
// (on -update, when absent) and then reused, because every render's
// checksum covers them and a fresh key would change every golden checksum.
func goldenCerts(t testing.TB) []protocol.SupportFile {
	t.Helper()
	dir := filepath.Join(goldenDir, "certs")
	var files []protocol.SupportFile
	for _, id := range []uint64{1, 2} {
		crt, key := filepath.Join(dir, fmt.Sprintf("%d.crt", id)), filepath.Join(dir, fmt.Sprintf("%d.key", id))
		if _, err := os.Stat(crt); errors.Is(err, os.ErrNotExist) && *update {
			certPEM, keyPEM := controlplane.SelfSignedCert(id, goldenCertHosts[id]...)
			for _, f := range controlplane.CertFiles(id, certPEM, keyPEM) {
				writeGolden(t, filepath.Join(dir, f.Path), f.Content)
			}
		}
		certPEM, err := os.ReadFile(crt)
		if err != nil {
			t.Fatalf("test certificate missing (run go test -update once): %v", err)
		}
		files = append(files, controlplane.CertFiles(id, string(certPEM), string(readFile(t, key)))...)
	}
	return files
}

func writeGolden(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Origins are IP literals, so nginx never needs DNS to load a golden config.
const (
	origin1 = "http://127.0.0.1:8081"
	origin2 = "http://127.0.0.1:8082"
	origin3 = "http://127.0.0.1:8083"
)

// goldenCase is one source of the matrix.
type goldenCase struct {
	name   string
	source func() string
}

func goldenCases() []goldenCase {
	route := func(id uint64, site, domain, origin string) controlplane.Route {
		return controlplane.Route{ID: id, SiteName: site, Domains: []string{domain}, OriginURL: origin}
	}
	cacheRoute := func(id uint64, policy string, rules ...string) controlplane.Route {
		r := route(id, "cache-"+policy, policy+".cache.example.com", origin1)
		r.CacheEnabled, r.CachePolicy, r.CacheRules = true, policy, rules
		return r
	}
	return []goldenCase{
		{"http-only", func() string {
			return controlplane.Source{
				Routes:    []controlplane.Route{route(1, "plain", "plain.example.com", origin1)},
				OpenResty: map[string]any{"http3_enabled": false},
			}.JSON()
		}},
		{"https-redirect-mixed-certs", func() string {
			r := controlplane.Route{
				ID: 1, SiteName: "mixed", OriginURL: origin1, EnableHTTPS: true, RedirectHTTP: true,
				Domains:       []string{"secure.example.com", "plain.example.org", "app.example.net", "www.secure.example.com"},
				DomainCertIDs: []uint64{1, 0, 2, 1},
			}
			return controlplane.Source{Routes: []controlplane.Route{r}}.JSON()
		}},
		{"named-upstream", func() string {
			r := route(1, "API Gateway", "api.example.com", origin1)
			r.Upstreams = []string{origin1, origin2 + "/", origin3}
			return controlplane.Source{Routes: []controlplane.Route{r}}.JSON()
		}},
		{"cache-policies", func() string {
			return controlplane.Source{
				Routes: []controlplane.Route{
					cacheRoute(1, "all"), cacheRoute(2, "url"), cacheRoute(3, "static"),
					cacheRoute(4, "suffix", "jpg", "tar.gz", "c++"),
					cacheRoute(5, "path_prefix", "/static/", "/", "/a.b(c)"),
					cacheRoute(6, "path_exact", "/index.html", "/price$", "/q?x"),
				},
				OpenResty: map[string]any{"cache_enabled": true},
			}.JSON()
		}},
		{"limits", func() string {
			on := route(1, "limits-on", "on.example.com", origin1)
			on.LimitConnPerServer, on.LimitConnPerIP, on.LimitRate, on.LimitReqPerIP = 100, 10, "512k", "10r/s"
			off := route(2, "limits-off", "off.example.com", origin1)
			off.LimitConnPerServer, off.LimitConnPerIP, off.LimitRate, off.LimitReqPerIP = -1, -1, "-1", "-1"
			return controlplane.Source{
				Routes: []controlplane.Route{on, off, route(3, "limits-default", "default.example.com", origin1)},
				OpenResty: map[string]any{
					"default_limit_conn_per_server": 200, "default_limit_conn_per_ip": 20,
					"default_limit_rate": "256k", "default_limit_req_per_ip": "30r/m",
				},
			}.JSON()
		}},
		{"basic-auth", func() string {
			r := route(1, "private", "private.example.com", origin1)
			r.BasicAuthEnabled, r.BasicAuthUsername, r.BasicAuthPassword = true, "admin", `p@ss:w0rd "q" ü`
			return controlplane.Source{Routes: []controlplane.Route{r}}.JSON()
		}},
		{"pages-spa-api", func() string {
			r := controlplane.Route{ID: 1, SiteName: "docs", Domains: []string{"docs.example.com"}, OriginURL: "openflare-pages://project/1", UpstreamType: "pages"}
			return withPages(controlplane.Source{Routes: []controlplane.Route{r}}.JSON(), 0, 1, map[string]any{
				"project_id": 1, "project_slug": "docs", "deployment_id": 4, "deployment_number": 2,
				"checksum": "3f2a9c1d5e7b8a0f4c6d2e1b9a8f7e6d5c4b3a291807f6e5d4c3b2a1908f7e6d", "entry_file": "index.html",
				"spa_fallback_enabled": true, "spa_fallback_path": "/app/shell.html",
				"api_proxy_enabled": true, "api_proxy_path": "/api/", "api_proxy_pass": "http://127.0.0.1:8090", "api_proxy_rewrite": "/v2/",
				"local_root": "__OPENFLARE_PAGES_DIR__/projects/1/current",
			})
		}},
		{"origin-error-all-methods", func() string {
			return controlplane.Source{
				Routes:    []controlplane.Route{route(1, "err-all", "err.example.com", origin1)},
				OpenResty: map[string]any{"origin_error_page_status_codes": []string{"404", "500-503"}},
			}.JSON()
		}},
		{"origin-error-get-only", func() string {
			return controlplane.Source{
				Routes:    []controlplane.Route{route(1, "err-get", "err.example.com", origin1)},
				OpenResty: map[string]any{"origin_error_page_get_only": true, "origin_error_page_status_codes": []string{"502", "504", "520-526"}},
			}.JSON()
		}},
	}
}

// withPages adds pages_project_id and pages_deployment to route i of a
// source: controlplane.Route has no Pages fields, and the server publishes
// a deployment as an object inside the route (PROTOCOL 4.2).
func withPages(source string, i int, projectID uint64, deployment map[string]any) string {
	var doc struct {
		Routes    []json.RawMessage `json:"routes"`
		OpenResty json.RawMessage   `json:"openresty_config"`
		WAF       json.RawMessage   `json:"waf"`
	}
	if err := json.Unmarshal([]byte(source), &doc); err != nil {
		panic(fmt.Sprintf("withPages: decode source: %v", err))
	}
	dep, err := json.Marshal(deployment)
	if err != nil {
		panic(fmt.Sprintf("withPages: encode deployment: %v", err))
	}
	r := doc.Routes[i]
	doc.Routes[i] = json.RawMessage(fmt.Sprintf(`%s,"pages_project_id":%d,"pages_deployment":%s}`, r[:len(r)-1], projectID, dep))
	out, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("withPages: encode source: %v", err))
	}
	return string(out)
}

// TestGoldenMatrix renders each matrix source and compares source, main
// config, route config and checksum with testdata/golden/<case>/; every
// golden output must also pass nginx -t.
func TestGoldenMatrix(t *testing.T) {
	support := goldenCerts(t)
	l := newLoader(t)
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			var src bytes.Buffer
			if err := json.Indent(&src, []byte(c.source()), "", "  "); err != nil {
				t.Fatalf("indent source: %v", err)
			}
			src.WriteByte('\n')
			out, err := render.Config(c.source(), support)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			files := []struct{ name, got string }{
				{"source.json", src.String()},
				{"main.conf", out.Main},
				{"routes.conf", out.Route},
				{"checksum.txt", out.Checksum() + "\n"},
			}
			dir := filepath.Join(goldenDir, c.name)
			for _, f := range files {
				path := filepath.Join(dir, f.name)
				if *update {
					writeGolden(t, path, f.got)
					continue
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("golden file missing (run go test -update): %v", err)
				}
				if string(want) != f.got {
					t.Errorf("%s differs from the golden file (run go test -update if the change is intended):\n%s", path, testsupport.DiffExcerpt(string(want), f.got))
				}
			}
			if err := l.load(out, nil); err != nil {
				t.Errorf("nginx -t: %v", err)
			}
		})
	}
}
