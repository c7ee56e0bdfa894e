package render

import (
	"encoding/json"
	"fmt"
	"testing"

	"openflare/agent/protocol"
)

// benchInput builds a synthetic version with n proxy routes: every third is
// HTTPS with the one shared certificate (every sixth redirects), every
// fourth has limits, every fifth caches, every seventh has two upstreams.
func benchInput(b *testing.B, n int) (string, []protocol.SupportFile) {
	b.Helper()
	routes := make([]map[string]any, 0, n)
	bindings := make([]map[string]any, 0, n)
	for i := 1; i <= n; i++ {
		site := fmt.Sprintf("site-%d", i)
		r := map[string]any{
			"id":            i,
			"site_name":     site,
			"domains":       []string{fmt.Sprintf("r%d.bench.example", i), fmt.Sprintf("www%d.bench.example", i)},
			"origin_url":    fmt.Sprintf("http://10.%d.%d.1:8080", i/250, i%250),
			"enabled":       true,
			"upstream_type": "direct",
		}
		if i%3 == 0 {
			r["enable_https"] = true
			r["domain_cert_ids"] = []int{1, 1}
			r["redirect_http"] = i%6 == 0
		}
		if i%4 == 0 {
			r["limit_conn_per_ip"] = 10
			r["limit_req_per_ip"] = fmt.Sprintf("%dr/s", 5+i%3)
		}
		if i%5 == 0 {
			r["cache_enabled"] = true
			r["cache_policy"] = "static"
		}
		if i%7 == 0 {
			r["upstreams"] = []string{fmt.Sprintf("http://10.0.%d.1:80", i%250), fmt.Sprintf("http://10.0.%d.2:80", i%250)}
		}
		routes = append(routes, r)
		bindings = append(bindings, map[string]any{"route_id": i, "site_name": site, "rule_group_ids": []int{}})
	}
	source, err := json.Marshal(map[string]any{
		"routes": routes,
		"openresty_config": map[string]any{
			"worker_processes": "auto", "worker_connections": 4096, "websocket_enabled": true,
			"http3_enabled": true, "cache_enabled": true, "cache_levels": "1:2",
			"origin_error_page_enabled": true, "origin_error_page_status_codes": []string{"500-599"},
			"main_config_template": stockMainTemplate,
		},
		"waf": map[string]any{"rule_groups": []any{}, "bindings": bindings},
	})
	if err != nil {
		b.Fatal(err)
	}
	support := []protocol.SupportFile{
		{Path: "1.crt", Content: testCertPEM(b, 42, "*.bench.example")},
		{Path: "1.key", Content: "-----BEGIN PRIVATE KEY-----\n(bench)\n-----END PRIVATE KEY-----\n"},
	}
	return string(source), support
}

func benchmarkRender(b *testing.B, n int) {
	source, support := benchInput(b, n)
	if _, err := Config(source, support); err != nil {
		b.Fatalf("Render: %v", err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Config(source, support); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRender10(b *testing.B)   { benchmarkRender(b, 10) }
func BenchmarkRender100(b *testing.B)  { benchmarkRender(b, 100) }
func BenchmarkRender1000(b *testing.B) { benchmarkRender(b, 1000) }
