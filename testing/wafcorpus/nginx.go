package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"openflare/agent/landing"
	"openflare/agent/luaassets"
	"openflare/testing/benchkit"
	"openflare/testing/nginxtest"
)

// The addresses of the servers. Ours, its per-flag twin and the no-WAF
// baseline share one nginx, ModSecurity has its own; every 127.x address
// is loopback.
const (
	oursAddr  = "127.0.0.1:80"
	flagsAddr = "127.0.0.1:8081"
	noneAddr  = "127.0.0.1:8080"
	crsAddr   = "127.0.0.2:80"
)

// What ModSecurity reads, all from Debian's packages:
// libnginx-mod-http-modsecurity (the nginx connector, with the copy of
// ModSecurity's modsecurity.conf-recommended that the connector's
// package ships) and modsecurity-crs.
const (
	modsecModule      = "/usr/lib/nginx/modules/ngx_http_modsecurity_module.so"
	modsecRecommended = "/usr/share/nginx/docs/modsecurity/modsecurity.conf"
	crsSetup          = "/etc/modsecurity/crs/crs-setup.conf"
	crsRuleFiles      = "/usr/share/modsecurity-crs/rules/*.conf"
)

// crsExclusions are the local exclusion files Debian's owasp-crs.load
// includes before and after the rules, when they exist (they hold only
// comments as shipped).
var crsExclusions = [2]string{"/etc/modsecurity/crs/REQUEST-900-EXCLUSION-RULES-BEFORE-CRS.conf", "/etc/modsecurity/crs/RESPONSE-999-EXCLUSION-RULES-AFTER-CRS.conf"}

// crsRules is the ModSecurity configuration: the recommended base
// configuration switched from DetectionOnly to blocking, its audit log
// and work files moved into the throw-away prefix, and the Core Rule Set
// loaded as Debian's owasp-crs.load does (which this ModSecurity cannot
// read itself: it has no IncludeOptional), at paranoia level 1 with the
// default anomaly thresholds, said outright rather than left to
// crs-setup.conf's commented-out defaults.
func crsRules(prefix string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `Include %[2]s
SecRuleEngine On
SecAuditLog %[1]s/modsec_audit.log
SecTmpDir %[1]s/modsec-tmp
SecDataDir %[1]s/modsec-data
SecAction "id:900000,phase:1,nolog,pass,t:none,setvar:tx.paranoia_level=1"
SecAction "id:900110,phase:1,nolog,pass,t:none,setvar:tx.inbound_anomaly_score_threshold=5,setvar:tx.outbound_anomaly_score_threshold=4"
Include %[3]s
`, prefix, modsecRecommended, crsSetup)
	include := func(p string) {
		if _, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "Include %s\n", p)
		}
	}
	include(crsExclusions[0])
	fmt.Fprintf(&b, "Include %s\n", crsRuleFiles)
	include(crsExclusions[1])
	return b.String()
}

// crsMissing says what of ModSecurity and the Core Rule Set is not
// installed, or "".
func crsMissing() string {
	for _, p := range []string{modsecModule, modsecRecommended, crsSetup, filepath.Dir(crsRuleFiles)} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Sprintf("%s is missing: `make bench-deps` installs libnginx-mod-http-modsecurity and modsecurity-crs", p)
		}
	}
	return ""
}

// mainConf is nginxtest.Start's main configuration with the modules
// given, the origin as a kept-alive upstream (as testing/wafbench has it)
// and the error log at nginx's default level, where ModSecurity logs what
// it blocks, as on a production node: the two nginx differ only in their
// WAF.
func mainConf(dir, modules, origin, httpBody string) string {
	return fmt.Sprintf(`%suser root root;
worker_processes 2;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log error;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %[2]s/client_temp;
    proxy_temp_path %[2]s/proxy_temp;
    fastcgi_temp_path %[2]s/fastcgi_temp;
    uwsgi_temp_path %[2]s/uwsgi_temp;
    scgi_temp_path %[2]s/scgi_temp;
    upstream origin {
        server %[4]s;
        keepalive 64;
    }
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    keepalive_requests 100000000;
%[3]s
}
`, modules, dir, httpBody, origin)
}

// startOrigin serves every request with 200 "origin-ok". It is raw HTTP
// rather than net/http, whose server refuses some targets nginx passes
// (an invalid escape in the path): the origin must accept whatever a WAF
// lets through.
func startOrigin() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveOrigin(c)
		}
	}()
	return ln.Addr().String(), nil
}

const originBody = "origin-ok"

func serveOrigin(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		length, chunked := int64(0), false
		for first := true; ; first = false {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			l = strings.TrimRight(l, "\r\n")
			if l == "" && !first {
				break
			}
			k, v, _ := strings.Cut(l, ":")
			switch strings.ToLower(k) {
			case "content-length":
				length, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			case "transfer-encoding":
				chunked = true
			}
		}
		if chunked {
			// nginx sends what it buffered with a length; it never
			// chunks a request this corpus makes.
			return
		}
		if _, err := io.CopyN(io.Discard, br, length); err != nil {
			return
		}
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(originBody), originBody); err != nil {
			return
		}
	}
}

// startOurs lays out the agent's Lua tree and a waf_config.json as
// testing/wafbench does, binding the site to one rule group:
// start → security_check (all nine flags) → true: allow, false: block
// 403. The same nginx serves the no-WAF baseline and the flags site,
// whose graph checks the nine flags one node each, in security_check's
// own order, and names in its 403 the first that fires: the same
// verdicts, with the reason.
func startOurs(tb *benchkit.ProgramTB, origin string) (*nginxtest.Server, error) {
	root := tb.TempDir()
	luaDir, runtimeDir := filepath.Join(root, "lua"), filepath.Join(root, "runtime")
	paths := landing.Paths{RuntimeConfigDir: runtimeDir, CountryMMDB: filepath.Join(root, "country.mmdb"), CityMMDB: filepath.Join(root, "city.mmdb")}
	for _, f := range luaassets.Files(paths.LuaReplacer()) {
		p := filepath.Join(luaDir, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, f.Content, 0o644); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(runtimeDir, 0o755); err != nil {
		return nil, err
	}
	all := obj{}
	for _, f := range securityFlags {
		all[f] = true
	}
	oneNode := obj{
		"start": obj{"type": "start", "config": obj{}, "next": obj{"next": "n"}},
		"n":     obj{"type": "security_check", "config": all, "next": obj{"true": "allow", "false": "block"}},
		"allow": obj{"type": "allow", "config": obj{}},
		"block": obj{"type": "block", "config": obj{"status_code": 403, "response_body": "blocked"}},
	}
	perFlag := obj{"start": obj{"type": "start", "config": obj{}, "next": obj{"next": securityFlags[0]}}, "allow": obj{"type": "allow", "config": obj{}}}
	for i, f := range securityFlags {
		next := "allow"
		if i+1 < len(securityFlags) {
			next = securityFlags[i+1]
		}
		perFlag[f] = obj{"type": "security_check", "config": obj{f: true}, "next": obj{"true": next, "false": "block-" + f}}
		perFlag["block-"+f] = obj{"type": "block", "config": obj{"status_code": 403, "response_body": flagPrefix + f}}
	}
	doc, err := json.Marshal(obj{
		"rule_groups": []obj{
			{"id": 1, "name": "security_check, all flags", "enabled": true, "is_global": false, "graph": obj{"entry": "start", "nodes": oneNode}},
			{"id": 2, "name": "security_check, one node per flag", "enabled": true, "is_global": false, "graph": obj{"entry": "start", "nodes": perFlag}},
		},
		"bindings": []obj{
			{"route_id": 1, "site_name": "shop", "rule_group_ids": []int{1}},
			{"route_id": 2, "site_name": "flags", "rule_group_ids": []int{2}},
		},
	})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(runtimeDir, "waf_config.json"), doc, 0o644); err != nil {
		return nil, err
	}
	dir := tb.TempDir()
	var servers strings.Builder
	for _, s := range []struct{ addr, site string }{{oursAddr, "shop"}, {flagsAddr, "flags"}, {noneAddr, ""}} {
		waf := ""
		if s.site != "" {
			waf = fmt.Sprintf("set $openflare_waf_site %q;\n        access_by_lua_file %s/waf/check.lua;", s.site, luaDir)
		}
		fmt.Fprintf(&servers, `
    server {
        listen %s;
        server_name %s;
        %s
        location / { proxy_pass http://origin; }
    }`, s.addr, Host, waf)
	}
	body := fmt.Sprintf(`
    lua_package_path "%[1]s/?.lua;%[1]s/?/init.lua;;";
    lua_shared_dict openflare_observability 10m;
    lua_shared_dict openflare_pow_challenges 10m;
    lua_shared_dict openflare_pow_sessions 10m;
    lua_shared_dict openflare_pow_config 1m;
    lua_shared_dict openflare_waf_config 1m;
    lua_shared_dict openflare_waf_ip_groups 64m;
    init_worker_by_lua_block { require("waf.runtime").init() }
%[2]s
`, luaDir, servers.String())
	bin := nginxtest.Binary(tb)
	s := nginxtest.StartConf(tb, bin, dir, mainConf(dir, nginxtest.LoadModules(tb, bin), origin, body))
	nginxtest.WaitPort(tb, oursAddr)
	return s, nil
}

// flagPrefix starts the flags site's 403 body, before the flag's name.
const flagPrefix = "flag:"

// securityFlags are security_check's nine flags, in the order it checks
// them (DATAPLANE 2.6).
var securityFlags = []string{"path_traversal", "file_inclusion", "sql_injection", "command_injection", "xss", "ssrf", "crlf_injection", "malicious_upload", "xxe"}

// startCRS starts nginx with ModSecurity and the Core Rule Set in front
// of the same origin.
func startCRS(tb *benchkit.ProgramTB, origin string) (*nginxtest.Server, error) {
	if why := crsMissing(); why != "" {
		return nil, errors.New(why)
	}
	dir := tb.TempDir()
	for _, d := range []string{"modsec-tmp", "modsec-data"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	rules := filepath.Join(dir, "modsecurity.conf")
	if err := os.WriteFile(rules, []byte(crsRules(dir)), 0o644); err != nil {
		return nil, err
	}
	body := fmt.Sprintf(`
    server {
        listen %s;
        server_name %s;
        modsecurity on;
        modsecurity_rules_file %s;
        location / { proxy_pass http://origin; }
    }
`, crsAddr, Host, rules)
	s := nginxtest.StartConf(tb, nginxtest.Binary(tb), dir, mainConf(dir, "load_module "+modsecModule+";\n", origin, body))
	nginxtest.WaitPort(tb, crsAddr)
	return s, nil
}

// obj is a JSON object literal.
type obj = map[string]any
