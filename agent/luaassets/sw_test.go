package luaassets

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	chromeUA  = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36"
	firefoxUA = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
	safariUA  = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15"
)

// §11 case 26 over plain HTTP: the SW server block as the renderer emits it
// for HTTPS, served on port 80 (so redir starts with http://).
func TestServiceWorker(t *testing.T) {
	r := newRig(t)
	r.writeWAF(obj{
		"rule_groups": []obj{group(1, true, allowGraph()), group(2, false, ipGraph(obj{"ips": []string{blockedIP}}, 451, "ip blocked"))},
		"bindings":    []obj{binding("sw", 2)},
	})
	swDir := filepath.Join(r.certDir, "sw")
	for name, content := range map[string]string{
		"sw.js":        "const CACHE = \"openflare-offline-0123456789ab\";\n",
		"offline.html": "<!DOCTYPE html><title>offline</title>\n",
	} {
		if err := os.WriteFile(filepath.Join(swDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r.start(`
    server {
        listen 80;
        server_name sw.test;
        set $openflare_waf_site "sw";
        ` + r.mergedAccess(`require("sw.runtime").check()`) + `
        location / { proxy_pass http://origin; }
        location = /sw.js {
            alias ` + swDir + `/sw.js;
            default_type application/javascript;
            add_header Service-Worker-Allowed /;
            add_header Cache-Control "no-cache";
        }
        location = /offline.html {
            alias ` + swDir + `/offline.html;
            default_type text/html;
            add_header Cache-Control "no-cache";
        }
        location = /__openflare_sw_challenge {
            internal;
            content_by_lua_file ` + swDir + `/challenge.lua;
        }
        # Test only: reach the challenge page with any redir value.
        location = /test/sw-challenge {
            content_by_lua_block { ngx.exec("/__openflare_sw_challenge", { redir = ngx.var.arg_r and ngx.unescape_uri(ngx.var.arg_r) }) }
        }
    }
`)
	do := func(method, target string, header http.Header) reply {
		t.Helper()
		return r.request(otherIP, method, "sw.test", target, header)
	}
	ua := func(s string) http.Header { return http.Header{"User-Agent": {s}} }

	// challenged asserts the challenge page and returns its redir literal.
	challenged := func(got reply) string {
		t.Helper()
		if got.status != 200 || got.header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("got %d %q %q, want the challenge page", got.status, got.header.Get("Content-Type"), got.body)
		}
		for _, want := range []string{
			`<html lang="zh-CN">`, `<title></title>`, `<meta name="robots" content="noindex,nofollow">`,
			`navigator.serviceWorker.register("/sw.js").then(done, done)`,
			`document.cookie = "__openflare_sw=1; Path=/; Max-Age=31536000; Secure; SameSite=Lax"`,
			`location.replace(redir)`,
		} {
			if !strings.Contains(got.body, want) {
				t.Errorf("challenge page lacks %q:\n%s", want, got.body)
			}
		}
		if n := strings.Count(got.body, "</script>"); n != 1 {
			t.Errorf("challenge page has %d </script>, want 1:\n%s", n, got.body)
		}
		_, after, ok := strings.Cut(got.body, "var redir = ")
		literal, _, ok2 := strings.Cut(after, ";\n")
		if !ok || !ok2 {
			t.Fatalf("no redir assignment in:\n%s", got.body)
		}
		return literal
	}

	t.Run("case26a browser on / without cookie", func(t *testing.T) {
		for _, agent := range []string{chromeUA, firefoxUA, safariUA} {
			before := r.originHits.Load()
			if got := challenged(do(http.MethodGet, "/", ua(agent))); got != `"http://sw.test/"` {
				t.Errorf("%s: redir = %s", agent, got)
			}
			if r.originHits.Load() != before {
				t.Errorf("%s: the origin was contacted", agent)
			}
		}
		if got := challenged(do(http.MethodGet, "/?a=1&b=%2F", ua(chromeUA))); got != `"http://sw.test/?a=1&b=%2F"` {
			t.Errorf("redir = %s", got)
		}
		h := ua(chromeUA)
		h.Set("Cookie", "other=1; __openflare_sw=")
		challenged(do(http.MethodGet, "/", h))
	})
	t.Run("case26b-e pass through", func(t *testing.T) {
		withCookie := ua(chromeUA)
		withCookie.Set("Cookie", "__openflare_sw=1")
		for name, got := range map[string]reply{
			"cookie":           do(http.MethodGet, "/", withCookie),
			"other path":       do(http.MethodGet, "/about", ua(chromeUA)),
			"curl":             do(http.MethodGet, "/", ua("curl/8.5.0")),
			"POST":             do(http.MethodPost, "/", ua(chromeUA)),
			"no UA":            do(http.MethodGet, "/", nil),
			"Chrome/ no digit": do(http.MethodGet, "/", ua("Chrome/x")),
			"Safari+Chrome":    do(http.MethodGet, "/", ua("Safari Chrome")),
		} {
			if got.status != 200 || got.body != "origin-ok" {
				t.Errorf("%s: got %d %q, want origin-ok", name, got.status, got.body)
			}
		}
		before := r.originHits.Load()
		if got := do(http.MethodHead, "/", ua(chromeUA)); got.status != 200 || r.originHits.Load() != before+1 {
			t.Errorf("HEAD: got %d, origin hits +%d, want the origin's answer", got.status, r.originHits.Load()-before)
		}
	})
	t.Run("WAF runs before SW", func(t *testing.T) {
		got := r.request(blockedIP, http.MethodGet, "sw.test", "/", ua(chromeUA))
		r.expect(got, 451, "ip blocked\n", "text/html; charset=utf-8")
	})
	t.Run("case26f sw.js", func(t *testing.T) {
		got := do(http.MethodGet, "/sw.js", ua(chromeUA))
		if got.status != 200 || got.header.Get("Content-Type") != "application/javascript" ||
			got.header.Get("Service-Worker-Allowed") != "/" || got.header.Get("Cache-Control") != "no-cache" ||
			!strings.Contains(got.body, "openflare-offline-") {
			t.Errorf("got %d %v %q", got.status, got.header, got.body)
		}
		got = do(http.MethodGet, "/offline.html", ua(chromeUA))
		if got.status != 200 || got.header.Get("Cache-Control") != "no-cache" {
			t.Errorf("offline.html: got %d %v", got.status, got.header)
		}
	})
	t.Run("case26g challenge location is internal", func(t *testing.T) {
		if got := do(http.MethodGet, "/__openflare_sw_challenge", ua(chromeUA)); got.status != 404 {
			t.Errorf("got %d, want 404", got.status)
		}
	})
	t.Run("redir escaping", func(t *testing.T) {
		// Raw characters in the query reach redir through $args unchanged.
		got := challenged(do(http.MethodGet, `/?q="</script>\`, ua(chromeUA)))
		if want := `"http://sw.test/?q=\"\x3C/script>\\"`; got != want {
			t.Errorf("redir = %s, want %s", got, want)
		}
		// Characters that cannot travel in a request line, via the test hook.
		redir := "a\r\nb\u2028c\u2029d\te\"f\\g<h"
		got = challenged(do(http.MethodGet, "/test/sw-challenge?r="+url.QueryEscape(redir), nil))
		if want := `"a\r\nb\u2028c\u2029d\x09e\"f\\g\x3Ch"`; got != want {
			t.Errorf("redir = %s, want %s", got, want)
		}
		// No redir at all: back to the homepage.
		if got := challenged(do(http.MethodGet, "/test/sw-challenge", nil)); got != `"/"` {
			t.Errorf("redir = %s, want \"/\"", got)
		}
	})
}
