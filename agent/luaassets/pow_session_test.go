package luaassets

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"openflare/testing/testsupport"
)

// The issuing limit of pow/challenge.lua, restated: a change there is a
// change of behaviour these tests should notice.
const challengesPerWindow = 60

// solveFrom solves a challenge on host from the client address from with
// the headers h, the way the browser does, and returns the session token
// and the Max-Age it came with.
func solveFrom(t *testing.T, r *rig, from, host string, h http.Header) (string, int) {
	t.Helper()
	c := parseChallenge(t, r.request(from, http.MethodGet, host, "/", h))
	nonce, hash := solve(c.Challenge.RandomData, c.Rules.Difficulty)
	got := r.request(from, http.MethodGet, host, passTarget(passQuery(c.Challenge.ID, hash, strconv.Itoa(nonce), "")), h)
	r.expect(got, 200, `{"ok":true}`+"\n", "application/json")
	m := powCookie.FindStringSubmatch(got.header.Get("Set-Cookie"))
	if m == nil {
		t.Fatalf("Set-Cookie = %q", got.header.Get("Set-Cookie"))
	}
	maxAge, _ := strconv.Atoi(m[2])
	return m[1], maxAge
}

// challengedAt expects the challenge page and returns the difficulty it asks for.
func challengedAt(t *testing.T, got reply) int {
	t.Helper()
	return parseChallenge(t, got).Rules.Difficulty
}

func cookieAndUA(token, ua string) http.Header {
	h := withCookie(token)
	h.Set("User-Agent", ua)
	return h
}

// A session passes the pow nodes at or below the difficulty it was earned
// at, on its host, and is challenged again by a harder one.
func TestPowSessionDifficulty(t *testing.T) {
	// Which pow node a request meets depends on its address; the three
	// are in different /24s, and the nodes do not bind sessions.
	const easyIP, midIP, hardIP = "127.0.1.21", "127.0.2.21", "127.0.3.21"
	r := newRig(t)
	powNode := func(difficulty int) obj {
		return obj{"type": "pow", "config": powConfig(difficulty, 600, 300), "next": obj{"next": "allow"}}
	}
	r.writeWAF(obj{
		"rule_groups": []obj{group(2, false, graph(obj{
			"start": startNode("hard?"),
			"hard?": branchNode("ip_match", obj{"ips": []string{hardIP}}, "pow16", "mid?"),
			"mid?":  branchNode("ip_match", obj{"ips": []string{midIP}}, "pow2", "pow1"),
			"pow16": powNode(16),
			"pow2":  powNode(2),
			"pow1":  powNode(1),
			"allow": allowNode(),
		}))},
		"bindings": []obj{binding("demo", 2)},
	})
	r.start(r.powServer("demo.test", "demo"))

	easy, _ := solveFrom(t, r, easyIP, "demo.test", nil)
	r.expect(r.request(easyIP, http.MethodGet, "demo.test", "/", withCookie(easy)), 200, "origin-ok", "")
	before := r.originHits.Load()
	if d := challengedAt(t, r.request(hardIP, http.MethodGet, "demo.test", "/", withCookie(easy))); d != 16 {
		t.Errorf("difficulty-1 session on the difficulty-16 node: challenged at %d, want 16", d)
	}
	if d := challengedAt(t, r.request(midIP, http.MethodGet, "demo.test", "/", withCookie(easy))); d != 2 {
		t.Errorf("difficulty-1 session on the difficulty-2 node: challenged at %d, want 2", d)
	}
	if n := r.originHits.Load() - before; n != 0 {
		t.Errorf("origin got %d requests from a session below the node's difficulty", n)
	}

	mid, _ := solveFrom(t, r, midIP, "demo.test", nil)
	r.expect(r.request(midIP, http.MethodGet, "demo.test", "/", withCookie(mid)), 200, "origin-ok", "")
	r.expect(r.request(easyIP, http.MethodGet, "demo.test", "/", withCookie(mid)), 200, "origin-ok", "")
	if d := challengedAt(t, r.request(hardIP, http.MethodGet, "demo.test", "/", withCookie(mid))); d != 16 {
		t.Errorf("difficulty-2 session on the difficulty-16 node: challenged at %d, want 16", d)
	}
	// A refusal leaves the session to its owner.
	r.expect(r.request(easyIP, http.MethodGet, "demo.test", "/", withCookie(easy)), 200, "origin-ok", "")
}

// A session ends at its maximum lifetime however often it is renewed, and
// no cookie it gets outlives that maximum.
func TestPowSessionLifetime(t *testing.T) {
	r := newRig(t)
	capped := powConfig(1, 600, 300)
	capped["session_max_lifetime"] = shortTTL
	r.writeWAF(obj{
		"rule_groups": []obj{group(2, false, powGraph(capped)), group(3, false, powGraph(powConfig(1, 600, 300)))},
		"bindings":    []obj{binding("capped", 2), binding("plain", 3)},
	})
	r.start(r.powServer("capped.test", "capped") + r.powServer("plain.test", "plain"))

	token, maxAge := solveFrom(t, r, otherIP, "capped.test", nil)
	if maxAge != shortTTL {
		t.Errorf("new session's Max-Age = %d, want the maximum lifetime %d", maxAge, shortTTL)
	}
	accepted := 0
	// The session_ttl of 600 s would keep renewing it for the whole test.
	testsupport.WaitFor(t, shortTTL*time.Second+10*time.Second, "the session to reach its maximum lifetime", func() bool {
		got := r.request(otherIP, http.MethodGet, "capped.test", "/", withCookie(token))
		if got.status == 200 && got.body == "origin-ok" {
			accepted++
			m := powCookie.FindStringSubmatch(got.header.Get("Set-Cookie"))
			if m == nil || m[1] != token {
				t.Fatalf("renewal Set-Cookie = %q", got.header.Get("Set-Cookie"))
			}
			if n, _ := strconv.Atoi(m[2]); n > shortTTL {
				t.Fatalf("renewal Max-Age = %d, past the maximum lifetime %d", n, shortTTL)
			}
			return false
		}
		r.expectChallengePage(got)
		return true
	})
	if accepted == 0 {
		t.Error("the session never passed before it ended")
	}

	// Without the key the maximum is a day, far past the session_ttl.
	_, maxAge = solveFrom(t, r, otherIP, "plain.test", nil)
	if maxAge != 600 {
		t.Errorf("session without a configured maximum: Max-Age = %d, want 600", maxAge)
	}
}

// One address asking for challenges over and over, each from a long URI,
// neither pushes another visitor's pending challenge out nor keeps that
// visitor from getting one.
func TestPowChallengeFlood(t *testing.T) {
	const flooderIP, visitorIP = "127.0.0.41", "127.0.0.42"
	r := newRig(t)
	r.writeWAF(obj{
		"rule_groups": []obj{group(2, false, powGraph(powConfig(1, 600, 300)))},
		"bindings":    []obj{binding("demo", 2)},
	})
	// The renderer's default header buffers: a request line of up to 16 KiB.
	r.start("    large_client_header_buffers 4 16k;\n" + r.powServer("demo.test", "demo"))

	pending := parseChallenge(t, r.get(visitorIP, "demo.test", "/page"))

	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(flooderIP)}, Timeout: 5 * time.Second}
	flooder := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}, Timeout: 10 * time.Second}
	defer flooder.CloseIdleConnections()
	long := "/" + strings.Repeat("a", 15000)
	served, refused := 0, 0
	for i := range 800 {
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1%s?%d", long, i), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "demo.test"
		resp, err := flooder.Do(req)
		if err != nil {
			t.Fatalf("flood request %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case resp.StatusCode == 200 && strings.Contains(string(body), `id="anubis_challenge"`):
			served++
		case resp.StatusCode == http.StatusTooManyRequests:
			if resp.Header.Get("Retry-After") == "" {
				t.Fatalf("429 without Retry-After")
			}
			refused++
		default:
			t.Fatalf("flood request %d: %d %.200q", i, resp.StatusCode, body)
		}
		if i < challengesPerWindow && refused > 0 {
			t.Fatalf("flood request %d refused, within the first %d", i, challengesPerWindow)
		}
	}
	if refused == 0 {
		t.Errorf("all %d flood requests got a challenge", served)
	}

	nonce, hash := solve(pending.Challenge.RandomData, pending.Rules.Difficulty)
	got := r.get(visitorIP, "demo.test", passTarget(passQuery(pending.Challenge.ID, hash, strconv.Itoa(nonce), "")))
	r.expect(got, 200, `{"ok":true}`+"\n", "application/json")
	token := sessionFrom(t, got, 600)
	r.expect(r.request(visitorIP, http.MethodGet, "demo.test", "/page", withCookie(token)), 200, "origin-ok", "")
	// The flood spent the flooder's allowance, not the visitor's.
	parseChallenge(t, r.get(visitorIP, "demo.test", "/elsewhere"))
}

// With bind_client a session is good only from the /24 and the
// User-Agent it was earned with; without it, from anywhere.
func TestPowSessionBinding(t *testing.T) {
	const owner, neighbour, stranger = "127.0.0.31", "127.0.0.32", "127.0.1.31"
	r := newRig(t)
	bound := powConfig(1, 600, 300)
	bound["bind_client"] = true
	r.writeWAF(obj{
		"rule_groups": []obj{group(2, false, powGraph(bound)), group(3, false, powGraph(powConfig(1, 600, 300)))},
		"bindings":    []obj{binding("bound", 2), binding("loose", 3)},
	})
	r.start(r.powServer("bound.test", "bound") + r.powServer("loose.test", "loose"))

	ua := http.Header{"User-Agent": {"Browser/1.0"}}
	token, _ := solveFrom(t, r, owner, "bound.test", ua)
	r.expect(r.request(owner, http.MethodGet, "bound.test", "/", cookieAndUA(token, "Browser/1.0")), 200, "origin-ok", "")
	r.expect(r.request(neighbour, http.MethodGet, "bound.test", "/", cookieAndUA(token, "Browser/1.0")), 200, "origin-ok", "")
	before := r.originHits.Load()
	r.expectChallengePage(r.request(stranger, http.MethodGet, "bound.test", "/", cookieAndUA(token, "Browser/1.0")))
	r.expectChallengePage(r.request(owner, http.MethodGet, "bound.test", "/", cookieAndUA(token, "Browser/2.0")))
	r.expectChallengePage(r.request(owner, http.MethodGet, "bound.test", "/", withCookie(token)))
	if n := r.originHits.Load() - before; n != 0 {
		t.Errorf("origin got %d requests with a cookie from elsewhere", n)
	}
	// The refusals did not end the owner's session.
	r.expect(r.request(owner, http.MethodGet, "bound.test", "/", cookieAndUA(token, "Browser/1.0")), 200, "origin-ok", "")

	loose, _ := solveFrom(t, r, owner, "loose.test", ua)
	r.expect(r.request(stranger, http.MethodGet, "loose.test", "/", cookieAndUA(loose, "Other/9")), 200, "origin-ok", "")
}

// Which client addresses share a session binding (the /24 of IPv4, the
// /64 of IPv6, an IPv4-mapped IPv6 address as its IPv4 address) and which
// share an issuing allowance (one IPv4 address, one IPv6 /64).
func TestPowClientNets(t *testing.T) {
	r := newRig(t)
	r.start(`
    server {
        listen 80;
        server_name lua.test;
        location = /net {
            content_by_lua_block {
                local pow = require("pow.runtime")
                ngx.print(pow.client_net(ngx.var.arg_addr, tonumber(ngx.var.arg_bits)))
            }
        }
    }
`)
	netOf := func(addr string, bits int) string {
		t.Helper()
		got := r.get(otherIP, "lua.test", fmt.Sprintf("/net?addr=%s&bits=%d", addr, bits))
		if got.status != 200 {
			t.Fatalf("%s: %d %q", addr, got.status, got.body)
		}
		return got.body
	}
	same := func(bits int, a, b string, want bool) {
		t.Helper()
		if got := netOf(a, bits) == netOf(b, bits); got != want {
			t.Errorf("/%d: %s and %s share: %v, want %v (%q, %q)", bits, a, b, got, want, netOf(a, bits), netOf(b, bits))
		}
	}
	same(24, "192.0.2.1", "192.0.2.254", true)
	same(24, "192.0.2.1", "192.0.3.1", false)
	same(24, "192.0.2.1", "::ffff:192.0.2.9", true)
	same(24, "2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff", true)
	same(24, "2001:db8:1:2::1", "2001:0db8:0001:0002:0:0:0:9", true)
	same(24, "2001:db8:1:2::1", "2001:db8:1:3::1", false)
	same(24, "::ffff:192.0.2.9", "::ffff:192.0.3.9", false)
	same(32, "192.0.2.1", "192.0.2.2", false)
	same(32, "192.0.2.1", "::ffff:192.0.2.1", true)
	same(32, "2001:db8:1:2::1", "2001:db8:1:2::2", true)
	same(32, "2001:db8:1:2::1", "2001:db8:1:3::1", false)
}
