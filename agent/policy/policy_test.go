package policy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"openflare/agent/protocol"
	"openflare/testing/testsupport"
)

// renderedFixtures calls f with each version the real server rendered
// (../shared/fixtures/render; render-error fixtures skipped): its
// directory name, main and route config, and its E4 reply.
func renderedFixtures(t *testing.T, f func(name, main, route string, ac protocol.ActiveConfig)) {
	t.Helper()
	root := testsupport.SharedDir(t, "fixtures/render")
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		main, err1 := os.ReadFile(filepath.Join(dir, "main.conf"))
		route, err2 := os.ReadFile(filepath.Join(dir, "routes.conf"))
		if err1 != nil || err2 != nil {
			continue // a render-error fixture
		}
		var ac protocol.ActiveConfig
		if err := json.Unmarshal([]byte(testsupport.ReadFile(t, filepath.Join(dir, "e4.json"))), &ac); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		n++
		f(e.Name(), string(main), string(route), ac)
	}
	if n == 0 {
		t.Fatal("no rendered fixture found")
	}
}

// Every config the real server rendered (and nginx accepts) passes
// unchanged: no false refusals.
func TestFixturesPass(t *testing.T) {
	renderedFixtures(t, func(name, main, route string, _ protocol.ActiveConfig) {
		if err := (Policy{}).Check(Policy{}.Confine(main), route); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
}

const base = "user openflare;\nworker_processes auto;\npid __OPENFLARE_PID_PATH__;\nevents { worker_connections 1024; }\nhttp {\n    include mime.types;\n    map $http_upgrade $connection_upgrade { default upgrade; '' \"\"; }\n%s\n    include __OPENFLARE_ROUTE_CONFIG__;\n}\n"

func withHTTP(line string) string { return strings.Replace(base, "%s", line, 1) }

func TestRefusals(t *testing.T) {
	cases := []struct {
		main, route, want string
	}{
		{withHTTP(`    init_by_lua_block { io.popen("id") }`), "", "init_by_lua_block: runs Lua code"},
		{withHTTP(`    access_by_lua 'os.execute("x")';`), "", "access_by_lua: runs Lua code"},
		{withHTTP(`    content_by_lua_file /tmp/evil.lua;`), "", "not one of the agent's"},
		{withHTTP(`    log_by_lua_file __OPENFLARE_LUA_DIR__/../../../tmp/x.lua;`), "", "not one of the agent's"},
		{withHTTP(`    lua_package_path "/tmp/?.lua;;";`), "", "lua_package_path: sets where Lua code"},
		{withHTTP(`    lua_ssl_trusted_certificate /etc/shadow;`), "", "configures the Lua module"},
		{withHTTP(`    include /root/secret;`), "", "include: /root/secret is outside"},
		{withHTTP(`    include ../../etc/passwd;`), "", "climbs out"},
		{withHTTP(`    error_log /anywhere/x.log;`), "", "error_log: /anywhere/x.log is outside"},
		{withHTTP(`    access_log /tmp/$host.log;`), "", "built from variables"},
		{withHTTP(`    proxy_cache_path /etc/../x levels=1:2 keys_zone=c:10m;`), "", "climbs out"},
		{withHTTP(`    perl_modules /tmp;`), "", "perl_modules: runs code"},
		{withHTTP(`    js_import /tmp/x.js;`), "", "js_import: runs code"},
		{withHTTP(`    server { listen 81; location / { proxy_pass http://unix:/var/run/docker.sock:/; } }`), "", "local socket"},
		{withHTTP(`    server { listen 81; root /etc; }`), "", "root: /etc is outside"},
		{"load_module /tmp/x.so;\n" + withHTTP(""), "", "load_module: loads a module"},
		{"env LD_PRELOAD=/tmp/x.so;\n" + withHTTP(""), "", "env: sets the environment"},
		{strings.Replace(withHTTP(""), "user openflare;", "user root;", 1), "", "user: asks for root workers"},
		{strings.Replace(withHTTP(""), "pid __OPENFLARE_PID_PATH__;", "pid /run/x.pid;", 1), "", "pid: /run/x.pid is outside"},
		{withHTTP(""), "server {\n    root \"/etc\";\n}\n", "route config line 2: root: /etc is outside"},
		{withHTTP(""), "server {\n    root \"__OPENFLARE_PAGES_DIR__/../../etc\";\n}\n", "climbs out"},
		{withHTTP(`    server {`), "", "unexpected end of file"},
		// Bypass attempts: the policy must read the text as nginx does.
		{withHTTP("    add_header X a\\ 'b;\n    init_by_lua_block { os.execute('id') }\n    add_header Y a\\ ';"), "", "backslash outside quotes escapes ' '"},
		// Issue 20 B1: an escaped '$' does not make the '{' part of the
		// word: nginx opens the location's block and runs the Lua.
		{withHTTP("    server { listen 81; location /x\\${ content_by_lua_block { os.execute('id') } } }"), "", "backslash outside quotes escapes '$'"},
		{withHTTP("    server { listen 81; location '/x\\$'{ content_by_lua_block { os.execute('id') } } }"), "", "content_by_lua_block: runs Lua code"},
		{withHTTP("    add_header X \"a\\\"b\";\n    init_by_lua_block { os.execute('id') }"), "", "init_by_lua_block: runs Lua code"},
		{withHTTP("    add_header X a#b;\n    init_by_lua_block { os.execute('id') }"), "", "init_by_lua_block: runs Lua code"},
		{withHTTP("    add_header X 'a'#b;"), "", "after a quoted word"},
		{withHTTP("    add_header X a\x00b;"), "", "control character"},
		{withHTTP("    server { listen 81; error_log __OPENFLARE_ERROR_LOG__; }"), "", "only the main context may name the master's log"},
		{withHTTP("    error_log stderr;"), "", "only the main context"},
		{withHTTP(`    init_worker_by_lua_file __OPENFLARE_LUA_DIR__/observability/init.lua")os.execute("id")dofile("/dev/null;`), "", "not one of the agent's"},
		{withHTTP(`    include __OPENFLARE_CERT_DIR__/evil.conf;`), "", "not where include may point"},
		{withHTTP(`    include conf.d/*.conf;`), "", "patterns"},
		{withHTTP(`    access_log __OPENFLARE_LUA_DIR__/waf/check.lua;`), "", "not where access_log may point"},
		{withHTTP(`    server { listen 81; set $u ".."; root __OPENFLARE_PAGES_DIR__/$u/$u/etc; }`), "", "variables"},
		{withHTTP(`    server { listen 81; location / { proxy_pass HTTP://UNIX:/var/run/docker.sock:/; } }`), "", "local socket"},
		{withHTTP(`    server { listen UNIX:/tmp/x.sock; }`), "", "local socket"},
		{withHTTP(`    add_header X "a"b;`), "", "after a quoted word"},
		{withHTTP(""), "server {\n    root \"__OPENFLARE_CERT_DIR__/a b/../../../..\";\n}\n", "root"},
	}
	for _, tc := range cases {
		err := (Policy{}).Check(tc.main, tc.route)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want %q, got %v\n%s%s", tc.want, err, tc.main, tc.route)
		}
	}
}

func TestAllowedAndTrusted(t *testing.T) {
	ok := []string{
		withHTTP(`    access_log __OPENFLARE_ACCESS_LOG__ openflare_json;`),
		withHTTP(`    proxy_cache_path /var/cache/openresty/openflare levels=1:2 keys_zone=c:10m;`),
		withHTTP(`    lua_shared_dict openflare_waf_config 1m;`),
		withHTTP(`    init_worker_by_lua_file __OPENFLARE_LUA_DIR__/observability/init.lua;`),
		withHTTP(`    ssl_certificate data:$cert;`),
		withHTTP(`    log_format j escape=json '{"a":"$host"}';`),
	}
	for _, m := range ok {
		if err := (Policy{}).Check(Policy{}.Confine(m), ""); err != nil {
			t.Errorf("refused: %v\n%s", err, m)
		}
	}
	outside := withHTTP(`    error_log /srv/logs/x.log;`)
	if err := (Policy{Allowed: []string{"/srv/logs"}}).Check(outside, ""); err != nil {
		t.Errorf("allowed_paths not honoured: %v", err)
	}
	if err := (Policy{Allowed: []string{"/srv/log"}}).Check(outside, ""); err == nil {
		t.Error("a sibling of an allowed path passed")
	}
	evil := withHTTP(`    init_by_lua_block { io.popen("id") }`)
	if err := (Policy{Trusted: true}).Check(evil, ""); err != nil {
		t.Errorf("trusted policy refused: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(withHTTP(`    log_format j '{"a":"$host"}';`))
	f.Add("a 'b\\'c' \"d\" { e; } # f\n")
	f.Fuzz(func(t *testing.T, text string) {
		dirs, err := parse(text)
		if err == nil && len(dirs) > maxDirectives {
			t.Fatal("too many directives accepted")
		}
		(Policy{}).Check(text, text)
	})
}

// A cache directory outside the tree moves inside it; one the owner
// allows, or a trusted policy, keeps its place.
func TestConfineCachePath(t *testing.T) {
	in := withHTTP("    proxy_cache_path /etc levels=1:2 keys_zone=c:10m;")
	got := Policy{}.Confine(in)
	if !strings.Contains(got, "proxy_cache_path __OPENFLARE_PROXY_CACHE_PATH__-") || strings.Contains(got, "/etc") {
		t.Fatalf("not confined:\n%s", got)
	}
	if err := (Policy{}).Check(got, ""); err != nil {
		t.Fatal(err)
	}
	if got := (Policy{Allowed: []string{"/etc"}}).Confine(in); got != in {
		t.Fatalf("allowed path moved:\n%s", got)
	}
	if got := (Policy{Trusted: true}).Confine(in); got != in {
		t.Fatal("trusted policy moved the cache")
	}
	placeholder := withHTTP("    proxy_cache_path __OPENFLARE_PROXY_CACHE_PATH__ levels=1:2 keys_zone=c:10m;")
	if got := (Policy{}).Confine(placeholder); got != placeholder {
		t.Fatal("the agent's own cache path moved")
	}
}

// Adapting the text (the user line rewritten, HTTP/3 lines dropped) must
// not turn a quoted string into directives: the adapted text is checked
// too, with only the agent's own module lines and user line let through.
func TestCheckAdapted(t *testing.T) {
	evil := "user nobody ';\ninit_by_lua_block { os.execute(\"id\") }\nadd_header Y a';\n" + withHTTP("")
	if err := (Policy{}).Check(evil, ""); err != nil {
		t.Fatalf("the rendered text itself reads as one user directive: %v", err)
	}
	adapted := strings.Replace(evil, "user nobody ';", "user www-data www-data;", 1)
	if err := (Policy{}).CheckAdapted(adapted, []string{"/m/ngx_http_lua_module.so"}); err == nil || !strings.Contains(err.Error(), "init_by_lua_block") {
		t.Fatalf("adapted: %v", err)
	}
	ok := "load_module /m/ngx_http_lua_module.so;\nuser root root;\n" + withHTTP("")
	if err := (Policy{}).CheckAdapted(ok, []string{"/m/ngx_http_lua_module.so"}); err != nil {
		t.Fatalf("the agent's own lines refused: %v", err)
	}
	if err := (Policy{}).CheckAdapted("load_module /tmp/evil.so;\n"+withHTTP(""), []string{"/m/ngx_http_lua_module.so"}); err == nil {
		t.Fatal("a module the agent did not add passed")
	}
}
