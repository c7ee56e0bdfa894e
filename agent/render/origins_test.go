package render

import (
	"slices"
	"strings"
	"testing"
)

// Output.Origins lists, for captured publishes, every host the route
// config has nginx connect to: each `server` of a named upstream, a
// verbatim proxy_pass, a Pages API proxy; and nothing else.
func TestOriginsOfFixtures(t *testing.T) {
	want := map[string][]Origin{
		"03-custom-main-template": {
			{RouteID: 1, Site: "tpl", URL: "http://127.0.0.1:9000", Scheme: "http", Host: "127.0.0.1", Port: "9000", Upstream: "backend_tpl_1"},
		},
		"04-multi-upstream-named": {
			{RouteID: 1, Site: "API Gateway (EU)", URL: "http://10.0.1.1:8080", Scheme: "http", Host: "10.0.1.1", Port: "8080", Upstream: "backend_api_gateway__eu_1"},
			{RouteID: 1, Site: "API Gateway (EU)", URL: "http://10.0.1.2:8080/", Scheme: "http", Host: "10.0.1.2", Port: "8080", Upstream: "backend_api_gateway__eu_1"},
			{RouteID: 1, Site: "API Gateway (EU)", URL: "http://10.0.1.3", Scheme: "http", Host: "10.0.1.3", Upstream: "backend_api_gateway__eu_1"},
		},
		"06-https-origin-host-override": {
			{RouteID: 1, Site: "secure-origin", URL: "https://origin.internal.example", Scheme: "https", Host: "origin.internal.example", Upstream: "backend_secure_origin_1"},
			{RouteID: 2, Site: "secure-origin-port", URL: "https://10.0.3.3:8443/", Scheme: "https", Host: "10.0.3.3", Port: "8443", Upstream: "backend_secure_origin_port_2"},
		},
		// Mixed schemes: proxy_pass carries origin_url and the upstreams
		// are not rendered, so the second one is no origin.
		"08-legacy-verbatim-proxy-pass": {
			{RouteID: 1, Site: "legacy-mixed", URL: "http://10.0.4.4:8080/app?v=1", Scheme: "http", Host: "10.0.4.4", Port: "8080"},
		},
		// A Pages route's origin_url is a project reference, never proxied.
		"23-pages-https-redirect-sw": {
			{RouteID: 1, Site: "site", URL: "https://api.internal.example:8443/", Scheme: "https", Host: "api.internal.example", Port: "8443"},
		},
		"24-multi-route-unicode": {
			{RouteID: 1, Site: "Café Ünicode 站点", URL: "http://10.0.17.1", Scheme: "http", Host: "10.0.17.1", Upstream: "backend_caf___nicode_1"},
			{RouteID: 2, Site: "中文站点", URL: "http://10.0.17.2:8080", Scheme: "http", Host: "10.0.17.2", Port: "8080", Upstream: "backend_backend_2"},
			{RouteID: 3, Site: `quote"back\slash`, URL: "http://10.0.17.3", Scheme: "http", Host: "10.0.17.3", Upstream: "backend_quote_back_slash_3"},
			{RouteID: 5, Site: "beta", URL: "http://10.0.17.5", Scheme: "http", Host: "10.0.17.5", Upstream: "backend_beta_5"},
		},
	}
	seen := 0
	for _, c := range loadFixtures(t) {
		out, err := Config(c.e4.SourceConfigJSON, c.e4.SupportFiles)
		if err != nil {
			continue // a render-error fixture
		}
		// Every origin's host is in the route config, where nginx reads it.
		for _, o := range out.Origins {
			if o.Host == "" || !strings.Contains(out.Route, o.Host) {
				t.Errorf("%s: origin %+v: host not in the route config", c.name, o)
			}
		}
		w, ok := want[c.name]
		if !ok {
			continue
		}
		seen++
		if !slices.Equal(out.Origins, w) {
			t.Errorf("%s: Origins\n%+v\nwant\n%+v", c.name, out.Origins, w)
		}
	}
	if seen != len(want) {
		t.Errorf("checked %d of the %d fixtures named", seen, len(want))
	}
}

func TestOriginsForms(t *testing.T) {
	tests := []struct {
		name, route string
		want        []Origin
	}{
		{
			"IPv6 upstreams keep their brackets; a duplicate is dropped",
			`{"id":7,"site_name":"v6","domains":["v6.example"],"origin_url":"http://[fd00::1]:8080","upstreams":["http://[fd00::1]:8080","http://[fd00::1]:8080/","http://[::ffff:a9fe:a9fe]"]}`,
			[]Origin{
				{RouteID: 7, Site: "v6", URL: "http://[fd00::1]:8080", Scheme: "http", Host: "[fd00::1]", Port: "8080", Upstream: "backend_v6_7"},
				{RouteID: 7, Site: "v6", URL: "http://[::ffff:a9fe:a9fe]", Scheme: "http", Host: "[::ffff:a9fe:a9fe]", Upstream: "backend_v6_7"},
			},
		},
		{
			"no site name: the first domain",
			`{"id":2,"domains":["d.example","e.example"],"origin_url":"https://169.254.169.254/latest/"}`,
			[]Origin{{RouteID: 2, Site: "d.example", URL: "https://169.254.169.254/latest/", Scheme: "https", Host: "169.254.169.254", Upstream: "backend_d_example_2"}},
		},
		{
			"Pages with its API proxy off",
			`{"id":3,"site_name":"p","domains":["p.example"],"upstream_type":"pages","pages_deployment":{"project_id":1,"api_proxy_enabled":false,"api_proxy_path":"/api","api_proxy_pass":"http://169.254.169.254"}}`,
			[]Origin{},
		},
	}
	for _, tt := range tests {
		out, err := Config(minimalSource(tt.route, ""), nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !slices.Equal(out.Origins, tt.want) {
			t.Errorf("%s: Origins\n%+v\nwant\n%+v", tt.name, out.Origins, tt.want)
		}
	}
}
