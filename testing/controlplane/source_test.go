package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/testsupport"
)

// fixtureSource returns the source_config_json of a render fixture.
func fixtureSource(t *testing.T, name string) string {
	t.Helper()
	var ac protocol.ActiveConfig
	readJSON(t, filepath.Join(testsupport.SharedDir(t, "fixtures/render/"+name), "e4.json"), &ac)
	return ac.SourceConfigJSON
}

func wantSameJSON(t *testing.T, got, want string) {
	t.Helper()
	if got == want {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(0, i-80)
	t.Fatalf("documents differ at byte %d:\n got …%s\nwant …%s", i, got[from:min(len(got), i+80)], want[from:min(len(want), i+80)])
}

func TestStockMainTemplateIsTheFixture(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testsupport.SharedDir(t, "fixtures"), "stock_main_template.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != StockMainTemplate {
		t.Fatal("the embedded stock main template differs from shared/fixtures/stock_main_template.conf")
	}
}

func TestSourceMatchesFixtureStockDefaults(t *testing.T) {
	got := Source{Routes: []Route{{ID: 1, SiteName: "demo", Domains: []string{"demo.example.com"}, OriginURL: "http://10.0.0.5:8080"}}}.JSON()
	wantSameJSON(t, got, fixtureSource(t, "01-stock-defaults"))
}

func TestSourceMatchesFixtureHTTPOnly(t *testing.T) {
	got := Source{
		Routes:    []Route{{ID: 1, SiteName: "plain-site", Domains: []string{"www.example.org", "example.org"}, OriginURL: "http://10.0.0.6"}},
		OpenResty: map[string]any{"http3_enabled": false, "origin_error_page_enabled": false},
	}.JSON()
	wantSameJSON(t, got, fixtureSource(t, "02-http-only-h3-off"))
}

func TestSourceMatchesFixtureLimitDefaults(t *testing.T) {
	got := Source{
		Routes: []Route{
			{ID: 1, SiteName: "inherit", Domains: []string{"inherit.example.com"}, OriginURL: "http://10.0.6.1"},
			{ID: 2, SiteName: "disabled", Domains: []string{"disabled.example.com"}, OriginURL: "http://10.0.6.2",
				LimitConnPerServer: -1, LimitConnPerIP: -1, LimitRate: "-1", LimitReqPerIP: "-1"},
			{ID: 3, SiteName: "override", Domains: []string{"override.example.com"}, OriginURL: "http://10.0.6.3",
				LimitConnPerServer: 50, LimitRate: "64k", LimitReqPerIP: "120r/m"},
		},
		OpenResty: map[string]any{
			"http3_enabled": false, "origin_error_page_enabled": false,
			"default_limit_conn_per_server": 200, "default_limit_conn_per_ip": 20,
			"default_limit_rate": "256k", "default_limit_req_per_ip": "5r/s",
		},
	}.JSON()
	wantSameJSON(t, got, fixtureSource(t, "11-limits-defaults"))
}

func TestSourceMatchesFixtureWAF(t *testing.T) {
	want := fixtureSource(t, "21-waf-pow-and-block")
	var doc struct {
		WAF *WAF `json:"waf"`
	}
	if err := json.Unmarshal([]byte(want), &doc); err != nil {
		t.Fatal(err)
	}
	got := Source{
		Routes: []Route{
			{ID: 1, SiteName: "guarded", Domains: []string{"guarded.example.com"}, OriginURL: "http://10.0.15.1:8080", EnableHTTPS: true, DomainCertIDs: []uint64{1}},
			{ID: 2, SiteName: "open", Domains: []string{"open.example.com"}, OriginURL: "http://10.0.15.2:8080"},
		},
		OpenResty: map[string]any{
			"http3_enabled":      false,
			"sw_offline_enabled": true,
			"sw_offline_html":    "<!doctype html><h1>暂时无法访问 &amp; offline</h1><p>Contact: ops@example.com</p>\n",
			"sw_offline_domains": []string{"guarded.example.com"},
		},
		WAF: doc.WAF,
	}.JSON()
	wantSameJSON(t, got, want)
}

func TestSourceDefaultsAndOverrides(t *testing.T) {
	src := Source{
		Routes: []Route{
			{ID: 2, SiteName: "b", Domains: []string{"b.example"}, OriginURL: "http://127.0.0.1:1"},
			{ID: 1, SiteName: "a", Domains: []string{"a.example"}, OriginURL: "http://127.0.0.1:2"},
		},
		OpenResty: map[string]any{"events_use": nil, "cache_enabled": true, "cache_path": "/var/cache/x", "zz_custom": 1},
		WAF:       &WAF{RuleGroups: []RuleGroup{DefaultRuleGroup(), IPMatchRuleGroup(5, "ban", 3)}},
	}.JSON()
	var doc struct {
		OpenResty map[string]any `json:"openresty_config"`
		WAF       WAF            `json:"waf"`
	}
	if err := json.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc.OpenResty["events_use"]; ok {
		t.Error("a nil override did not remove events_use")
	}
	if doc.OpenResty["cache_path"] != proxyCachePathPlaceholder || doc.OpenResty["zz_custom"] != float64(1) {
		t.Errorf("openresty_config %v", doc.OpenResty)
	}
	if !strings.HasSuffix(strings.SplitN(src, `"waf"`, 2)[0], `"zz_custom":1},`) {
		t.Error("an unknown override key is not last")
	}
	b := doc.WAF.Bindings
	if len(b) != 2 || b[0].SiteName != "a" || len(b[0].RuleGroupIDs) != 1 || b[0].RuleGroupIDs[0] != 5 {
		t.Errorf("bindings %+v: want one per route, sorted by site name, bound to group 5", b)
	}
	ids, err := referencedGroupIDs(src)
	if err != nil || len(ids) != 1 || ids[0] != 3 {
		t.Errorf("referenced groups %v (%v), want [3]", ids, err)
	}
}

func TestSelfSignedCert(t *testing.T) {
	certPEM, keyPEM := SelfSignedCert(7, "demo.example.com", "127.0.0.1")
	files := CertFiles(7, certPEM, keyPEM)
	if files[0].Path != "7.crt" || files[1].Path != "7.key" || !strings.HasSuffix(files[0].Content, "-----\n") {
		t.Fatalf("files %+v", files)
	}
	if _, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM)); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode([]byte(certPEM))
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := cert.VerifyHostname("demo.example.com"); err != nil || cert.VerifyHostname("127.0.0.1") != nil ||
		!cert.NotBefore.Before(now) || cert.NotAfter.Before(now.AddDate(0, 11, 0)) || cert.Subject.CommonName != "demo.example.com" {
		t.Fatalf("certificate %v (%v)", cert.Subject, err)
	}
	if kb, _ := pem.Decode([]byte(keyPEM)); kb.Type != "PRIVATE KEY" {
		t.Fatalf("key block %q, want PKCS#8 PRIVATE KEY", kb.Type)
	}
}
