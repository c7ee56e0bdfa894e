package luaassets

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"openflare/agent/ipgroups"
	"openflare/testing/nginxtest"
	"openflare/testing/testsupport"
)

// DATAPLANE 10, the fail-closed / fail-open matrix: one subtest of
// TestFailMatrix per row, each against a real nginx. Rows tested elsewhere
// as well, with more variants:
//
//	runtime not initialised            TestWAFLoading
//	damaged graph                      TestWAFDecisions/case7
//	no groups or bindings              TestWAFLoading/no_groups_allows_everything
//	skipped groups                     TestWAFDecisions/case6
//	IP-group snapshot                  TestIPGroupSnapshots (wrong label, oversized)
//	GeoIP missing                      the geo_match tests (not here)
//	body past the inspection limit     TestFailMatrix/security_check_body_past_the_inspection_limit, TestSecurityCheckInputs/inspection_limit
//	PoW hand-off, challenge evicted    TestPowFailClosed
//	origin error template missing      TestRenderedErrorPages/*/template_missing (dataplane11_test.go)
//	stub_status failure                TestObservability/stub_status_unavailable
//	libcrypto missing (REC: fail closed) TestPowWithoutLibcrypto

// matrixDicts are the shared dicts the renderer declares, one a line so a
// row can leave one out.
var matrixDicts = []string{
	"lua_shared_dict openflare_observability 10m;",
	"lua_shared_dict openflare_pow_challenges 10m;",
	"lua_shared_dict openflare_pow_sessions 10m;",
	"lua_shared_dict openflare_pow_config 1m;",
	"lua_shared_dict openflare_waf_config 1m;",
	"lua_shared_dict openflare_waf_ip_groups 64m;",
}

const wafInitLine = `init_worker_by_lua_block { require("waf.runtime").init() }`

// startBare runs nginx with the rig's Lua tree, origin and servers under
// the given http-level lines instead of start's fixed ones, for the rows
// where the main config itself is what is wrong. Unlike start it accepts
// "lua entry thread aborted" in the log: some rows provoke exactly that.
func (r *rig) startBare(mainLines []string, servers string) {
	r.t.Helper()
	r.nginx = nginxtest.Start(r.t, fmt.Sprintf(`
    lua_package_path "%[1]s/?.lua;%[1]s/?/init.lua;;";
    upstream origin { server %[2]s; }
    %[3]s
%[4]s
`, r.luaDir, r.origin.Listener.Addr(), strings.Join(mainLines, "\n    "), servers))
	nginxtest.WaitPort(r.t, "127.0.0.1:80")
}

// without returns lines minus the one that starts with drop.
func without(lines []string, drop string) []string {
	var out []string
	for _, l := range lines {
		if !strings.HasPrefix(l, drop) {
			out = append(out, l)
		}
	}
	return out
}

// failHook is a server-level rewrite handler for tests: a request with
// X-Fail-In: <module>.<function> makes that function raise a Lua error the
// next time it runs, once, so the row "unexpected Lua error" can be driven
// through the real entry points. Internal redirects keep the header, hence
// the is_internal guard: the hook must not wrap itself.
const failHook = `
        rewrite_by_lua_block {
            local spec = ngx.var.http_x_fail_in
            if spec and not ngx.req.is_internal() then
                local mod, fn = spec:match("^(.*)%.([^.]+)$")
                local m = mod == "ngx.req" and ngx.req or require(mod)
                local orig = m[fn]
                m[fn] = function()
                    m[fn] = orig
                    error("injected failure in " .. spec)
                end
            end
        }`

func failIn(spec string) http.Header { return http.Header{"X-Fail-In": {spec}} }

func TestFailMatrix(t *testing.T) {
	t.Run("runtime not initialised", func(t *testing.T) {
		for _, c := range []struct {
			name string
			doc  []byte // nil: no waf_config.json at all
			main []string
		}{
			{"waf_config.json missing", nil, append(matrixDicts, wafInitLine)},
			{"waf_config.json empty", []byte(""), append(matrixDicts, wafInitLine)},
			{"waf_config.json bad JSON", []byte(`{"rule_groups":`), append(matrixDicts, wafInitLine)},
			{"init never injected", []byte(`{"rule_groups":[],"bindings":[]}`), matrixDicts},
			// ip_groups.start fails after the rules are read: they must not
			// be published (DATAPLANE 1.2 REC).
			{"init threw before the rules were stored", []byte(`{"rule_groups":[],"bindings":[]}`), append(without(matrixDicts, "lua_shared_dict openflare_waf_ip_groups"), wafInitLine)},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := newRig(t)
				if c.doc != nil {
					r.writeRuntime("waf_config.json", c.doc)
				}
				r.startBare(c.main, r.wafServer("demo")+r.wafServer("other"))
				for range 3 {
					for _, host := range []string{"demo.test", "other.test"} {
						r.expectFailClosed(r.get(otherIP, host, "/"))
						r.expectFailClosed(r.request(otherIP, http.MethodPost, host, "/x?y=1", nil))
					}
				}
				if n := r.originHits.Load(); n != 0 {
					t.Errorf("origin got %d requests", n)
				}
				if n := r.countLines("openflare waf fail-closed"); n != 1 {
					t.Errorf("fail-closed logged %d times, want once per 60 s", n)
				}
			})
		}
	})

	t.Run("damaged graph", func(t *testing.T) {
		r := newRig(t)
		damaged := map[string]obj{
			"invalid graph object": obj{"entry": "start", "nodes": "not an object"},
			"missing node":         graph(obj{"start": startNode("nowhere")}),
			"unknown type": graph(obj{
				"start": startNode("t"),
				"t":     obj{"type": "teleport", "config": obj{}, "next": obj{"next": "start"}},
			}),
			"dangling handle": graph(obj{
				"start": startNode("m"),
				"m":     branchNode("ip_match", obj{"ips": []string{blockedIP}}, "allow", ""),
				"allow": allowNode(),
			}),
			"cycle": graph(obj{
				"start": startNode("a"),
				"a":     branchNode("ip_match", obj{"ips": []string{blockedIP}}, "a", "a"),
			}),
		}
		groups := []obj{group(1, true, allowGraph()), group(2, false, allowGraph())}
		bindings := []obj{binding("healthy", 2)}
		var sites []string
		for name, g := range damaged {
			id := len(groups) + 1
			site := strings.ReplaceAll(name, " ", "-")
			groups = append(groups, group(id, false, g))
			bindings = append(bindings, binding(site, 2, id))
			sites = append(sites, site)
		}
		r.writeWAF(obj{"rule_groups": groups, "bindings": bindings})
		servers := r.wafServer("healthy")
		for _, s := range sites {
			servers += r.wafServer(s)
		}
		r.start(servers)
		for _, s := range sites {
			r.expectFailClosed(r.get(otherIP, s+".test", "/"))
		}
		// Only requests that reach the damage fail: the dangling false edge
		// is not taken by a matching client, and other sites never run it.
		r.expect(r.get(blockedIP, "dangling-handle.test", "/"), 200, "origin-ok", "")
		r.expect(r.get(otherIP, "healthy.test", "/"), 200, "origin-ok", "")
		if n := r.originHits.Load(); n != 2 {
			t.Errorf("origin got %d requests, want the 2 that reached no damage", n)
		}
	})

	t.Run("unexpected Lua error", func(t *testing.T) {
		r := newRig(t)
		r.writeWAF(obj{
			"rule_groups": []obj{
				group(1, true, allowGraph()),
				group(2, false, checkGraph("security_check", obj{"sql_injection": true}, "sec")),
				group(3, false, powGraph(powConfig(1, 600, 300))),
			},
			"bindings": []obj{binding("sec", 2), binding("pow", 3)},
		})
		withHook := func(server string) string { return strings.Replace(server, "listen 80;", "listen 80;"+failHook, 1) }
		r.startBare(append(matrixDicts, wafInitLine), withHook(r.wafServer("sec"))+withHook(r.powServer("pow.test", "pow")))

		// In the WAF (a node, or the PoW evaluation inside the walk) the
		// error ends in the fail-closed response, never in an allow.
		r.expectFailClosed(r.request(otherIP, http.MethodGet, "sec.test", "/?q=ok", failIn("waf.security.check")))
		r.expectFailClosed(r.request(otherIP, http.MethodGet, "pow.test", "/page", failIn("pow.runtime.evaluate")))
		if n := r.originHits.Load(); n != 0 {
			t.Errorf("origin got %d requests", n)
		}
		// The hook fired once; the same requests now pass and challenge.
		r.expect(r.get(otherIP, "sec.test", "/?q=ok"), 200, "origin-ok", "")
		c := parseChallenge(t, r.get(otherIP, "pow.test", "/page"))

		// In the PoW content handlers it is nginx's own 500 page.
		nginx500 := func(got reply, what string) {
			t.Helper()
			if got.status != 500 || got.header.Get("Content-Type") != "text/html" || !strings.Contains(got.body, "<title>500 Internal Server Error</title>") || got.header.Get("Set-Cookie") != "" {
				t.Errorf("%s: got %d %q %q (Set-Cookie %q), want nginx's 500 page", what, got.status, got.header.Get("Content-Type"), got.body, got.header.Get("Set-Cookie"))
			}
		}
		nonce, hash := solve(c.Challenge.RandomData, c.Rules.Difficulty)
		pass := passTarget(passQuery(c.Challenge.ID, hash, strconv.Itoa(nonce), ""))
		nginx500(r.request(otherIP, http.MethodGet, "pow.test", pass, failIn("pow.runtime.sha256_hex")), "pass-challenge")
		nginx500(r.request(otherIP, http.MethodGet, "pow.test", "/page", failIn("pow.runtime.texts")), "make-challenge")
		// A failed verification consumed nothing: the proof still works.
		r.expect(r.get(otherIP, "pow.test", pass), 200, `{"ok":true}`+"\n", "application/json")
		if n := r.originHits.Load(); n != 1 {
			t.Errorf("origin got %d requests, want only the clean one", n)
		}
	})

	t.Run("no groups or bindings", func(t *testing.T) {
		r := newRig(t)
		r.writeRuntime("waf_config.json", []byte(`{"rule_groups":[],"bindings":[]}`))
		r.start(r.wafServer("demo"))
		r.expect(r.get(blockedIP, "demo.test", "/"), 200, "origin-ok", "")
		r.expect(r.request(blockedIP, http.MethodPost, "demo.test", "/?q=1%27%20union%20select%201", nil), 200, "origin-ok", "")
	})

	t.Run("unknown, disabled and unbound groups are skipped", func(t *testing.T) {
		r := newRig(t)
		disabled := group(3, false, blockGraph(403, "disabled ran"))
		disabled["enabled"] = false
		r.writeWAF(obj{
			"rule_groups": []obj{
				group(1, true, ipGraph(obj{"ips": []string{blockedIP}}, 403, "global")),
				disabled,
			},
			"bindings": []obj{binding("unknown", 99), binding("disabled", 3), binding("elsewhere", 3)},
		})
		r.start(r.wafServer("unknown") + r.wafServer("disabled") + r.wafServer("nobinding"))
		for _, site := range []string{"unknown", "disabled", "nobinding"} {
			r.expect(r.get(otherIP, site+".test", "/"), 200, "origin-ok", "")
			// The global groups still run.
			r.expect(r.get(blockedIP, site+".test", "/"), 403, "global\n", "text/html; charset=utf-8")
		}
	})

	t.Run("IP-group snapshot missing or corrupt", func(t *testing.T) {
		r := newRig(t)
		r.writeWAF(obj{
			"rule_groups": []obj{group(2, false, ipGraph(obj{"ip_group_ids": []int{3}}, 403, "grp"))},
			"bindings":    []obj{binding("demo", 2)},
		})
		r.start(r.wafServer("demo"))
		// First boot without any snapshot, then a checksum naming a
		// compiled file that is garbage.
		r.expect(r.get(blockedIP, "demo.test", "/"), 200, "origin-ok", "")
		_, sum, _ := encodeGroups(t, map[string]obj{"3": ipGroup(3, true, []string{"127.0.0.0/24"})})
		r.writeAtomic(ipgroups.CompiledName, []byte("not a compiled snapshot"))
		r.writeAtomic(ipgroups.ChecksumName, []byte(sum+"\n"))
		testsupport.WaitFor(t, snapshotPickup, "the refusal of the garbage snapshot", func() bool {
			return r.countLines("IP group snapshot "+sum+" not published") > 0
		})
		// Fail-open for deny lists: the group is unknown, so false.
		r.expect(r.get(blockedIP, "demo.test", "/"), 200, "origin-ok", "")

		good, _ := r.writeGroups(map[string]obj{"3": ipGroup(3, true, []string{"127.0.0.0/24"})})
		// Every worker: "previous" is per worker.
		r.waitAdopted("adopted IP group snapshot "+good, len(r.nginx.WorkerPIDs()))
		// A corrupt successor keeps the previous snapshot in force.
		_, bad, compiled := encodeGroups(t, map[string]obj{"3": ipGroup(3, false, []string{})})
		r.writeAtomic(ipgroups.CompiledName, compiled[:len(compiled)/2])
		r.writeAtomic(ipgroups.ChecksumName, []byte(bad+"\n"))
		testsupport.WaitFor(t, snapshotPickup, "the refusal of the corrupt snapshot", func() bool {
			return r.countLines("IP group snapshot "+bad+" not published") > 0 || r.countLines("cannot adopt IP group snapshot "+bad) > 0
		})
		for range 4 {
			r.expect(r.get(blockedIP, "demo.test", "/"), 403, "grp\n", "text/html; charset=utf-8")
		}
		if r.countLines("adopted IP group snapshot "+bad) != 0 {
			t.Errorf("adoptions:\n%s", r.nginx.ErrorLog())
		}
	})

	t.Run("security_check body past the inspection limit", func(t *testing.T) {
		r := newRig(t)
		r.writeWAF(obj{
			"rule_groups": []obj{group(2, false, checkGraph("security_check", obj{"sql_injection": true}, "sec"))},
			"bindings":    []obj{binding("sec", 2)},
		})
		r.start(r.uaSecurityServer("sec"))
		attack := "q=1%27+union+select+1&"
		post := func(target, body string, chunked bool) reply {
			t.Helper()
			var rd io.Reader = strings.NewReader(body)
			if chunked {
				rd = io.MultiReader(rd) // length unknown to the client: chunked
			}
			return send(t, otherIP, http.MethodPost, "http://127.0.0.1"+target, "sec.test", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, rd)
		}
		// A body in nginx's temp file, a chunked one and the first 64 KiB
		// of a larger one are inspected.
		for _, c := range []struct {
			name, body string
			chunked    bool
		}{
			{"in memory", attack, false},
			{"in a temp file", attack + strings.Repeat("a", 20*1024), false},
			{"chunked", attack, true},
			{"larger than 64 KiB", attack + strings.Repeat("a", 70000), false},
		} {
			r.expect(post("/", c.body, c.chunked), 403, "sec\n", "text/html; charset=utf-8")
		}
		// Past the limit nothing is: the documented default passes it, and
		// the query is still inspected.
		late := "pad=" + strings.Repeat("a", 70000) + "&" + attack
		r.expect(post("/", late, false), 200, "origin-ok", "")
		got := post("/?q=1%27%20union%20select%201", late, false)
		if got.status != 403 || got.body != "sec\n" {
			t.Errorf("attack in the query: got %d %q", got.status, got.body)
		}
	})

	t.Run("PoW hand-off missing at make-challenge", func(t *testing.T) {
		r := newRig(t)
		r.writeWAF(obj{
			"rule_groups": []obj{group(2, false, powGraph(powConfig(1, 600, 300)))},
			"bindings":    []obj{binding("demo", 2)},
		})
		// The renderer's http-level default_type, which this reply inherits.
		server := strings.Replace(r.powServer("demo.test", "demo"), "listen 80;", "listen 80;\n        default_type application/octet-stream;", 1)
		r.start(server)
		token := solveOn(t, r, "demo.test", "/")
		const want = "PoW graph node was not evaluated for this request\n"
		// With a session the pow node continues: nothing was handed over.
		r.expect(r.request(otherIP, http.MethodGet, "demo.test", powAPI+"make-challenge", withCookie(token)), 403, want, "application/octet-stream")
		// A key that expired or never existed.
		r.expect(r.request(otherIP, http.MethodGet, "demo.test", powAPI+"make-challenge?openflare_pow_config_key=_request_config:gone", withCookie(token)), 403, want, "application/octet-stream")
	})

	t.Run("PoW challenge evicted", func(t *testing.T) {
		r := newRig(t)
		r.writeWAF(obj{
			"rule_groups": []obj{group(2, false, powGraph(powConfig(1, 600, 300)))},
			"bindings":    []obj{binding("demo", 2)},
		})
		r.start(r.powServer("demo.test", "demo") + `
    server {
        listen 80;
        server_name lua.test;
        location = /flush { content_by_lua_block { ngx.shared.openflare_pow_challenges:flush_all() ngx.print("ok") } }
    }
`)
		c := parseChallenge(t, r.get(otherIP, "demo.test", "/"))
		nonce, hash := solve(c.Challenge.RandomData, c.Rules.Difficulty)
		r.expect(r.get(otherIP, "lua.test", "/flush"), 200, "ok", "")
		got := r.get(otherIP, "demo.test", passTarget(passQuery(c.Challenge.ID, hash, strconv.Itoa(nonce), "/")))
		r.expectJSONError(got, 410, "challenge expired or not found")
		if got.header.Get("Set-Cookie") != "" {
			t.Errorf("Set-Cookie %q on a failed verification", got.header.Get("Set-Cookie"))
		}
	})

	t.Run("SW error passes through", func(t *testing.T) {
		r := newRig(t)
		r.writeWAF(obj{"rule_groups": []obj{group(1, true, allowGraph())}, "bindings": []obj{}})
		r.start(`
    server {
        listen 80;
        server_name sw.test;
        set $openflare_waf_site "sw";` + failHook + `
        ` + r.mergedAccess(`require("sw.runtime").check()`) + `
        location / { proxy_pass http://origin; }
        location = /__openflare_sw_challenge {
            internal;
            content_by_lua_file ` + r.certDir + `/sw/challenge.lua;
        }
    }
`)
		h := http.Header{"User-Agent": {chromeUA}}
		if got := r.request(otherIP, http.MethodGet, "sw.test", "/", h); got.status != 200 || !strings.Contains(got.body, "/sw.js") {
			t.Fatalf("without a failure: got %d %q, want the SW challenge page", got.status, got.body)
		}
		h.Set("X-Fail-In", "ngx.req.get_method")
		r.expect(r.request(otherIP, http.MethodGet, "sw.test", "/", h), 200, "origin-ok", "")
		if r.countLines("openflare sw: check failed, passing through") == 0 {
			t.Error("the SW failure was not logged")
		}
	})
}
