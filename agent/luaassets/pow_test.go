package luaassets

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	"openflare/testing/testsupport"
)

const (
	powAPI    = "/.within.website/x/cmd/anubis/api/"
	powStatic = "/.within.website/x/cmd/anubis/static/"
	// DATAPLANE 6.10 test vectors.
	vectorData = "a3f1c2d4e5b60718293a4b5c6d7e8f900f1e2d3c4b5a69788796a5b4c3d2e1f0"
)

var (
	challengeJSON = regexp.MustCompile(`<script id="anubis_challenge" type="application/json">(.*?)</script>`)
	powCookie     = regexp.MustCompile(`^__openflare_pow=([0-9a-f]{40}); Path=/; HttpOnly; SameSite=Lax; Max-Age=(\d+)$`)
)

// powGraph is start → pow(config) → allow.
func powGraph(config obj) obj {
	return graph(obj{
		"start": startNode("pow"),
		"pow":   obj{"type": "pow", "config": config, "next": obj{"next": "allow"}},
		"allow": allowNode(),
	})
}

func powConfig(difficulty, sessionTTL, challengeTTL int) obj {
	return obj{"algorithm": "fast", "difficulty": difficulty, "session_ttl": sessionTTL, "challenge_ttl": challengeTTL}
}

// powServer is a server block as the renderer emits it for a route with a
// pow node: the merged access block, both endpoints and the static alias.
func (r *rig) powServer(host, site string) string {
	return fmt.Sprintf(`
    server {
        listen 80;
        server_name %[1]s;
        set $openflare_waf_site "%[2]s";
        %[3]s
        location = /.within.website/x/cmd/anubis/api/pass-challenge {
            content_by_lua_file %[4]s/pow/verify.lua;
        }
        location = /.within.website/x/cmd/anubis/api/make-challenge {
            content_by_lua_file %[4]s/pow/challenge.lua;
        }
        location / { proxy_pass http://origin; }
        location /.within.website/x/cmd/anubis/static/ {
            alias %[4]s/pow/static/;
            types {
                text/css css;
                application/javascript js mjs;
                application/json json;
                image/webp webp;
                font/woff2 woff2;
            }
        }
    }
`, host, site, r.mergedAccess(`require("pow.runtime").check()`), r.luaDir)
}

// powTestServer is lua.test: helpers that reach into the PoW runtime.
const powTestServer = `
    server {
        listen 80;
        server_name lua.test;
        location = /sha256 {
            content_by_lua_block {
                local hex, err = require("pow.runtime").sha256_hex(ngx.var.arg_s and ngx.unescape_uri(ngx.var.arg_s) or "")
                ngx.print(hex or ("error: " .. tostring(err)))
            }
        }
        location = /put-challenge {
            content_by_lua_block {
                local a = ngx.req.get_uri_args()
                local pow = require("pow.runtime")
                local rec = require("cjson").encode({ data = a.data, difficulty = tonumber(a.difficulty), host = pow.host_key(a.host), session_ttl = 600 })
                ngx.shared.openflare_pow_challenges:set(a.id, rec, 60)
                ngx.print("ok")
            }
        }
        location = /drop-challenge {
            content_by_lua_block {
                ngx.shared.openflare_pow_challenges:delete(ngx.var.arg_id)
                ngx.print("ok")
            }
        }
    }
`

// powChallenge is what the page hands to the browser.
type powChallenge struct {
	Challenge struct {
		ID         string `json:"id"`
		RandomData string `json:"randomData"`
		Method     string `json:"method"`
	} `json:"challenge"`
	Rules struct {
		Difficulty int    `json:"difficulty"`
		Algorithm  string `json:"algorithm"`
	} `json:"rules"`
}

func parseChallenge(t *testing.T, got reply) powChallenge {
	t.Helper()
	if got.status != 200 {
		t.Fatalf("challenge page: got %d %q", got.status, got.body)
	}
	if ct := got.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("challenge page Content-Type = %q", ct)
	}
	m := challengeJSON.FindStringSubmatch(got.body)
	if m == nil {
		t.Fatalf("no anubis_challenge in %q", got.body)
	}
	var c powChallenge
	if err := json.Unmarshal([]byte(m[1]), &c); err != nil {
		t.Fatalf("anubis_challenge %q: %v", m[1], err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(c.Challenge.ID) || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(c.Challenge.RandomData) {
		t.Errorf("challenge id %q / randomData %q not 32 / 64 lowercase hex", c.Challenge.ID, c.Challenge.RandomData)
	}
	return c
}

// solve does what the browser worker does: the first nonce whose
// SHA-256(randomData + decimal nonce) hex starts with difficulty zeros.
func solve(data string, difficulty int) (int, string) {
	zeros := strings.Repeat("0", difficulty)
	for n := 0; ; n++ {
		sum := sha256.Sum256([]byte(data + strconv.Itoa(n)))
		if h := hex.EncodeToString(sum[:]); strings.HasPrefix(h, zeros) {
			return n, h
		}
	}
}

func hashOf(data string, nonce int) string {
	sum := sha256.Sum256([]byte(data + strconv.Itoa(nonce)))
	return hex.EncodeToString(sum[:])
}

func passTarget(q url.Values) string {
	return powAPI + "pass-challenge?" + q.Encode()
}

func passQuery(id, response, nonce, redir string) url.Values {
	q := url.Values{"id": {id}, "response": {response}, "nonce": {nonce}, "elapsedTime": {"12"}}
	if redir != "" {
		q.Set("redir", redir)
	}
	return q
}

func withCookie(token string) http.Header {
	return http.Header{"Cookie": {"__openflare_pow=" + token}}
}

// sessionFrom checks a Set-Cookie of a new or renewed session.
func sessionFrom(t *testing.T, got reply, maxAge int) string {
	t.Helper()
	m := powCookie.FindStringSubmatch(got.header.Get("Set-Cookie"))
	if m == nil || m[2] != strconv.Itoa(maxAge) {
		t.Fatalf("Set-Cookie = %q, want a session with Max-Age=%d", got.header.Get("Set-Cookie"), maxAge)
	}
	return m[1]
}

func (r *rig) expectJSONError(got reply, status int, msg string) {
	r.t.Helper()
	b, _ := json.Marshal(obj{"error": msg})
	r.expect(got, status, string(b)+"\n", "application/json")
}

func (r *rig) expectChallengePage(got reply) {
	r.t.Helper()
	if got.status != 200 || !strings.Contains(got.body, `<script id="anubis_challenge"`) {
		r.t.Errorf("got %d %q, want the challenge page", got.status, got.body)
	}
}

// shortTTL is short.test's session and challenge lifetime in seconds: a
// test waits it out, and before that a challenge must still be solvable
// and a session still valid after a few requests on a loaded machine, so
// it is not shorter.
const shortTTL = 5

func newPowRig(t *testing.T) *rig {
	r := newRig(t)
	r.writeWAF(obj{
		"rule_groups": []obj{
			group(1, true, allowGraph()),
			group(2, false, powGraph(powConfig(4, 600, 300))),
			group(3, false, powGraph(powConfig(2, shortTTL, shortTTL))),
			// A later group the takeover must never reach.
			group(4, false, blockGraph(418, "after-pow")),
		},
		"bindings": []obj{binding("demo", 2, 4), binding("other", 2), binding("short", 3)},
	})
	r.start(r.powServer("demo.test", "demo") + r.powServer("other.test", "other") +
		r.powServer("short.test", "short") + r.powServer("nosite.test", "") + powTestServer)
	return r
}

// DATAPLANE 6.10: SHA-256 through the FFI, and the proof check of
// pass-challenge on the document's vectors.
func TestPowVectors(t *testing.T) {
	r := newPowRig(t)
	for nonce, want := range map[string]string{
		"0":     "e775464637b50160642f0a5fe9147f62e20b3055c0d9ecf3e45371ccb2c94812",
		"39":    "006aa36a0de1ca2e185ceacd85204b34ba4e0d87e37f3082328511cc652acd63",
		"5440":  "000d12da67172fbcc62acd4a02752c818b4bfdaf54345ad3aec344d171620574",
		"11198": "00000d59673af30b8a769d2bbfd70eadc282b738e9734cb2d52f8f116e057a89",
	} {
		r.expect(r.get(otherIP, "lua.test", "/sha256?s="+vectorData+nonce), 200, want, "")
	}
	empty := sha256.Sum256(nil)
	r.expect(r.get(otherIP, "lua.test", "/sha256"), 200, hex.EncodeToString(empty[:]), "")
	long := strings.Repeat("0123456789", 500)
	longSum := sha256.Sum256([]byte(long))
	r.expect(r.get(otherIP, "lua.test", "/sha256?s="+long), 200, hex.EncodeToString(longSum[:]), "")

	n := 0
	check := func(difficulty int, nonce, response string) reply {
		t.Helper()
		n++
		id := fmt.Sprintf("%032x", n)
		r.expect(r.get(otherIP, "lua.test", fmt.Sprintf("/put-challenge?id=%s&data=%s&difficulty=%d&host=demo.test", id, vectorData, difficulty)), 200, "ok", "")
		return r.get(otherIP, "demo.test", passTarget(passQuery(id, response, nonce, "")))
	}
	ok := func(got reply) {
		t.Helper()
		r.expect(got, 200, `{"ok":true}`+"\n", "application/json")
		sessionFrom(t, got, 600)
	}
	const h0 = "e775464637b50160642f0a5fe9147f62e20b3055c0d9ecf3e45371ccb2c94812"
	const h39 = "006aa36a0de1ca2e185ceacd85204b34ba4e0d87e37f3082328511cc652acd63"
	const h5440 = "000d12da67172fbcc62acd4a02752c818b4bfdaf54345ad3aec344d171620574"
	const h11198 = "00000d59673af30b8a769d2bbfd70eadc282b738e9734cb2d52f8f116e057a89"
	r.expectJSONError(check(1, "0", h0), 403, "insufficient difficulty")
	ok(check(0, "0", h0))
	ok(check(2, "39", h39))
	r.expectJSONError(check(3, "39", h39), 403, "insufficient difficulty")
	ok(check(3, "5440", h5440))
	r.expectJSONError(check(4, "5440", h5440), 403, "insufficient difficulty")
	ok(check(4, "11198", h11198))
	ok(check(5, "11198", strings.ToUpper(h11198)))
	r.expectJSONError(check(6, "11198", h11198), 403, "insufficient difficulty")
	// The nonce is floored before hashing.
	ok(check(2, "39.7", h39))
	// The answer must be the hash of this nonce.
	r.expectJSONError(check(2, "40", h39), 403, "hash mismatch")
	r.expectJSONError(check(0, "11198", strings.Repeat("0", 64)), 403, "hash mismatch")
}

// §11 cases 17–22 and the checks around them, solved by a Go client doing
// what the browser's worker does.
func TestPowFlow(t *testing.T) {
	r := newPowRig(t)

	var solved struct {
		token string
	}

	t.Run("case17 challenge page instead of the origin", func(t *testing.T) {
		before := r.originHits.Load()
		got := r.get(otherIP, "demo.test", "/page?a=1")
		c := parseChallenge(t, got)
		if c.Challenge.Method != "fast" || c.Rules.Algorithm != "fast" || c.Rules.Difficulty != 4 {
			t.Errorf("challenge = %+v", c)
		}
		for _, want := range []string{`<html lang="en">`, `<meta name="robots" content="noindex,nofollow">`, `id="title"`, `id="status"`,
			`id="progress" class="pow-progress" role="progressbar"`, `<details id="why">`, "<noscript>", "JavaScript",
			`<script type="module" src="` + powStatic + `js/main.mjs?cacheBuster=openflare-pow">`,
			`<script id="anubis_version" type="application/json">"openflare-pow"</script>`} {
			if !strings.Contains(got.body, want) {
				t.Errorf("page lacks %q", want)
			}
		}
		if sc := got.header.Get("Set-Cookie"); sc != "" {
			t.Errorf("Set-Cookie %q on the challenge page", sc)
		}
		if cc := got.header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control %q on the challenge page, want no-store", cc)
		}
		if strings.Contains(got.body, "http://") || strings.Contains(got.body, "https://") {
			t.Error("the page references an absolute URL")
		}
		if n := r.originHits.Load() - before; n != 0 {
			t.Errorf("origin got %d requests", n)
		}
	})

	t.Run("case18 Chinese page", func(t *testing.T) {
		got := r.request(otherIP, http.MethodGet, "demo.test", "/page", http.Header{"Accept-Language": {"en-US,zh-CN;q=0.9"}})
		parseChallenge(t, got)
		for _, want := range []string{`<html lang="zh-CN">`, "正在检查您的浏览器", "JavaScript"} {
			if !strings.Contains(got.body, want) {
				t.Errorf("page lacks %q", want)
			}
		}
	})

	t.Run("non-JS clients get the noscript page on every request", func(t *testing.T) {
		before := r.originHits.Load()
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodGet} {
			got := send(t, otherIP, method, "http://127.0.0.1/form", "demo.test", nil, strings.NewReader("field=value"))
			r.expectChallengePage(got)
			if !strings.Contains(got.body, `<noscript><p class="pow-noscript">`) {
				t.Errorf("%s: no noscript text", method)
			}
		}
		if n := r.originHits.Load() - before; n != 0 {
			t.Errorf("origin got %d requests", n)
		}
	})

	t.Run("case19 solve, cookie, origin", func(t *testing.T) {
		c := parseChallenge(t, r.get(otherIP, "demo.test", "/page?a=1"))
		nonce, hash := solve(c.Challenge.RandomData, c.Rules.Difficulty)
		got := r.get(otherIP, "demo.test", passTarget(passQuery(c.Challenge.ID, hash, strconv.Itoa(nonce), "http://demo.test/page?a=1")))
		if got.status != 302 || got.header.Get("Location") != "http://demo.test/page?a=1" {
			t.Fatalf("pass-challenge: %d Location %q %q", got.status, got.header.Get("Location"), got.body)
		}
		token := sessionFrom(t, got, 600)
		if strings.Contains(got.header.Get("Set-Cookie"), "Secure") {
			t.Error("Secure cookie over http")
		}
		solved.token = token
		before := r.originHits.Load()
		got = r.request(otherIP, http.MethodGet, "demo.test", "/page?a=1", withCookie(token))
		r.expect(got, 418, "after-pow\n", "")
		// The binding's later group ran: the pow node continued the walk.
		if renewed := sessionFrom(t, got, 600); renewed != token {
			t.Errorf("renewed cookie %q, want %q", renewed, token)
		}
		if n := r.originHits.Load() - before; n != 0 {
			t.Errorf("origin got %d requests past a block", n)
		}
	})

	t.Run("a session reaches the origin", func(t *testing.T) {
		token := solveOn(t, r, "other.test", "/x")
		before := r.originHits.Load()
		got := r.request(otherIP, http.MethodGet, "other.test", "/x", withCookie(token))
		r.expect(got, 200, "origin-ok", "")
		// The sliding renewal reaches the client on a proxied answer too.
		if renewed := sessionFrom(t, got, 600); renewed != token {
			t.Errorf("renewed cookie %q, want %q", renewed, token)
		}
		r.expect(r.request(otherIP, http.MethodPost, "other.test", "/x", withCookie(token)), 200, "origin-ok", "")
		if n := r.originHits.Load() - before; n != 2 {
			t.Errorf("origin got %d requests, want 2", n)
		}
	})

	t.Run("case20 replay, wrong proof, missing and bad parameters", func(t *testing.T) {
		c := parseChallenge(t, r.get(otherIP, "other.test", "/"))
		nonce, hash := solve(c.Challenge.RandomData, c.Rules.Difficulty)
		good := passQuery(c.Challenge.ID, hash, strconv.Itoa(nonce), "")
		// Failed attempts do not consume the challenge.
		r.expectJSONError(r.get(otherIP, "other.test", passTarget(passQuery(c.Challenge.ID, strings.Repeat("0", 64), strconv.Itoa(nonce), ""))), 403, "hash mismatch")
		noNonce := passQuery(c.Challenge.ID, hash, "", "")
		noNonce.Del("nonce")
		r.expectJSONError(r.get(otherIP, "other.test", passTarget(noNonce)), 400, "missing parameters")
		r.expectJSONError(r.get(otherIP, "other.test", passTarget(passQuery(c.Challenge.ID, hash, "abc", ""))), 400, "invalid nonce")
		r.expectJSONError(r.get(otherIP, "other.test", passTarget(passQuery("", hash, "1", ""))), 400, "missing parameters")
		r.expectJSONError(r.get(otherIP, "other.test", passTarget(passQuery(strings.Repeat("f", 32), hash, "1", ""))), 410, "challenge expired or not found")
		got := r.get(otherIP, "other.test", passTarget(good))
		r.expect(got, 200, `{"ok":true}`+"\n", "application/json")
		sessionFrom(t, got, 600)
		// Single use.
		r.expectJSONError(r.get(otherIP, "other.test", passTarget(good)), 410, "challenge expired or not found")
	})

	t.Run("difficulty honoured", func(t *testing.T) {
		c := parseChallenge(t, r.get(otherIP, "other.test", "/"))
		// A proof with one zero too few.
		for n := 0; ; n++ {
			h := hashOf(c.Challenge.RandomData, n)
			if strings.HasPrefix(h, "000") && !strings.HasPrefix(h, "0000") {
				r.expectJSONError(r.get(otherIP, "other.test", passTarget(passQuery(c.Challenge.ID, h, strconv.Itoa(n), ""))), 403, "insufficient difficulty")
				break
			}
		}
		sc := parseChallenge(t, r.get(otherIP, "short.test", "/"))
		if sc.Rules.Difficulty != 2 {
			t.Errorf("short.test difficulty %d, want 2", sc.Rules.Difficulty)
		}
	})

	t.Run("tampered, foreign and unknown cookies are challenged", func(t *testing.T) {
		token := solved.token
		if token == "" {
			t.Skip("case19 failed")
		}
		flip := map[byte]byte{'0': '1'}
		tampered := []byte(token)
		if c, ok := flip[tampered[0]]; ok {
			tampered[0] = c
		} else {
			tampered[0] = '0'
		}
		before := r.originHits.Load()
		for _, v := range []string{string(tampered), token[:39], token + "0", strings.ToUpper(token), strings.Repeat("0", 40), "demo.test:" + token} {
			got := r.request(otherIP, http.MethodGet, "demo.test", "/", withCookie(v))
			r.expectChallengePage(got)
			if sc := got.header.Get("Set-Cookie"); sc != "" {
				t.Errorf("cookie %q: Set-Cookie %q", v, sc)
			}
		}
		// case21: sessions are per host.
		r.expectChallengePage(r.request(otherIP, http.MethodGet, "other.test", "/", withCookie(token)))
		if n := r.originHits.Load() - before; n != 0 {
			t.Errorf("origin got %d requests", n)
		}
	})

	t.Run("expired session and expired challenge", func(t *testing.T) {
		token := solveOn(t, r, "short.test", "/")
		r.expect(r.request(otherIP, http.MethodGet, "short.test", "/", withCookie(token)), 200, "origin-ok", "")
		c := parseChallenge(t, r.get(otherIP, "short.test", "/"))
		nonce, hash := solve(c.Challenge.RandomData, c.Rules.Difficulty)
		time.Sleep(shortTTL*time.Second + 500*time.Millisecond)
		r.expectChallengePage(r.request(otherIP, http.MethodGet, "short.test", "/", withCookie(token)))
		r.expectJSONError(r.get(otherIP, "short.test", passTarget(passQuery(c.Challenge.ID, hash, strconv.Itoa(nonce), ""))), 410, "challenge expired or not found")
	})

	t.Run("redirects stay on the host", func(t *testing.T) {
		for redir, want := range map[string]string{
			"http://demo.test/page?a=1":       "http://demo.test/page?a=1",
			"https://DEMO.test:8443/p#frag":   "https://DEMO.test:8443/p#frag",
			"/relative?x=1":                   "/relative?x=1",
			"http://evil.test/":               "/",
			"https://demo.test.evil.test/x":   "/",
			"http://demo.test@evil.test/":     "/",
			"http://evil.test\\@demo.test/":   "/",
			"//evil.test/x":                   "/",
			"/\\evil.test/x":                  "/",
			"javascript:alert(1)":             "/",
			"ftp://demo.test/x":               "/",
			"http://demo.test:80x/":           "/",
			"http://demo.test/a\r\nX-Evil: 1": "/",
			"evil.test":                       "/",
		} {
			c := parseChallenge(t, r.get(otherIP, "demo.test", "/"))
			nonce, hash := solve(c.Challenge.RandomData, c.Rules.Difficulty)
			got := r.get(otherIP, "demo.test", passTarget(passQuery(c.Challenge.ID, hash, strconv.Itoa(nonce), redir)))
			if got.status != 302 || got.header.Get("Location") != want || got.header.Get("X-Evil") != "" {
				t.Errorf("redir %q: %d Location %q, want 302 %q", redir, got.status, got.header.Get("Location"), want)
			}
		}
	})

	t.Run("case22 static assets", func(t *testing.T) {
		before := r.originHits.Load()
		for path, ct := range map[string]string{
			"js/main.mjs":                   "application/javascript",
			"js/worker/sha256-webcrypto.js": "application/javascript",
			"js/worker/sha256-purejs.js":    "application/javascript",
			"css/pow.css":                   "text/css",
			"locales/en.json":               "application/json",
			"locales/zh-CN.json":            "application/json",
		} {
			got := r.get(otherIP, "demo.test", powStatic+path+"?cacheBuster=openflare-pow")
			want, err := os.ReadFile(filepath.Join(r.luaDir, "pow", "static", path))
			if err != nil {
				t.Fatal(err)
			}
			r.expect(got, 200, string(want), ct)
		}
		if got := r.get(otherIP, "demo.test", powStatic+"nope.txt"); got.status != 404 {
			t.Errorf("missing asset: %d", got.status)
		}
		if n := r.originHits.Load() - before; n != 0 {
			t.Errorf("origin got %d requests", n)
		}
	})

	t.Run("API paths other than the endpoints are 404, not proxied", func(t *testing.T) {
		before := r.originHits.Load()
		if got := r.get(otherIP, "demo.test", powAPI+"other"); got.status != 404 {
			t.Errorf("got %d %q", got.status, got.body)
		}
		if n := r.originHits.Load() - before; n != 0 {
			t.Errorf("origin got %d requests", n)
		}
	})

	t.Run("direct make-challenge", func(t *testing.T) {
		c := parseChallenge(t, r.get(otherIP, "demo.test", powAPI+"make-challenge?host=evil.test"))
		nonce, hash := solve(c.Challenge.RandomData, c.Rules.Difficulty)
		token := sessionFrom(t, r.get(otherIP, "demo.test", passTarget(passQuery(c.Challenge.ID, hash, strconv.Itoa(nonce), ""))), 600)
		// The session is for $host, not for the host argument.
		r.expect(r.request(otherIP, http.MethodGet, "demo.test", "/", withCookie(token)), 418, "after-pow\n", "")
	})

	t.Run("site not resolved", func(t *testing.T) {
		r.expectJSONError(r.get(otherIP, "nosite.test", passTarget(passQuery("x", "y", "1", ""))), 403, "PoW site not resolved; openflare_waf_site is required")
	})
}

// solveOn solves a challenge on host the way the browser does and returns
// the session token.
func solveOn(t *testing.T, r *rig, host, path string) string {
	t.Helper()
	c := parseChallenge(t, r.get(otherIP, host, path))
	nonce, hash := solve(c.Challenge.RandomData, c.Rules.Difficulty)
	got := r.get(otherIP, host, passTarget(passQuery(c.Challenge.ID, hash, strconv.Itoa(nonce), "")))
	r.expect(got, 200, `{"ok":true}`+"\n", "application/json")
	m := powCookie.FindStringSubmatch(got.header.Get("Set-Cookie"))
	if m == nil {
		t.Fatalf("Set-Cookie = %q", got.header.Get("Set-Cookie"))
	}
	return m[1]
}

// DATAPLANE 10, the PoW rows.
func TestPowFailClosed(t *testing.T) {
	r := newPowRig(t)

	t.Run("config hand-off missing at make-challenge", func(t *testing.T) {
		// A session lets the pow node continue, so nothing hands a config over.
		token := solveOn(t, r, "other.test", "/")
		r.expect(r.request(otherIP, http.MethodGet, "other.test", powAPI+"make-challenge", withCookie(token)), 403, "PoW graph node was not evaluated for this request\n", "")
		r.expect(r.get(otherIP, "nosite.test", powAPI+"make-challenge?openflare_pow_config_key=_request_config:nope"), 403, "PoW graph node was not evaluated for this request\n", "")
	})

	t.Run("challenge evicted", func(t *testing.T) {
		c := parseChallenge(t, r.get(otherIP, "other.test", "/"))
		nonce, hash := solve(c.Challenge.RandomData, c.Rules.Difficulty)
		r.expect(r.get(otherIP, "lua.test", "/drop-challenge?id="+c.Challenge.ID), 200, "ok", "")
		r.expectJSONError(r.get(otherIP, "other.test", passTarget(passQuery(c.Challenge.ID, hash, strconv.Itoa(nonce), ""))), 410, "challenge expired or not found")
	})
}

// Without SHA256 in libcrypto every pow node fails closed and
// pass-challenge answers 500: nothing lets the request through.
func TestPowWithoutLibcrypto(t *testing.T) {
	r := newRig(t)
	r.writeWAF(obj{
		"rule_groups": []obj{group(2, false, powGraph(powConfig(1, 600, 300)))},
		"bindings":    []obj{binding("demo", 2)},
	})
	// The rewrite phase runs before the access phase of every request:
	// the lookup is told to find nothing.
	server := strings.Replace(r.powServer("demo.test", "demo"), "listen 80;",
		`listen 80;
        rewrite_by_lua_block { require("pow.runtime")._use_crypto_libs({ "libopenflare-absent.so.0" }, false) }`, 1)
	r.start(server)
	before := r.originHits.Load()
	for _, path := range []string{"/", "/page?a=1", powAPI + "make-challenge", powStatic + "css/pow.css"} {
		r.expectFailClosed(r.get(otherIP, "demo.test", path))
	}
	if n := r.originHits.Load() - before; n != 0 {
		t.Errorf("origin got %d requests", n)
	}
	if r.countLines("libcrypto SHA256 not available") == 0 {
		t.Errorf("no clear error in the log:\n%s", r.nginx.ErrorLog())
	}
}

// The page in a real browser: headless Chromium, driven over the DevTools
// protocol, loads a guarded URL over plain http (not a secure context, so
// the pure-JS worker runs), solves a difficulty-2 challenge and lands on
// the origin. A screenshot of the landed origin page is kept as a test
// artefact (go test -artifacts; else a temp dir).
func TestPowBrowser(t *testing.T) {
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("no chromium on PATH (Debian package chromium, installed by make deps): the headless-browser PoW test cannot run")
	}
	r := newRig(t)
	r.writeWAF(obj{
		"rule_groups": []obj{group(2, false, powGraph(powConfig(2, 600, 300)))},
		"bindings":    []obj{binding("demo", 2)},
	})
	r.start(r.powServer("demo.test", "demo"))

	page := startChromium(t, bin, "--host-resolver-rules=MAP demo.test 127.0.0.1")
	page.call("Page.navigate", obj{"url": "http://demo.test/guarded"})
	body := ""
	testsupport.WaitFor(t, 20*time.Second, "the browser to land on the origin", func() bool {
		var res struct {
			Result struct {
				Value string `json:"value"`
			} `json:"result"`
		}
		// Fails while a navigation replaces the document: not there yet.
		if json.Unmarshal(page.call("Runtime.evaluate", obj{"expression": "location.href + ' ' + (document.body ? document.body.innerText.trim() : '')", "returnByValue": true}), &res) != nil {
			return false
		}
		body = res.Result.Value
		// The page first asked for, now with the origin's answer.
		return body == "http://demo.test/guarded origin-ok"
	})
	// Only a request with a valid session reaches the origin.
	if r.originHits.Load() == 0 {
		t.Fatalf("the page shows %q but the origin got no request", body)
	}
	var shot struct {
		Data []byte `json:"data"`
	}
	if err := json.Unmarshal(page.call("Page.captureScreenshot", obj{"format": "png"}), &shot); err != nil || len(shot.Data) == 0 {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.ArtifactDir(), "pow-landed.png")
	if err := os.WriteFile(path, shot.Data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the landed origin page: %s", path)
}

// devtools is a DevTools protocol session with one page of a headless
// Chromium.
type devtools struct {
	t    *testing.T
	ws   *websocket.Conn
	next int
}

// startChromium starts headless Chromium with a fresh profile and returns
// a session on its blank first page. The network flags keep it off the
// network, which is closed here: it would otherwise try Google's hosts at
// every start.
func startChromium(t *testing.T, bin string, extra ...string) *devtools {
	t.Helper()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--window-size=800,450",
		"--remote-debugging-port=0", "--remote-allow-origins=http://127.0.0.1"}, extra...)
	cmd := exec.Command(bin, append(args, "about:blank")...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// Chromium names its DevTools endpoint on stderr once it listens.
	endpoint := make(chan string, 1)
	go func() {
		// Read to the end: Chromium blocks on a full pipe.
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "DevTools listening on "); ok {
				endpoint <- rest
			}
		}
		close(endpoint)
	}()
	var browserWS string
	select {
	case browserWS = <-endpoint:
	case <-time.After(30 * time.Second):
	}
	if browserWS == "" {
		t.Fatalf("chromium did not open DevTools")
	}
	u, err := url.Parse(browserWS)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + u.Host + "/json/list")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var targets []struct {
		Type, WebSocketDebuggerURL string
	}
	if err := json.NewDecoder(resp.Body).Decode(&targets); err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		if tg.Type == "page" {
			ws, err := websocket.Dial(tg.WebSocketDebuggerURL, "", "http://127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ws.Close() })
			return &devtools{t: t, ws: ws}
		}
	}
	t.Fatalf("chromium has no page: %+v", targets)
	return nil
}

// call sends one command and returns its result, skipping events; a
// protocol error comes back as nil.
func (d *devtools) call(method string, params obj) json.RawMessage {
	d.t.Helper()
	d.next++
	if err := websocket.JSON.Send(d.ws, obj{"id": d.next, "method": method, "params": params}); err != nil {
		d.t.Fatalf("%s: %v", method, err)
	}
	d.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		var msg struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := websocket.JSON.Receive(d.ws, &msg); err != nil {
			d.t.Fatalf("%s: %v", method, err)
		}
		if msg.ID == d.next {
			if msg.Error != nil {
				return nil
			}
			return msg.Result
		}
	}
}

// The pure-JS worker (the fallback for pages that are not a secure
// context) against the DATAPLANE 6.10 vectors and Go's SHA-256, run in
// Node as a stand-in for the browser's worker scope.
func TestPowPureJSWorker(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on PATH: the pure-JS SHA-256 worker cannot be run outside a browser")
	}
	static := filepath.Join("lua", "pow", "static")
	script := `
const results = [];
global.self = { postMessage: (m) => { if (m.hash) results.push(m); } };
require("vm").runInThisContext(require("fs").readFileSync(process.argv[1], "utf8"));
for (const [data, difficulty, nonce] of JSON.parse(process.argv[2])) {
  self.onmessage({ data: { data, difficulty, nonce, threads: 1 } });
}
console.log(JSON.stringify(results));
`
	long := strings.Repeat("x", 119)
	cases := [][3]any{{vectorData, 4, 0}, {vectorData, 0, 39}, {vectorData, 3, 0}, {"", 0, 0}, {long, 0, 0}, {strings.Repeat("é", 40), 0, 7}}
	in, _ := json.Marshal(cases)
	out, err := exec.Command(node, "-e", script, filepath.Join(static, "js", "worker", "sha256-purejs.js"), string(in)).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got []struct {
		Hash  string `json:"hash"`
		Nonce int    `json:"nonce"`
	}
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(cases) {
		t.Fatalf("node output %q: %v", out, err)
	}
	for i, c := range cases {
		data, difficulty, start := c[0].(string), c[1].(int), c[2].(int)
		nonce := start
		for !strings.HasPrefix(hashOf(data, nonce), strings.Repeat("0", difficulty)) {
			nonce++
		}
		if got[i].Nonce != nonce || got[i].Hash != hashOf(data, nonce) {
			t.Errorf("case %d: got nonce %d hash %s, want %d %s", i, got[i].Nonce, got[i].Hash, nonce, hashOf(data, nonce))
		}
	}
	if got[0].Nonce != 11198 || got[0].Hash != "00000d59673af30b8a769d2bbfd70eadc282b738e9734cb2d52f8f116e057a89" {
		t.Errorf("difficulty-4 vector: %+v", got[0])
	}
	for _, f := range []string{"js/main.mjs", "js/worker/sha256-webcrypto.js"} {
		if out, err := exec.Command(node, "--check", filepath.Join(static, f)).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", f, err, out)
		}
	}
}

// DATAPLANE 2.7: the runtime-only whitelist and blacklist of hand-written
// configs ("paths" as a case-insensitive glob).
func TestPowLists(t *testing.T) {
	r := newRig(t)
	white := powConfig(4, 600, 300)
	white["whitelist"] = obj{
		"ips":          []string{"127.0.0.21"},
		"ip_cidrs":     []string{"127.0.1.0/24"},
		"paths":        []string{"/Public/*.css", "/health"},
		"path_regexes": []string{"^/api/v[0-9]+/"},
		"user_agents":  []string{"HealthChecker/"},
	}
	black := powConfig(4, 600, 300)
	black["blacklist"] = obj{"paths": []string{"/admin*"}, "user_agents": []string{""}}
	r.writeWAF(obj{
		"rule_groups": []obj{group(2, false, powGraph(white)), group(3, false, powGraph(black))},
		"bindings":    []obj{binding("white", 2), binding("black", 3)},
	})
	r.start(r.powServer("white.test", "white") + r.powServer("black.test", "black"))
	for _, c := range []struct {
		from, host, path, ua string
		origin               bool
	}{
		{otherIP, "white.test", "/", "", false},
		{"127.0.0.21", "white.test", "/", "", true},
		{"127.0.1.9", "white.test", "/", "", true},
		{"127.0.2.9", "white.test", "/", "", false},
		{otherIP, "white.test", "/public/a/b.CSS", "", true},
		{otherIP, "white.test", "/public/a.css.map", "", false},
		{otherIP, "white.test", "/health", "", true},
		{otherIP, "white.test", "/healthz", "", false},
		{otherIP, "white.test", "/api/v2/x", "", true},
		{otherIP, "white.test", "/x/api/v2/", "", false},
		{otherIP, "white.test", "/", "Mozilla HealthChecker/1.0", true},
		{otherIP, "white.test", "/", "healthchecker/1.0", false},
		{otherIP, "black.test", "/", "", true},
		{otherIP, "black.test", "/ADMIN/users", "", false},
		{otherIP, "black.test", "/administrator", "", false},
	} {
		h := http.Header{}
		if c.ua != "" {
			h.Set("User-Agent", c.ua)
		}
		got := r.request(c.from, http.MethodGet, c.host, c.path, h)
		if c.origin {
			r.expect(got, 200, "origin-ok", "")
		} else if !strings.Contains(got.body, `id="anubis_challenge"`) {
			t.Errorf("%s %s%s UA %q: got %d %q, want the challenge page", c.from, c.host, c.path, c.ua, got.status, got.body)
		}
	}
}
