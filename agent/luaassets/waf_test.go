package luaassets

import (
	"net/http"
	"strings"
	"testing"
)

// decisionConfig is one waf_config.json exercising the DATAPLANE §11 graph
// cases side by side: each site binds the groups of one case.
func decisionConfig() obj {
	disabled := group(6, false, blockGraph(403, "disabled group ran"))
	disabled["enabled"] = false
	legacy := group(14, false, obj{"entry": "", "nodes": nil})
	nullIDs := binding("nullids")
	nullIDs["rule_group_ids"] = nil
	return obj{
		"rule_groups": []obj{
			group(1, true, allowGraph()),
			group(2, false, ipGraph(obj{"ips": []string{blockedIP}}, 451, "ip blocked")),
			group(3, false, ipGraph(obj{"cidrs": []string{"127.0.0.0/28"}}, 403, "")),
			group(4, false, allowGraph()),
			group(5, false, blockGraph(499, "second")),
			disabled,
			group(7, false, graph(obj{"start": startNode("nowhere")})),
			group(8, false, graph(obj{
				"start": startNode("x"),
				"x":     branchNode("ip_match", obj{"ips": []string{blockedIP}}, "block", ""),
				"block": blockNode(403, "x"),
			})),
			group(9, false, graph(obj{
				"start": startNode("a"),
				"a":     branchNode("ip_match", obj{"ips": []string{blockedIP}}, "a", "a"),
			})),
			group(11, false, graph(obj{
				"start": startNode("ua"),
				"ua":    branchNode("ua_check", obj{"require_ua": true}, "allow", "block"),
				"allow": allowNode(),
				"block": blockNode(403, "ua-false"),
			})),
			group(12, false, graph(obj{
				"start": startNode("pow"),
				"pow": obj{"type": "pow", "config": obj{"algorithm": "fast", "difficulty": 4, "session_ttl": 600, "challenge_ttl": 300},
					"next": obj{"next": "block"}},
				"block": blockNode(418, "after-pow"),
			})),
			group(13, false, graph(obj{
				"start": startNode("t"),
				"t":     obj{"type": "teleport", "config": obj{}, "next": obj{"true": "start", "false": "start", "next": "start"}},
			})),
			legacy,
			// ip_match config that is null: no lists, so the false edge.
			group(15, false, graph(obj{
				"start": startNode("m"),
				"m":     obj{"type": "ip_match", "config": nil, "next": obj{"true": "block", "false": "allow"}},
				"block": blockNode(403, "null config matched"),
				"allow": allowNode(),
			})),
		},
		"bindings": []obj{
			binding("ipblock", 2),
			binding("ipblock", 5), // only the first binding of a site counts
			binding("cidr", 3),
			binding("order", 4, 5),
			binding("skip", 6, 99),
			binding("missing", 7),
			binding("dangling", 8),
			binding("cycle", 9),
			binding("ua", 11),
			binding("pow", 12),
			binding("unknown", 13),
			binding("legacy", 14),
			binding("nullconfig", 15),
			binding("global-only", 1), // a global id in a binding does not run twice
			nullIDs,
		},
	}
}

func TestWAFDecisions(t *testing.T) {
	r := newRig(t)
	r.writeWAF(decisionConfig())
	var servers strings.Builder
	for _, site := range []string{"ipblock", "cidr", "order", "skip", "missing", "dangling", "cycle", "ua", "unknown", "legacy", "nullconfig", "global-only", "nullids", "unbound"} {
		servers.WriteString(r.wafServer(site))
	}
	// The pow site runs the merged access block and has the PoW endpoints.
	servers.WriteString(`
    server {
        listen 80;
        server_name pow.test;
        set $openflare_waf_site "pow";
        ` + r.mergedAccess(`require("pow.runtime").check()`) + `
        location = /.within.website/x/cmd/anubis/api/pass-challenge { content_by_lua_file ` + r.luaDir + `/pow/verify.lua; }
        location = /.within.website/x/cmd/anubis/api/make-challenge { content_by_lua_file ` + r.luaDir + `/pow/challenge.lua; }
        # Test only: an internal redirect to a PoW endpoint before the access phase.
        location = /continue {
            rewrite_by_lua_block { return ngx.exec("/.within.website/x/cmd/anubis/api/make-challenge") }
        }
        location / { proxy_pass http://origin; }
    }
    server {
        listen 80;
        server_name powpass.test;
        set $openflare_waf_site "unbound";
        ` + r.mergedAccess(`require("pow.runtime").check()`) + `
        location = /.within.website/x/cmd/anubis/api/pass-challenge { content_by_lua_file ` + r.luaDir + `/pow/verify.lua; }
        location = /.within.website/x/cmd/anubis/api/make-challenge { content_by_lua_file ` + r.luaDir + `/pow/challenge.lua; }
        location / { proxy_pass http://origin; }
    }
`)
	r.start(servers.String())

	t.Run("case1 ip_match blocks with body", func(t *testing.T) {
		before := r.originHits.Load()
		r.expect(r.get(blockedIP, "ipblock.test", "/"), 451, "ip blocked\n", "text/html; charset=utf-8")
		if n := r.originHits.Load() - before; n != 0 {
			t.Errorf("origin got %d requests for a blocked client", n)
		}
	})
	t.Run("case2 forwarding headers are ignored", func(t *testing.T) {
		h := http.Header{"X-Forwarded-For": {blockedIP}, "X-Real-Ip": {blockedIP}, "Cf-Connecting-Ip": {blockedIP}}
		r.expect(r.request(otherIP, http.MethodGet, "ipblock.test", "/", h), 200, "origin-ok", "")
	})
	t.Run("case3 empty body gives nginx's error page", func(t *testing.T) {
		got := r.get(blockedIP, "cidr.test", "/")
		if got.status != 403 || !strings.Contains(got.body, "<title>403 Forbidden</title>") {
			t.Errorf("got %d %q, want nginx's 403 page", got.status, got.body)
		}
		r.expect(r.get("127.0.0.16", "cidr.test", "/"), 200, "origin-ok", "")
	})
	t.Run("case5 allow ends only its group", func(t *testing.T) {
		r.expect(r.get(otherIP, "order.test", "/"), 499, "second\n", "text/html; charset=utf-8")
	})
	t.Run("case6 disabled and unknown groups are skipped", func(t *testing.T) {
		r.expect(r.get(otherIP, "skip.test", "/"), 200, "origin-ok", "")
	})
	t.Run("first binding of a site wins", func(t *testing.T) {
		r.expect(r.get(otherIP, "ipblock.test", "/"), 200, "origin-ok", "")
	})
	t.Run("sites without bound groups run the global groups only", func(t *testing.T) {
		for _, site := range []string{"global-only", "nullids", "unbound"} {
			r.expect(r.get(otherIP, site+".test", "/"), 200, "origin-ok", "")
		}
	})
	t.Run("ip_match with a null config takes false", func(t *testing.T) {
		r.expect(r.get(blockedIP, "nullconfig.test", "/"), 200, "origin-ok", "")
	})
	t.Run("case7 damaged graphs fail closed", func(t *testing.T) {
		before := r.originHits.Load()
		for _, site := range []string{"missing", "dangling", "cycle", "unknown", "legacy"} {
			for range 3 {
				r.expectFailClosed(r.get(otherIP, site+".test", "/"))
			}
		}
		if n := r.originHits.Load() - before; n != 0 {
			t.Errorf("origin got %d requests for failed-closed requests", n)
		}
		if n := r.countLines("openflare waf fail-closed"); n != 1 {
			t.Errorf("fail-closed logged %d times, want once per 60 s", n)
		}
	})
	t.Run("ua_check with require_ua decides on the User-Agent", func(t *testing.T) {
		// An empty User-Agent fails require_ua: the node's false edge blocks.
		r.expect(r.request(otherIP, http.MethodGet, "ua.test", "/", http.Header{"User-Agent": {""}}), 403, "ua-false\n", "")
		browser := http.Header{"User-Agent": {"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"}}
		r.expect(r.request(otherIP, http.MethodGet, "ua.test", "/", browser), 200, "origin-ok", "")
	})
	t.Run("pow takes over with the challenge page", func(t *testing.T) {
		if got := r.get(otherIP, "pow.test", "/"); got.status != 200 || !strings.Contains(got.body, `id="anubis_challenge"`) {
			t.Errorf("got %d %q, want the challenge page", got.status, got.body)
		}
	})
	t.Run("internal PoW continuation skips the graph", func(t *testing.T) {
		if got := r.get(otherIP, "pow.test", "/.within.website/x/cmd/anubis/api/make-challenge"); got.status != 200 || !strings.Contains(got.body, `id="anubis_challenge"`) {
			t.Errorf("got %d %q, want the challenge page", got.status, got.body)
		}
		r.expect(r.get(otherIP, "pow.test", "/continue"), 403, "PoW graph node was not evaluated for this request\n", "")
	})
	t.Run("PoW endpoint placeholders", func(t *testing.T) {
		got := r.get(otherIP, "powpass.test", "/.within.website/x/cmd/anubis/api/make-challenge")
		r.expect(got, 403, "PoW graph node was not evaluated for this request\n", "")
		got = r.get(otherIP, "powpass.test", "/.within.website/x/cmd/anubis/api/pass-challenge?id=x&response=y&nonce=1")
		r.expect(got, 410, `{"error":"challenge expired or not found"}`+"\n", "application/json")
	})
}

// Never initialised, then §11 cases 4 and 8 across reloads.
func TestWAFLoading(t *testing.T) {
	r := newRig(t)
	r.start(r.wafServer("demo"))

	t.Run("never initialised fails closed", func(t *testing.T) {
		r.expectFailClosed(r.get(otherIP, "demo.test", "/"))
		if r.countLines("openflare waf init failed") == 0 {
			t.Error("init failure not logged")
		}
	})
	t.Run("case4 global groups run first", func(t *testing.T) {
		r.writeWAF(obj{
			"rule_groups": []obj{group(2, false, blockGraph(451, "bound")), group(1, true, blockGraph(429, "global"))},
			"bindings":    []obj{binding("demo", 2)},
		})
		r.nginx.Reload()
		r.expect(r.get(otherIP, "demo.test", "/"), 429, "global\n", "text/html; charset=utf-8")
	})
	t.Run("case8 broken waf_config.json after reload", func(t *testing.T) {
		r.writeRuntime("waf_config.json", []byte(`{"rule_groups":`))
		r.nginx.Reload()
		r.expectFailClosed(r.get(otherIP, "demo.test", "/"))
	})
	t.Run("empty waf_config.json", func(t *testing.T) {
		r.writeRuntime("waf_config.json", []byte(" \n"))
		r.nginx.Reload()
		r.expectFailClosed(r.get(otherIP, "demo.test", "/"))
	})
	t.Run("no groups allows everything", func(t *testing.T) {
		r.writeRuntime("waf_config.json", []byte(`{"rule_groups":null,"bindings":{"not":"a list"}}`))
		r.nginx.Reload()
		r.expect(r.get(otherIP, "demo.test", "/"), 200, "origin-ok", "")
	})
}
