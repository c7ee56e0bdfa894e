package render

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"openflare/agent/protocol"
	"openflare/testing/testsupport"
)

// FuzzRender feeds arbitrary source JSON and support files (as a JSON array)
// to Render: it must never panic, must fail with a message, or must render
// the same checksum twice.
func FuzzRender(f *testing.F) {
	seeded := false
	// The fixtures are read in place; without them (and outside CI) the
	// target falls back to vector B rather than being skipped.
	root := testsupport.SharedDirIfPresent(f, "fixtures/render")
	if entries, err := os.ReadDir(root); root != "" && err == nil {
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(root, e.Name(), "e4.json"))
			if err != nil {
				continue
			}
			var e4 protocol.ActiveConfig
			if json.Unmarshal(data, &e4) != nil {
				continue
			}
			support, _ := json.Marshal(e4.SupportFiles)
			f.Add(e4.SourceConfigJSON, string(support))
			seeded = true
		}
	}
	if !seeded {
		f.Add(vectorBSource, "[]")
	}
	// Small seeds reach the option branches with few mutations, which the
	// large fixture documents rarely do.
	cert, _ := json.Marshal([]protocol.SupportFile{{Path: "1.crt", Content: testCertPEM(f, 1, "*.example.org", "example.org")}})
	for _, seed := range compactSeeds {
		f.Add(seed, string(cert))
	}
	f.Fuzz(func(t *testing.T, source, supportJSON string) {
		var support []protocol.SupportFile
		if json.Unmarshal([]byte(supportJSON), &support) != nil {
			support = nil
		}
		out, err := Config(source, support)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("error with an empty message")
			}
			return
		}
		again, err := Config(source, support)
		if err != nil {
			t.Fatalf("second render failed: %v", err)
		}
		if out.Checksum() != again.Checksum() {
			t.Fatalf("checksum not stable: %s then %s", out.Checksum(), again.Checksum())
		}
	})
}

var compactSeeds = []string{
	vectorBSource,
	`{"routes":[{"id":1,"site_name":"s","domains":["example.org","a.example.org","plain.example.org"],"origin_url":"https://o:8443/p?q=1","origin_host":"h:1","enable_https":true,"domain_cert_ids":[1,1,0],"redirect_http":true,"custom_headers":[{"key":"X","value":"\\\""}],"basic_auth_enabled":true,"basic_auth_username":"u","basic_auth_password":"p"}],` +
		`"openresty_config":{"http3_enabled":true,"origin_error_page_enabled":true,"origin_error_page_status_codes":["404","500-502"],"sw_offline_enabled":true,"sw_offline_domains":["a.example.org"]},` +
		`"waf":{"rule_groups":[{"id":1,"enabled":true,"is_global":true,"graph":{"entry":"s","nodes":{"s":{"type":"pow","config":{"difficulty":4}}}}}],"bindings":[]}}`,
	`{"routes":[{"id":2,"domains":["d.example"],"upstreams":["http://a:1/","http://b"],"limit_conn_per_server":-1,"limit_rate":"1M","limit_req_per_ip":"30r/m","cache_enabled":true,"cache_policy":"path_prefix","cache_rules":["/a/","/"]}],` +
		`"openresty_config":{"cache_enabled":true,"default_limit_conn_per_ip":5,"default_limit_req_per_ip":"10r/s","origin_error_page_enabled":true,"origin_error_page_get_only":true,"main_config_template":"{{OpenRestyCacheBlock}}{{OpenRestyDefaultServerBlock}}"},"waf":{}}`,
	`{"routes":[{"id":3,"site_name":"p","domains":["p.example.org"],"upstream_type":"pages","enable_https":true,"domain_cert_ids":[1],"pages_project_id":3,` +
		`"pages_deployment":{"entry_file":"main.html","spa_fallback_enabled":true,"spa_fallback_path":"a//b.html","api_proxy_enabled":true,"api_proxy_path":"api/","api_proxy_pass":"http://x","api_proxy_rewrite":"/v2/"}}],` +
		`"openresty_config":{"sw_offline_enabled":true,"sw_offline_domains":["p.example.org"]},"waf":{"rule_groups":[{"id":4,"enabled":true,"graph":{"nodes":{"a":{"type":"ip_match","config":{"ip_group_ids":[1]}}}}}],"bindings":[{"route_id":3,"rule_group_ids":[4]}]}}`,
}
