package render

import (
	"encoding/json"
	"strings"
	"testing"

	"openflare/agent/protocol"
)

// configSource is a one-route source whose openresty_config is the server's
// defaults plus overrides (a JSON object's members, without braces).
func configSource(overrides string) string {
	cfg := `{"worker_processes":"auto","websocket_enabled":true`
	if overrides != "" {
		cfg += "," + overrides
	}
	return minimalSource(`{"id":1,"site_name":"s","domains":["s.example.org"],"origin_url":"http://10.0.0.1:8080"}`, cfg+"}")
}

func TestValidateConfigAccepts(t *testing.T) {
	for _, overrides := range []string{
		"",
		// Fixture 03 and 13 forms.
		`"worker_processes":"2","worker_connections":1024,"events_use":"","default_server_return_status":444,"resolvers":"1.1.1.1 8.8.8.8"`,
		`"cache_enabled":true,"cache_path":"/data/openflare/cache","cache_levels":"1:2:2","cache_inactive":"10m","cache_max_size":"512m","cache_key_template":"$host$uri$is_args$args","cache_lock_timeout":"3s","cache_use_stale":"error timeout"`,
		`"cache_enabled":true,"cache_path":"__OPENFLARE_PROXY_CACHE_PATH__"`,
		// Edge values nginx takes.
		`"worker_processes":" 16 ","keepalive_timeout":0,"keepalive_requests":0,"gzip_min_length":0,"gzip_comp_level":9,"client_max_body_size":"0"`,
		`"client_max_body_size":"8589934591G","large_client_header_buffers":"2\t512","proxy_buffers":"2 16k","proxy_buffer_size":"16k","proxy_busy_buffers_size":"16k"`,
		`"proxy_connect_timeout":9223372036854775,"default_server_return_status":999,"events_use":" epoll "`,
		`"resolvers":"127.0.0.1:53 [::1] [2001:db8::1]:5353 localhost valid=1h30m ipv6=off"`,
		`"cache_enabled":true,"cache_levels":"2","cache_inactive":"1M","cache_max_size":"0","cache_key_template":"${scheme}://$HOST$uri $http_x_a $cookie_b","cache_lock_timeout":"500ms","cache_use_stale":"off"`,
		// Values the template does not write are not checked.
		`"main_config_template":"workers {{OpenRestyWorkerProcesses}};\n","worker_connections":0,"client_max_body_size":"lots","gzip_comp_level":0`,
		`"cache_enabled":false,"cache_levels":"9:9","cache_key_template":"$nope"`,
	} {
		if _, err := Config(configSource(overrides), nil); err != nil {
			t.Errorf("overrides %s: %v", overrides, err)
		}
	}
}

func TestValidateConfigErrors(t *testing.T) {
	tests := []struct{ overrides, want string }{
		{`"client_max_body_size":"lots"`, `openresty_config.client_max_body_size: invalid size "lots"`},
		{`"client_max_body_size":"8589934592G"`, `openresty_config.client_max_body_size: invalid size "8589934592G"`},
		{`"client_max_body_size":"64m;"`, `invalid size "64m;"`},
		{`"worker_processes":"auto;user root"`, `openresty_config.worker_processes: want "auto" or a positive integer, got "auto;user root"`},
		{`"worker_processes":"0"`, `openresty_config.worker_processes:`},
		{`"worker_connections":4`, `openresty_config.worker_connections: want at least 8`},
		{`"worker_rlimit_nofile":0`, `openresty_config.worker_rlimit_nofile: want a positive integer, got 0`},
		{`"events_use":"poll"`, `openresty_config.events_use: unsupported event method "poll"`},
		{`"default_server_return_status":1000`, `openresty_config.default_server_return_status: want a status from 100 to 999`},
		{`"keepalive_timeout":-1`, `openresty_config.keepalive_timeout: want whole seconds from 0 to`},
		{`"send_timeout":0`, `openresty_config.send_timeout: want whole seconds from 1 to`},
		{`"proxy_read_timeout":9223372036854776`, `openresty_config.proxy_read_timeout:`},
		{`"keepalive_requests":-1`, `openresty_config.keepalive_requests:`},
		{`"gzip_comp_level":10`, `openresty_config.gzip_comp_level: want 1 to 9, got 10`},
		{`"gzip_min_length":-1`, `openresty_config.gzip_min_length:`},
		{`"large_client_header_buffers":"4 16k;"`, `openresty_config.large_client_header_buffers: want "<number> <size>"`},
		{`"large_client_header_buffers":"4 511"`, `below nginx's minimum of 512 bytes`},
		{`"large_client_header_buffers":"4 1g"`, `openresty_config.large_client_header_buffers:`},
		{`"proxy_buffers":"1 16k"`, `openresty_config.proxy_buffers: want at least 2 buffers, got "1 16k"`},
		{`"proxy_buffers":"9223372036854775807 16k"`, `openresty_config.proxy_buffers:`},
		{`"proxy_buffer_size":"1g"`, `openresty_config.proxy_buffer_size: invalid size "1g"`},
		{`"proxy_buffer_size":"2000m","proxy_busy_buffers_size":"2000m","proxy_buffers":"16 1000m"`, `must stay within 1g`},
		{`"proxy_busy_buffers_size":"4k"`, `openresty_config.proxy_busy_buffers_size: "4k" is below proxy_buffer_size`},
		{`"proxy_buffers":"2 16k","proxy_busy_buffers_size":"32k"`, `exceeds proxy_buffers "2 16k" minus one buffer`},
		{`"resolvers":"1.1.1.1; user root"`, `openresty_config.resolvers: "1.1.1.1;" is neither an address`},
		{`"resolvers":"::1"`, `openresty_config.resolvers: "::1" is neither`},
		{`"resolvers":"valid=30s"`, `openresty_config.resolvers: no address in "valid=30s"`},
		{`"resolvers":"1.1.1.1 valid=5S"`, `openresty_config.resolvers: invalid time in "valid=5S"`},
		{`"resolvers":"1.1.1.1 ipv4=off"`, `openresty_config.resolvers: "ipv4=off"`},
		{`"cache_enabled":true,"cache_path":"relative/cache"`, `openresty_config.cache_path: want an absolute path`},
		{`"cache_enabled":true,"cache_path":"/srv/a b"`, `openresty_config.cache_path: "/srv/a b" contains whitespace`},
		{`"cache_enabled":true,"cache_path":"/srv/../etc"`, `openresty_config.cache_path: "/srv/../etc" has a . or .. segment`},
		{`"cache_enabled":true,"cache_levels":"10:20"`, `openresty_config.cache_levels:`},
		{`"cache_enabled":true,"cache_levels":"1:2:2:2"`, `openresty_config.cache_levels:`},
		{`"cache_enabled":true,"cache_inactive":"500ms"`, `openresty_config.cache_inactive: invalid time "500ms"`},
		{`"cache_enabled":true,"cache_inactive":"5S"`, `openresty_config.cache_inactive: invalid time "5S"`},
		{`"cache_enabled":true,"cache_max_size":" 1g"`, `openresty_config.cache_max_size: invalid size " 1g"`},
		{`"cache_enabled":true,"cache_key_template":" "`, `openresty_config.cache_key_template: is empty`},
		{`"cache_enabled":true,"cache_key_template":"$host$nope"`, `openresty_config.cache_key_template: "$host$nope" uses $nope, which nginx does not define`},
		{`"cache_enabled":true,"cache_key_template":"a\nb"`, `contains a control character`},
		{`"cache_enabled":true,"cache_lock_timeout":"1y"`, `openresty_config.cache_lock_timeout: invalid time "1y"`},
		{`"cache_enabled":true,"cache_use_stale":"error http_401"`, `openresty_config.cache_use_stale: unknown value "http_401"`},
		{`"cache_enabled":true,"cache_use_stale":" "`, `openresty_config.cache_use_stale: is empty`},
	}
	for _, tt := range tests {
		_, err := Config(configSource(tt.overrides), nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("overrides %s: err = %v, want %q", tt.overrides, err, tt.want)
		}
	}
}

// routeSource is a one-route source around route members (without braces)
// added to a valid proxy route; later members win in Go's decoder.
func routeSource(members, config string) string {
	if members != "" {
		members = "," + members
	}
	return minimalSource(`{"id":1,"site_name":"s","domains":["s.example.org"],"origin_url":"http://10.0.0.1:8080"`+members+`}`, config)
}

func TestValidateRouteAccepts(t *testing.T) {
	tests := []struct{ members, config string }{
		{`"domains":["*.example.org",".example.net","www.example.*","café.example","[::1]","UPPER_case-1.example"]`, ""},
		{`"domains":["` + strings.Repeat("a", 42) + `.com"]`, ""},
		{`"domains":["*.` + strings.Repeat("a", 46) + `.com"]`, ""},
		{`"domains":["` + strings.Repeat("a", 60) + `.com"]`, `{"main_config_template":"server_names_hash_bucket_size 128; {{OpenRestyWorkerProcesses}}"}`},
		{`"origin_url":"https://[::1]:8443/a%20b/?q=1&x=%2F","origin_host":"app.example.org:8443"`, ""},
		{`"upstreams":["http://10.0.0.1:8080/app?v=1","https://10.0.0.2/app?v=1"]`, ""},
		{`"custom_headers":[{"key":"X-Vars","value":"$host;$remote_addr {braces} #hash ${uri}x $1"},{"key":" ","value":"$nope"},{"key":"X!#$%&'*+-.^_|~","value":"\t"}]`, ""},
		{`"limit_conn_per_server":65535,"limit_rate":"2048","limit_req_per_ip":"7R/M"`, ""},
		{`"limit_rate":"-1","limit_req_per_ip":"0"`, `{"default_limit_rate":"1g","default_limit_req_per_ip":"-1"}`},
		{"", `{"origin_error_page_enabled":true,"origin_error_page_get_only":true,"origin_error_page_status_codes":["499"]}`},
		{`"cache_enabled":true,"cache_policy":"path_exact","cache_rules":["/a\"b","\\","$x","{}"]`, `{"cache_enabled":true}`},
		{`"basic_auth_enabled":true,"basic_auth_username":"` + strings.Repeat("u", 2000) + `","basic_auth_password":"p"`, ""},
	}
	for _, tt := range tests {
		if _, err := Config(routeSource(tt.members, tt.config), nil); err != nil {
			t.Errorf("%s: %v", tt.members, err)
		}
	}
}

func TestValidateRouteErrors(t *testing.T) {
	tests := []struct{ members, config, want string }{
		{`"domains":["~^(a"]`, "", `route s domains[0]: "~^(a" contains '~'`},
		{`"domains":["ok.example","#x"]`, "", `route s domains[1]: "#x" contains '#'`},
		{`"domains":["*"]`, "", `route s domains[0]: "*" contains '*'`},
		{`"domains":["a..b"]`, "", `has an empty label`},
		{`"domains":["` + strings.Repeat("a", 43) + `.com"]`, "", `is 47 bytes long; nginx's default server_names_hash_bucket_size holds names up to 46`},
		{`"domains":[".` + strings.Repeat("a", 47) + `.com"]`, "", `has a 47-byte label`},
		{`"site_name":"a$b"`, "", `route a$b site_name: "a$b" contains $`},
		{`"site_name":"a\u0000b"`, "", `site_name: "a\x00b" contains a control character`},
		{`"origin_url":"10.0.0.1:8080"`, "", `route s origin_url: "10.0.0.1:8080" is not an http:// or https:// URL`},
		{`"origin_url":"http://10.0.0.1/a;b"`, "", `route s origin_url: "http://10.0.0.1/a;b" contains ";"`},
		{`"origin_url":"http://10.0.0.1/$host"`, "", `contains $, which nginx would read as a variable`},
		{`"origin_url":"http://u:p@10.0.0.1"`, "", `carries user info`},
		{`"origin_url":"http://10.0.0.1:0"`, "", `has an invalid port`},
		{`"origin_url":"http://[fe80::1%25lo]:80"`, "", `has an invalid IPv6 address`},
		{`"origin_url":"http://10.0.0.1/#top"`, "", `has a fragment`},
		{`"upstreams":["http://10.0.0.1","ftp://10.0.0.2"]`, "", `route s upstreams[1]: "ftp://10.0.0.2" is not an http:// or https:// URL`},
		{`"origin_url":"http://10.0.0.1/` + strings.Repeat("ä", 1000) + `"`, "", `route s origin_url: the proxy_pass target is 6019 bytes long`},
		{`"origin_url":"http://10.0.0.1/` + strings.Repeat("a", 4000) + `"`, "", `is 4016 bytes long; nginx reads at most 4000 per parameter`},
		{`"origin_host":"a\r\nX-Injected: 1"`, "", `route s origin_host:`},
		{`"origin_host":"h:65536"`, "", `route s origin_host: "h:65536" has an invalid port`},
		{`"custom_headers":[{"key":"X Y","value":"v"}]`, "", `route s custom_headers[0].key: "X Y" is not an HTTP header name`},
		{`"custom_headers":[{"key":"#x","value":"v"}]`, "", `starts with a character nginx reads as a comment or a quote`},
		{`"custom_headers":[{"key":"X","value":"a\nb"}]`, "", `route s custom_headers[0].value: "a\nb" contains a control character`},
		{`"custom_headers":[{"key":"X","value":"$nope"}]`, "", `uses $nope, which nginx does not define`},
		{`"custom_headers":[{"key":"X","value":"price: 5$"}]`, "", `ends with a lone $`},
		{`"custom_headers":[{"key":"X","value":"${host"}]`, "", `has ${ without its closing }`},
		{`"custom_headers":[{"key":"X","value":"$ x"}]`, "", `has a $ not followed by a variable name`},
		{`"custom_headers":[{"key":"X","value":"` + strings.Repeat("v", maxParam) + `"}]`, "", `nginx reads at most 4000 per parameter`},
		{`"limit_conn_per_ip":65536`, "", `route s limit_conn_per_ip: want at most 65535 connections, got 65536`},
		{`"limit_rate":"1g"`, "", `route s limit_rate: "1g" is not a size`},
		{`"limit_req_per_ip":"10r/h"`, "", `route s limit_req_per_ip: "10r/h" is not a rate like 10r/s or 30r/m`},
		{`"limit_req_per_ip":"0r/s"`, "", `route s limit_req_per_ip: "0r/s" needs 1 to`},
		{``, `{"default_limit_conn_per_server":70000}`, `route s inherits openresty_config.default_limit_conn_per_server: want at most 65535`},
		{``, `{"default_limit_rate":"fast"}`, `route s inherits openresty_config.default_limit_rate: "fast" is not a size`},
		{`"cache_enabled":true,"cache_policy":"suffix","cache_rules":["a\u0000"]`, `{"cache_enabled":true}`, `route s cache_rules[0]: "a\x00" contains a control character`},
		{`"cache_enabled":true,"cache_policy":"path_exact","cache_rules":[` + strings.TrimSuffix(strings.Repeat(`"/abcdefghij",`, 400), ",") + `]`, `{"cache_enabled":true}`, `route s cache_rules: the 400 rules make a`},
		{`"basic_auth_enabled":true,"basic_auth_username":"` + strings.Repeat("u", 3000) + `","basic_auth_password":"p"`, "", `route s basic_auth_password: user name and password are too long`},
		{``, `{"origin_error_page_enabled":true,"origin_error_page_status_codes":["400-599"]}`, `route s inherits openresty_config.origin_error_page_status_codes: ["400-599"] include 499, which nginx's error_page refuses`},
	}
	for _, tt := range tests {
		_, err := Config(routeSource(tt.members, tt.config), nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %s: err = %v, want %q", tt.members, tt.config, err, tt.want)
		}
	}
}

// pagesSource is a one-route Pages source with deployment members.
func pagesSource(deployment string) string {
	return minimalSource(`{"id":1,"site_name":"p","domains":["p.example.org"],"upstream_type":"pages","pages_deployment":{"project_id":1`+deployment+`}}`, "")
}

func TestValidatePages(t *testing.T) {
	for _, ok := range []string{
		`,"entry_file":"sub/main.html","local_root":"__OPENFLARE_PAGES_DIR__/projects/1/current/dist"`,
		`,"spa_fallback_enabled":true,"spa_fallback_path":"/spa/../evil.html"`,
		`,"api_proxy_enabled":true,"api_proxy_path":"api","api_proxy_pass":"https://10.0.0.9:8443/","api_proxy_rewrite":"/"`,
		`,"api_proxy_enabled":true,"api_proxy_path":"/a b","api_proxy_pass":""`, // no API location at all
	} {
		if _, err := Config(pagesSource(ok), nil); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	tests := []struct{ deployment, want string }{
		{`,"local_root":"/srv/$site"`, `route p pages_deployment.local_root: "/srv/$site" contains $`},
		{`,"entry_file":"../../etc/passwd"`, `route p pages_deployment.entry_file: "../../etc/passwd" leaves the site root`},
		{`,"entry_file":"a b.html"`, `route p pages_deployment.entry_file: "a b.html" contains whitespace`},
		{`,"entry_file":"a{b}.html"`, `contains "{"`},
		{`,"spa_fallback_enabled":true,"spa_fallback_path":"/a{b}.html"`, `route p pages_deployment.spa_fallback_path: "/a{b}.html" becomes "/a{b}.html", which contains "{"`},
		{`,"spa_fallback_enabled":true,"spa_fallback_path":"/$x"`, `which contains $`},
		{`,"api_proxy_enabled":true,"api_proxy_path":"/a b","api_proxy_pass":"http://10.0.0.9"`, `route p pages_deployment.api_proxy_path: "/a b" contains whitespace`},
		{`,"api_proxy_enabled":true,"api_proxy_path":"/api","api_proxy_pass":"10.0.0.9:80"`, `route p pages_deployment.api_proxy_pass: "10.0.0.9:80" is not an http:// or https:// URL`},
		{`,"api_proxy_enabled":true,"api_proxy_path":"/api","api_proxy_pass":"http://10.0.0.9","api_proxy_rewrite":"/$1"`, `route p pages_deployment.api_proxy_rewrite: "/$1" contains $`},
	}
	for _, tt := range tests {
		_, err := Config(pagesSource(tt.deployment), nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.deployment, err, tt.want)
		}
	}
}

func TestValidateUpstreamNames(t *testing.T) {
	src := `{"routes":[{"id":1,"site_name":"A b","domains":["a.example"],"origin_url":"http://10.0.0.1"},` +
		`{"id":1,"site_name":"a-b","domains":["b.example"],"origin_url":"http://10.0.0.2"}],"openresty_config":{},"waf":{}}`
	_, err := Config(src, nil)
	if err == nil || err.Error() != "route A b and route a-b both declare upstream backend_a_b_1 (same sanitised site name and id)" {
		t.Errorf("err = %v", err)
	}
	// A route that passes origin_url verbatim declares no block, so the
	// name is free for the third route.
	src = `{"routes":[{"id":1,"site_name":"a","domains":["a.example"],"origin_url":"http://10.0.0.1","upstreams":["http://10.0.0.1","https://10.0.0.2"]},` +
		`{"id":1,"site_name":"a","domains":["b.example"],"origin_url":"http://10.0.0.2"}],"openresty_config":{},"waf":{}}`
	if _, err := Config(src, nil); err != nil {
		t.Errorf("verbatim route and named route: %v", err)
	}
	src = `{"routes":[{"id":1,"site_name":"a","domains":["a.example"],"origin_url":"http://10.0.0.1","upstreams":["http://10.0.0.1","https://10.0.0.2"]},` +
		`{"id":1,"site_name":"a","domains":["b.example"],"origin_url":"http://10.0.0.2"},{"id":1,"site_name":"A","domains":["c.example"],"origin_url":"http://10.0.0.3"}]}`
	if _, err := Config(src, nil); err == nil || !strings.Contains(err.Error(), "route a and route A both declare upstream backend_a_1") {
		t.Errorf("err = %v", err)
	}
}

// TestAbsentConfigDefaults: keys the server always sends read as its
// defaults when missing or null; booleans and omitempty keys stay empty.
func TestAbsentConfigDefaults(t *testing.T) {
	route := `{"id":1,"site_name":"s","domains":["s.example.org"],"origin_url":"http://10.0.0.1"}`
	for _, src := range []string{
		minimalSource(route, `{}`),
		minimalSource(route, `{"worker_connections":null,"client_max_body_size":null}`),
		`{"routes":[` + route + `]}`,
	} {
		out, err := Config(src, nil)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if !containsAll(out.Main, "worker_processes auto;", "worker_connections 4096;", "client_max_body_size 64m;",
			"large_client_header_buffers 4 16k;", "proxy_buffers 16 16k;", "gzip off;", "return 421;") {
			t.Errorf("%s: main config lacks the defaults:\n%s", src, out.Main)
		}
		if containsAny(out.Main, "use epoll", "multi_accept", "resolver", "proxy_cache_path") {
			t.Errorf("%s: an omitted key or false boolean was filled in:\n%s", src, out.Main)
		}
	}
	if _, err := Config(minimalSource(route, `{"worker_connections":0}`), nil); err == nil {
		t.Errorf("an explicit 0 was replaced by the default instead of being refused")
	}
}

// TestValidationKeepsFixtureErrors: route errors the renderer reported
// before validation existed still win, so fixture agent errors stay exact.
func TestValidationKeepsFixtureErrors(t *testing.T) {
	src := minimalSource(`{"id":4,"site_name":"s","origin_url":"ftp://x"}`, `{"worker_processes":"auto"}`)
	if _, err := Config(src, nil); err == nil || err.Error() != "route s domains are invalid" {
		t.Errorf("err = %v", err)
	}
	https := minimalSource(`{"site_name":"s","domains":["a.example.org"],"enable_https":true,"origin_url":"ftp://x"}`, "")
	if _, err := Config(https, []protocol.SupportFile{}); err == nil || err.Error() != "路由 s 未配置证书" {
		t.Errorf("err = %v", err)
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in     string
		offset bool
		want   int64
		ok     bool
	}{
		{"0", false, 0, true}, {"2048", false, 2048, true}, {"16k", false, 16 << 10, true}, {"8K", false, 8 << 10, true},
		{"64m", false, 64 << 20, true}, {"1M", false, 1 << 20, true}, {"1g", false, 0, false}, {"1g", true, 1 << 30, true},
		{"8589934591G", true, 8589934591 << 30, true}, {"8589934592G", true, 0, false}, {"9007199254740991k", false, 9007199254740991 << 10, true},
		{"9007199254740992k", false, 0, false}, {"", false, 0, false}, {"k", false, 0, false}, {"-1", false, 0, false},
		{"+1", false, 0, false}, {"1.5m", false, 0, false}, {"1t", true, 0, false}, {" 1k", false, 0, false}, {"1kb", false, 0, false},
	}
	for _, tt := range tests {
		got, ok := parseSize(tt.in, tt.offset)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseSize(%q, %t) = %d, %t; want %d, %t", tt.in, tt.offset, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseTime(t *testing.T) {
	tests := []struct {
		in      string
		seconds bool
		want    int64
		ok      bool
	}{
		{"30m", true, 1800, true}, {"5s", false, 5000, true}, {"3", false, 3000, true}, {"3", true, 3, true},
		{"500ms", false, 500, true}, {"500ms", true, 0, false}, {"1h30m", true, 5400, true}, {"1d", true, 86400, true},
		{"1w", false, 604800000, true}, {"1M", true, 2592000, true}, {"1M", false, 0, false}, {"1y", true, 31536000, true},
		{"1y", false, 0, false}, {"5S", true, 0, false}, {"30m1h", true, 0, false}, {"1m1m", true, 0, false},
		{"", true, 0, false}, {"s", true, 0, false}, {"5 s", true, 0, false}, {"1s500ms", false, 1500, true},
		{"1ms1", false, 0, false}, {"9223372036854775s", false, 9223372036854775000, true}, {"9223372036854776s", false, 0, false},
		{"9223372036854775807s", true, 9223372036854775807, true}, {"9223372036854775808", true, 0, false},
	}
	for _, tt := range tests {
		got, ok := parseTime(tt.in, tt.seconds)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseTime(%q, %t) = %d, %t; want %d, %t", tt.in, tt.seconds, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCheckVariables(t *testing.T) {
	for _, ok := range []string{"", "plain", "$host", "${host}x", "$HTTP_X_Req", "$1", "a$9b", "$arg_q$cookie_c", "$upstream_http_x", "{$host}", `\$host`} {
		if err := checkVariables(ok); err != nil {
			t.Errorf("checkVariables(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"$", "a$", "$0", "$ x", "${}", "${host", "${1}", "$nope", "$openflare_waf_site", "$$"} {
		if err := checkVariables(bad); err == nil {
			t.Errorf("checkVariables(%q) accepted", bad)
		}
	}
}

func TestServerNameProblem(t *testing.T) {
	stock := &restyConfig{}
	for _, ok := range []string{"a.example", "*.a.example", ".a.example", "www.a.*", "localhost", "1.2.3.4", "[2001:db8::1]", "bücher.example", "_dmarc.example"} {
		if p := serverNameProblem(ok, stock); p != "" {
			t.Errorf("serverNameProblem(%q) = %s", ok, p)
		}
	}
	for _, bad := range []string{"*", ".", "*.*.com", "a.*.com", "**.a.com", "~a", "#a", "a#b", "$a", "a/b", "a:80", "[::1", "[x]", "a..b", "a.", "a b", "a\u00a0b"} {
		if p := serverNameProblem(bad, stock); p == "" {
			t.Errorf("serverNameProblem(%q) accepted", bad)
		}
	}
}

// TestFixtureFormsValidate: the forms the fixtures and the server's
// defaults use pass the checks one by one (the golden test covers them
// through Render as well).
func TestFixtureFormsValidate(t *testing.T) {
	for _, c := range loadFixtures(t) {
		var s snapshot
		if err := json.Unmarshal([]byte(c.e4.SourceConfigJSON), &s); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := validateConfig(&s.Config); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		rd := &renderer{cfg: &s.Config}
		for i := range s.Routes {
			if len(s.Routes[i].Domains) == 0 {
				continue // case 25: the renderer's own domain check fails first
			}
			if err := rd.validateRoute(&s.Routes[i]); err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		}
	}
}
