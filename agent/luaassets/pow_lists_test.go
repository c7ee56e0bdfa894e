package luaassets

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"openflare/testing/benchkit"
	"openflare/testing/testsupport"
)

// hostileGlob is a whitelist glob that a translation into a Lua pattern
// ("^/.*a.*a….*b$") makes backtrack over every placement of its seven a's:
// about 5 s of worker CPU for hostileURI, growing as the seventh power of
// the URI's length.
const hostileGlob = "/*a*a*a*a*a*a*a*b"

// hostileURI is 50 bytes of a's, which hostileGlob does not match.
var hostileURI = "/" + strings.Repeat("a", 49)

// catastrophicRegex backtracks exponentially on a run of a's followed by
// anything else: PCRE gives up at its match limit.
const catastrophicRegex = `^/(a+)+$`

// The caps of pow/runtime.lua, restated: a change there is a change of
// behaviour these tests should notice.
const (
	maxListEntries = 32
	maxEntryBytes  = 1024
)

// listsProbe is lua.test: POST [{paths, uri}, ...] answers [whitelisted, ...],
// each paths list compiled as a pow whitelist and matched against uri.
const listsProbe = `
    server {
        listen 80;
        server_name lua.test;
        client_body_buffer_size 1m;
        client_max_body_size 1m;
        location = /paths {
            content_by_lua_block {
                local cjson = require("cjson.safe")
                local pow = require("pow.runtime")
                ngx.req.read_body()
                local out = {}
                for i, c in ipairs(cjson.decode(ngx.req.get_body_data())) do
                    out[i] = pow.listed(pow.compile({ whitelist = { paths = c.paths } }), { remote = "", uri = c.uri, ua = "" })
                end
                ngx.print(cjson.encode(out))
            }
        }
    }
`

type globCase struct {
	Paths []string `json:"paths"`
	URI   string   `json:"uri"`
	want  bool
}

// globOracle is the documented meaning of a "paths" glob, built on Go's
// regexp: a case-insensitive full match in which only "*" is special and
// matches any run of bytes.
func globOracle(pattern, s string) bool {
	if pattern == "" {
		return false
	}
	pieces := strings.Split(strings.ToLower(pattern), "*")
	for i, p := range pieces {
		pieces[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`(?s)^` + strings.Join(pieces, ".*") + `$`).MatchString(strings.ToLower(s))
}

// DATAPLANE 2.7 "paths": the glob matcher inside nginx, on cases written
// out and on random patterns and URIs checked against globOracle.
func TestPowGlobSemantics(t *testing.T) {
	r := newRig(t)
	r.start(listsProbe)
	one := func(pattern, uri string, want bool) globCase {
		return globCase{Paths: []string{pattern}, URI: uri, want: want}
	}
	cases := []globCase{
		// prefix*
		one("/static/*", "/static/app.js", true),
		one("/static/*", "/static/", true),
		one("/static/*", "/static/a/b/c.css", true),
		one("/static/*", "/static", false),
		one("/static/*", "/x/static/a", false),
		// *suffix
		one("*.css", "/a/b.css", true),
		one("*.css", ".css", true),
		one("*.css", "/a.css.map", false),
		one("*.css", "/acss", false),
		// a*b*c: the pieces in order, each in its own part of the URI.
		one("/a*b*c", "/abc", true),
		one("/a*b*c", "/a-b-c", true),
		one("/a*b*c", "/axxbyyc", true),
		one("/a*b*c", "/abcbc", true),
		one("/a*b*c", "/acb", false),
		one("/a*b*c", "/ab", false),
		one("/a*b*c", "/abcd", false),
		one("/ab*ba", "/aba", false),
		one("/ab*ba", "/abba", true),
		one("/*ab*abc", "/abc", false),
		one("/*ab*abc", "/ababc", true),
		one("/*x*y*", "/yx", false),
		// ** is *, and * alone matches anything, the empty string too.
		one("**", "", true),
		one("**", "/anything/at/all", true),
		one("/a**b", "/ab", true),
		one("/a**b", "/a/x/b", true),
		one("*", "", true),
		// Without a star the whole URI.
		one("/health", "/health", true),
		one("/health", "/healthz", false),
		one("/health", "/x/health", false),
		// An empty pattern is no entry: it matches nothing, not even "".
		one("", "", false),
		one("", "/", false),
		{Paths: []string{"", "/x"}, URI: "/x", want: true},
		// Case-insensitive on both sides.
		one("/Public/*.CSS", "/public/a.css", true),
		one("/public/*.css", "/PUBLIC/Sub/A.Css", true),
		// Lua pattern magic characters are themselves.
		one("/a%b", "/a%b", true),
		one("/a%b", "/ab", false),
		one("/%d*", "/%d9", true),
		one("/%d*", "/9", false),
		one("/%", "/%", true),
		one("/*%*", "/50%off", true),
		one("/a.b", "/a.b", true),
		one("/a.b", "/axb", false),
		one("/[ab]", "/[ab]", true),
		one("/[ab]", "/a", false),
		one("/[^a]*", "/[^a]x", true),
		one("/[^a]*", "/b", false),
		one("/x*]", "/x]", true),
		one("/(x)+", "/(x)+", true),
		one("/(x)+", "/xx", false),
		one("/a-", "/a-", true),
		one("/a-", "/", false),
		one("/a+", "/aa", false),
		one("/a?", "/a?", true),
		one("/a?", "/", false),
		one("^/a$", "^/a$", true),
		one("^/a$", "/a", false),
		one("/a$*", "/a$b", true),
		// Many stars over a long URI.
		one(hostileGlob, hostileURI, false),
		one(hostileGlob, hostileURI+"b", true),
		one(hostileGlob, "/"+strings.Repeat("ab", 3)+"b", false),
	}
	// The cases written out hold for the oracle too.
	for _, c := range cases {
		want := false
		for _, p := range c.Paths {
			want = want || globOracle(p, c.URI)
		}
		if want != c.want {
			t.Fatalf("paths %q, uri %q: the oracle says %v", c.Paths, c.URI, want)
		}
	}
	// Small alphabets make matches common and put magic characters and
	// both cases everywhere.
	rnd := rand.New(rand.NewPCG(7, 2))
	pick := func(alphabet string, max int) string {
		b := make([]byte, rnd.IntN(max+1))
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		return string(b)
	}
	for range 3000 {
		p, s := pick("aAb**%./-", 8), pick("aAbB%./-", 10)
		cases = append(cases, one(p, s, globOracle(p, s)))
	}

	body, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	resp := send(t, otherIP, http.MethodPost, "http://127.0.0.1/paths", "lua.test", nil, bytes.NewReader(body))
	var got []bool
	if err := json.Unmarshal([]byte(resp.body), &got); err != nil || len(got) != len(cases) {
		t.Fatalf("probe answered %d %q (%v)", resp.status, resp.body, err)
	}
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("paths %q, uri %q: whitelisted = %v, want %v", c.Paths, c.URI, got[i], c.want)
		}
	}
}

// expectListed checks that a request reached the origin (listed) or got
// the challenge page.
func (r *rig) expectListed(host, uri string, listed bool) {
	r.t.Helper()
	got := r.get(otherIP, host, uri)
	if listed {
		if got.status != 200 || got.body != "origin-ok" {
			r.t.Errorf("%s%.60s: got %d %.80q, want the origin", host, uri, got.status, got.body)
		}
	} else if got.status != 200 || !strings.Contains(got.body, `id="anubis_challenge"`) {
		r.t.Errorf("%s%.60s: got %d %.80q, want the challenge page", host, uri, got.status, got.body)
	}
}

// A whitelist holding hostileGlob answers at once, challenging what it does
// not match. No timing is asserted: the rig's client gives up after 10 s,
// and a backtracking matcher needs about 5 s for hostileURI and, at the
// seventh power of the length, about a day for the 200-byte URI.
func TestPowHostileGlob(t *testing.T) {
	r := newRig(t)
	white := powConfig(4, 600, 300)
	white["whitelist"] = obj{"paths": []string{hostileGlob}}
	r.writeWAF(obj{
		"rule_groups": []obj{group(2, false, powGraph(white))},
		"bindings":    []obj{binding("hostile", 2)},
	})
	r.start(r.powServer("hostile.test", "hostile"))
	for _, c := range []struct {
		uri    string
		listed bool
	}{
		{hostileURI, false},
		{"/" + strings.Repeat("a", 199), false},
		{"/" + strings.Repeat("a", 6) + "b", false},
		{hostileURI + "b", true},
		{strings.ToUpper(hostileURI) + "B", true},
		{"/" + strings.Repeat("ab", 100), true},
	} {
		r.expectListed("hostile.test", c.uri, c.listed)
	}
}

// The caps on server-sent lists: an entry over maxEntryBytes, the entries
// of a kind after the first maxListEntries and a path regex PCRE cannot
// compile are left out, each worker saying so once when it loads the rules;
// a path regex that gives up at the match limit is no hit in a whitelist
// and a hit in a blacklist, so it never spares a request the challenge.
func TestPowListCaps(t *testing.T) {
	r := newRig(t)
	longGlob := "/long/" + strings.Repeat("x", maxEntryBytes) + "*"
	longRegex := "^/longre" + strings.Repeat("x?", maxEntryBytes/2)
	paths := []string{longGlob}
	for i := 1; i <= maxListEntries+1; i++ {
		paths = append(paths, fmt.Sprintf("/p%d", i))
	}
	white := powConfig(4, 600, 300)
	white["whitelist"] = obj{
		"paths":        paths,
		"path_regexes": []string{"(", catastrophicRegex, "^/re/[0-9]+$", longRegex},
	}
	blackLong := powConfig(4, 600, 300)
	blackLong["blacklist"] = obj{"paths": []string{longGlob}}
	blackRegex := powConfig(4, 600, 300)
	blackRegex["blacklist"] = obj{"path_regexes": []string{catastrophicRegex}}
	r.writeWAF(obj{
		"rule_groups": []obj{group(5, false, powGraph(white)), group(6, false, powGraph(blackLong)), group(7, false, powGraph(blackRegex))},
		"bindings":    []obj{binding("white", 5), binding("blong", 6), binding("bregex", 7)},
	})
	r.start(r.powServer("white.test", "white") + r.powServer("blong.test", "blong") + r.powServer("bregex.test", "bregex"))
	workers := len(r.nginx.WorkerPIDs())

	const whiteWarn, blongWarn = "openflare pow: rule group 5 node pow: ignored ", "openflare pow: rule group 6 node pow: ignored "
	testsupport.WaitFor(t, 5*time.Second, "every worker's warnings", func() bool {
		return r.countLines(whiteWarn) == workers && r.countLines(blongWarn) == workers
	})
	// paths[1] is left out, so /p1 to /p32 are paths[2] to paths[33].
	for _, want := range []string{
		whiteWarn + "whitelist.paths[1]: over the 1024-byte cap; whitelist.paths[34] and later: over the 32-entry cap; " +
			"whitelist.path_regexes[1]: not a valid PCRE (",
		"); whitelist.path_regexes[4]: over the 1024-byte cap, context: init_worker_by_lua",
		blongWarn + "blacklist.paths[1]: over the 1024-byte cap, context: init_worker_by_lua",
	} {
		if !strings.Contains(r.nginx.ErrorLog(), want) {
			t.Errorf("error log lacks %q:\n%s", want, r.nginx.ErrorLog())
		}
	}

	const regexGaveUp = ".path_regexes entry ^/(a+)+$ failed on a request"
	for _, c := range []struct {
		host, uri string
		listed    bool
	}{
		{"white.test", "/p1", true},
		{"white.test", fmt.Sprintf("/p%d", maxListEntries), true},
		{"white.test", fmt.Sprintf("/p%d", maxListEntries+1), false},
		{"white.test", "/long/" + strings.Repeat("x", maxEntryBytes) + "/y", false},
		{"white.test", "/longre", false},
		{"white.test", "/re/42", true},
		{"white.test", "/re/x", false},
		{"white.test", "/aaaa", true},
		{"white.test", hostileURI + "!", false},
		{"white.test", hostileURI + "!", false},
		{"white.test", hostileURI + "!", false},
		// A blacklist whose only entry is left out is empty: no request
		// is spared.
		{"blong.test", "/", false},
		{"blong.test", "/x", false},
		{"bregex.test", "/b", true},
		{"bregex.test", "/aaaa", false},
		{"bregex.test", hostileURI + "!", false},
		{"bregex.test", hostileURI + "!", false},
		{"bregex.test", hostileURI + "!", false},
	} {
		r.expectListed(c.host, c.uri, c.listed)
	}
	if n := r.countLines(whiteWarn) + r.countLines(blongWarn); n != 2*workers {
		t.Errorf("%d load warnings after the requests, want %d: they are not per request", n, 2*workers)
	}
	for _, where := range []string{"rule group 5 node pow: whitelist", "rule group 7 node pow: blacklist"} {
		if n := r.countLines(where + regexGaveUp); n < 1 || n > workers {
			t.Errorf("%d %q lines, want one per worker that saw it at most:\n%s", n, where+regexGaveUp, r.nginx.ErrorLog())
		}
	}
}

// BenchmarkPowGlobHostile reports the nginx worker CPU (user+system time of
// every worker over the run) one request costs on a pow node whose
// whitelist holds hostileGlob, for hostileURI; next to it, the same node
// without lists and with maxListEntries catastrophic path regexes. Every
// request gets the challenge page, which each figure includes.
func BenchmarkPowGlobHostile(b *testing.B) {
	r := newRig(b)
	glob := powConfig(4, 600, 300)
	glob["whitelist"] = obj{"paths": []string{hostileGlob}}
	regexes := make([]string, maxListEntries)
	for i := range regexes {
		regexes[i] = catastrophicRegex
	}
	regex := powConfig(4, 600, 300)
	regex["whitelist"] = obj{"path_regexes": regexes}
	r.writeWAF(obj{
		"rule_groups": []obj{group(1, false, powGraph(powConfig(4, 600, 300))), group(2, false, powGraph(glob)), group(3, false, powGraph(regex))},
		"bindings":    []obj{binding("plain", 1), binding("glob", 2), binding("regex", 3)},
	})
	r.start(r.powServer("plain.test", "plain") + r.powServer("glob.test", "glob") + r.powServer("regex.test", "regex"))
	workersCPU := func() time.Duration {
		var d time.Duration
		for _, pid := range r.nginx.WorkerPIDs() {
			d += benchkit.CPUTime(pid)
		}
		return d
	}
	for _, c := range []struct{ name, host, uri string }{
		{"no-lists", "plain.test", hostileURI},
		{"hostile-glob", "glob.test", hostileURI},
		{fmt.Sprintf("%d-catastrophic-regexes", maxListEntries), "regex.test", hostileURI + "!"},
	} {
		b.Run(c.name, func(b *testing.B) {
			before := workersCPU()
			for b.Loop() {
				got := send(b, otherIP, http.MethodGet, "http://127.0.0.1"+c.uri, c.host, nil, nil)
				if got.status != 200 || !strings.Contains(got.body, `id="anubis_challenge"`) {
					b.Fatalf("got %d %.80q, want the challenge page", got.status, got.body)
				}
			}
			b.ReportMetric(float64(workersCPU()-before)/float64(time.Millisecond)/float64(b.N), "worker-ms/req")
		})
	}
}
