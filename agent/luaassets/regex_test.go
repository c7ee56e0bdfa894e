package luaassets

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// regexProbe answers POST [{p: [patterns], s: [hex subjects]}, ...] with,
// for each case, what waf.regex refused ({refused: {index: why}}) and
// whether the patterns it took match each subject ("1"/"0" per subject).
// Subjects go as hex: JSON strings cannot carry invalid UTF-8.
const regexProbe = `
local cjson = require("cjson.safe")
local regex = require("waf.regex")

ngx.req.read_body()
local out = {}
for i, c in ipairs(assert(cjson.decode(ngx.req.get_body_data()))) do
    local m, refused = regex.compile(c.p)
    local bits = {}
    for j, h in ipairs(c.s) do
        local s = h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)
        bits[j] = regex.match(m, s) and "1" or "0"
    end
    local why = {}
    for k, v in pairs(refused) do
        why[tostring(k)] = v
    end
    out[i] = { refused = why, m = table.concat(bits) }
end
ngx.print(cjson.encode(out))
`

type regexCase struct {
	P []string `json:"p"`
	S []string `json:"s"`
}

type regexResult struct {
	Refused map[string]string `json:"refused"`
	M       string            `json:"m"`
}

func startRegexRig(t *testing.T) *rig {
	r := newRig(t)
	probe := filepath.Join(t.TempDir(), "regex_probe.lua")
	if err := os.WriteFile(probe, []byte(regexProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	r.start(`
    server {
        listen 80;
        server_name lua.test;
        location = /regex {
            client_body_buffer_size 16m;
            client_max_body_size 16m;
            content_by_lua_file ` + probe + `;
        }
    }
`)
	return r
}

// runRegex evaluates cases in one nginx worker, one request per batch.
func (r *rig) runRegex(cases []regexCase) []regexResult {
	r.t.Helper()
	var out []regexResult
	for len(cases) > 0 {
		batch := cases[:min(len(cases), 2000)]
		cases = cases[len(batch):]
		hexed := make([]regexCase, len(batch))
		for i, c := range batch {
			hexed[i].P = c.P
			for _, s := range c.S {
				hexed[i].S = append(hexed[i].S, hex.EncodeToString([]byte(s)))
			}
		}
		body, err := json.Marshal(hexed)
		if err != nil {
			r.t.Fatal(err)
		}
		resp, err := http.Post("http://127.0.0.1/regex", "application/json", bytes.NewReader(body))
		if err != nil {
			r.t.Fatal(err)
		}
		var got []regexResult
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || len(got) != len(batch) {
			r.t.Fatalf("probe: %d results for %d cases: %v (error log: %s)", len(got), len(batch), err, r.nginx.ErrorLog())
		}
		out = append(out, got...)
	}
	return out
}

// goMatch is Go's answer: does any of patterns match s.
func goMatch(patterns []string, s string) bool {
	for _, p := range patterns {
		if regexp.MustCompile(p).MatchString(s) {
			return true
		}
	}
	return false
}

// Hand-picked patterns, each tried on every subject of regexSubjects.
var regexEdgePatterns = []string{
	``, `a`, `a|`, `|a`, `|`, `()`, `(?:)`, `(|a)b`, `a||b`,
	`^`, `$`, `^$`, `^a`, `a$`, `^a$`, `\Aa`, `a\z`, `\A\z`, `^^a$$`, `a^b`, `a$b`, `$a`, `a^`,
	`(?m)^a`, `(?m)a$`, `(?m)^$`, `(?m)^b$`, `(?m)\Ab`, `(?m)b\z`, `(?m:^b)|c`, `a(?m)$|^b`,
	`\b`, `\B`, `\ba`, `a\b`, `\bb\b`, `\Bb\B`, `\b\B`, `^\b`, `\b$`, `(?i)\bk\b`, `\b.\b`, `\B.\B`,
	`.`, `a.b`, `a..b`, `^.$`, `^..$`, `^...$`, `^....$`, `(?s).`, `(?s)a.b`, `a(?s:.)b`, `(?s)^.$`, `[^a]`, `^[^a]$`, `[^\n]`,
	`(?i)a`, `(?i)K`, `(?i)k`, `(?i)s`, `(?i)S`, `(?i)\x{212A}`, `(?i)\x{17F}`, `(?i)[k]`, `(?i)[^k]`, `(?i)[a-z]`, `(?i)[^a-z]`,
	`(?i)\w`, `(?i)\W`, `(?i)[\W]`, `(?i)[^\w]`, `(?i)[[:upper:]]`, `(?i)[[:^lower:]]`, `(?i:a)b`, `(?i)a(?-i)b`, `(?i)中`, `(?i)[丁-中]`, `(?i)ab|C`,
	`[abc]`, `[a-c]`, `[]a]`, `[^]a]`, `[a-]`, `[-a]`, `[a\-z]`, `[\d-z]`, `[[]`, `[\[\]]`, `[\x00-\x{10FFFF}]`, `[^\x00-\x{10FFFF}]`, `[\n]`,
	`[[:alpha:]]`, `[[:^alpha:]]`, `[[:space:]]`, `[[:word:]]+$`, `[[:punct:]]`, `[[:cntrl:]]`, `[[:xdigit:]]{2}`, `[[:digit:][:upper:]]`,
	`\d`, `\D`, `\s`, `\S`, `\w`, `\W`, `[\s]`, `[\S]`, `[^\s]`, `[^\S]`, `\s\S`, `[\d\s]`, `[^\d\s]`, `\v`, `[\v]`, `[[:space:]]`,
	`\.`, `\\`, `\/`, `\x41`, `\x{263a}`, `\x{263A}+`, `\t\n\r\f\v\a`, `\Qa.b\E`, `\Q*\E+`, `\Qab`, `a\Q\E*`, `\0`, `\012`, `\141`, `\_`, `\ `, `\-`, `\{`,
	`\x{FFFD}`, `^\x{FFFD}$`, `\x{FFFD}{2}`, `é`, `^é$`, `[é]`, `[^é]`, `[à-ÿ]`, `☺`, `.☺`, `𝄞`, `^.𝄞`, `[𝄀-𝇿]`, `[^\x00-\x7F]`, `[\x80-\x{10FFFF}]+`,
	`a*`, `a+`, `a?`, `^a*$`, `^a+$`, `^a?$`, `a*?b`, `a+?`, `a??b`, `(a*)*`, `(a*)+b`, `(a|b)*c`, `(a+)+$`, `(a|aa)+$`, `(\b)*a`, `(^)*a`, `($)+`, `(?:a*)*$`,
	`a{0}`, `a{0}b`, `^a{2}$`, `^a{2,}$`, `^a{2,3}$`, `^a{0,2}$`, `a{,2}`, `a{2`, `a{x}`, `^a{01}$`, `{`, `^(ab){2}$`, `^(a|bc){1,3}$`, `^a{3,3}?$`,
	`(?P<n>a)b`, `(?<n>a)b`, `(?P<n_1>a|b)c`, `\x{10FFFF}`, `\x7f`, `\01`, `\101b`, `\0101`, `(?i-m:A$)`, `(?-s).`, `a{2}?b`, `a{2,}?b`, `[\x{263a}-\x{263c}]`, `[a-\x{FF}]`, `\Q\E`, `[[:^space:][:digit:]]`, `[^[:word:]]`, `(?i)[^[:lower:]k]`, `(?U)a+b`, `(?i-s:A.)`, `(?sm-i:^.)`, `(?)a`, `a(?i)*`,
	`python-requests/\d+`, `^curl/[0-9.]+$`, `(?i)(?:scrapy|httpclient|okhttp)/`, `^Mozilla/4\.0 \(compatible; MSIE [1-6]\.`, `(?i)AhrefsBot`, `Go-http-client/[12]\.`,
}

var regexSubjects = []string{
	"", "a", "b", "ab", "ba", "aa", "aaa", "abc", "aab", "abab", "ac", "bc", "c", "xyz", "a b", " a ", "a\nb", "\na", "a\n", "\n", "\n\n", "b\nc", "b\n",
	"A", "AB", "k", "K", "s", "S", "\u212a", "\u017f", "x\u212ay", "İ", "ı", "kelvin", "_a_", "a_b", "a-b", "-", "]", "[", "{", "a{2", "a{,2}", "{", "x{2}{3}",
	"1", "a1", "12", "1a", "\t", "\v", "\f", "\r", " ", "\x00", "\x7f", "a.b", "a\\b", "/", "A", "\u263a", "☺☺", "a☺", "a\u263ab", "é", "aéb", "e\u0301",
	"\xff", "a\xffb", "\xff\xff", "\xc3", "a\xc3", "\xc3\xa9", "\xe2\x98", "\xe2\x98a", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\x80", "\xf0\x9d\x84\x9e", "a\xf0\x9d\x84\x9e", "\xf0\x9d\x84",
	"\ufffd", "\ufffd\ufffd", "中", "丁", "中a", "a.b", "a*b", "a+", "*", "+", "\t\n\r\f\v\a", "\x07",
	"aaaaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaaa!", "abababab", "aaab", "bcbcbc", "abcbc", "x",
	"python-requests/2.31.0", "curl/8.5.0", "curl/8.5.0 x", "Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)", "scrapy/2.0", "OkHttp/4", "ahrefsbot", "Go-http-client/1.1",
}

// regexGen makes random patterns from a small grammar and random subjects
// over an alphabet made to meet them.
type regexGen struct{ r *rand.Rand }

var (
	genLits   = []string{"a", "b", "k", "s", "K", "S", "-", " ", `\n`, `\.`, "é", "☺", "中", `\x{212A}`, `\x{17F}`, `\x{FFFD}`, "_", "1"}
	genSets   = []string{`[ab]`, `[^a]`, `[a-c]`, `[^ab\n]`, `[[:alpha:]]`, `[[:^space:]]`, `\d`, `\w`, `\s`, `\W`, `\S`, `\D`, `.`, `[é-☺]`, `[^\x00-\x7f]`, `[ks]`, `[^k]`, `[\x{100}-\x{10FFFF}]`}
	genEmpty  = []string{`^`, `$`, `\A`, `\z`, `\b`, `\B`}
	genFlags  = []string{"i", "m", "s", "im", "is", "ms", "-i", "i-s", "-m"}
	genPieces = []string{"a", "b", "k", "K", "s", "S", "\u212a", "\u017f", "\n", " ", "_", "1", "-", ".", "é", "☺", "中", "\U0001d11e", "\ufffd",
		"\xff", "\xc3", "\xe2\x98", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\x80", "İ", "ab", "aaa"}
)

func (g regexGen) pick(list []string) string { return list[g.r.IntN(len(list))] }

func (g regexGen) pattern(depth int) string {
	n := 1 + g.r.IntN(3)
	alts := make([]string, 0, n)
	if depth > 0 || g.r.IntN(2) == 0 {
		n = 1
	}
	for range n {
		var b strings.Builder
		for range g.r.IntN(4) + boolInt(g.r.IntN(5) != 0) {
			b.WriteString(g.term(depth))
		}
		alts = append(alts, b.String())
	}
	return strings.Join(alts, "|")
}

func (g regexGen) term(depth int) string {
	var atom string
	switch k := g.r.IntN(20); {
	case k < 7:
		atom = g.pick(genLits)
	case k < 12:
		atom = g.pick(genSets)
	case k < 15:
		return g.pick(genEmpty)
	case k < 16:
		return "(?" + g.pick(genFlags) + ")"
	case depth < 3:
		inner := g.pattern(depth + 1)
		switch g.r.IntN(4) {
		case 0:
			atom = "(" + inner + ")"
		case 1:
			atom = "(?:" + inner + ")"
		default:
			atom = "(?" + g.pick(genFlags) + ":" + inner + ")"
		}
	default:
		atom = g.pick(genLits)
	}
	switch g.r.IntN(10) {
	case 0:
		return atom + "*"
	case 1:
		return atom + "+"
	case 2:
		return atom + "?"
	case 3:
		lo := g.r.IntN(3)
		switch g.r.IntN(3) {
		case 0:
			return fmt.Sprintf("%s{%d}", atom, lo)
		case 1:
			return fmt.Sprintf("%s{%d,}", atom, lo)
		default:
			return fmt.Sprintf("%s{%d,%d}", atom, lo, lo+g.r.IntN(3))
		}
	}
	return atom
}

func (g regexGen) subject() string {
	var b strings.Builder
	for range g.r.IntN(9) {
		b.WriteString(g.pick(genPieces))
	}
	return b.String()
}

func regexpValid(p string) bool {
	_, err := regexp.Compile(p)
	return err == nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// refusable: what waf.regex may turn down (to the PCRE path) in the random
// cases, as it has no Unicode case tables.
func refusable(why string) bool { return strings.Contains(why, "(?i) on non-ASCII") }

// TestRegexMatchesGo runs waf.regex inside nginx on hand-picked and random
// (pattern, subject) pairs, and single patterns as well as sets of them
// sharing one automaton, against Go's regexp.
func TestRegexMatchesGo(t *testing.T) {
	r := startRegexRig(t)
	var cases []regexCase
	for _, p := range regexEdgePatterns {
		if _, err := regexp.Compile(p); err != nil {
			t.Fatalf("edge pattern %q is not a Go regexp: %v", p, err)
		}
		cases = append(cases, regexCase{P: []string{p}, S: regexSubjects})
	}
	edge := len(cases)
	g := regexGen{rand.New(rand.NewPCG(21, 2))}
	for len(cases) < edge+4000 {
		p := g.pattern(0)
		if _, err := regexp.Compile(p); err != nil {
			continue
		}
		c := regexCase{P: []string{p}}
		for range 12 {
			c.S = append(c.S, g.subject())
		}
		cases = append(cases, c)
	}
	// Sets of patterns: any of them matching is a match.
	for range 300 {
		var c regexCase
		for len(c.P) < 2+g.r.IntN(6) {
			if p := g.pattern(0); regexpValid(p) {
				c.P = append(c.P, p)
			}
		}
		for range 12 {
			c.S = append(c.S, g.subject())
		}
		cases = append(cases, c)
	}

	got := r.runRegex(cases)
	pairs, matched, refused, bad := 0, 0, 0, 0
	for i, c := range cases {
		res := got[i]
		took := make([]string, 0, len(c.P))
		for k, p := range c.P {
			if why, ok := res.Refused[fmt.Sprint(k+1)]; ok {
				refused++
				if i < edge || !refusable(why) {
					t.Errorf("pattern %q refused: %s", p, why)
				}
				continue
			}
			took = append(took, p)
		}
		for j, s := range c.S {
			want := goMatch(took, s)
			pairs++
			if want {
				matched++
			}
			if j >= len(res.M) || (res.M[j] == '1') != want {
				bad++
				if bad <= 50 {
					t.Errorf("patterns %q on %q: Go says %v, waf.regex %q", took, s, want, res.M)
				}
			}
		}
	}
	t.Logf("%d pairs (%d cases, %d of them hand-picked patterns), %d matches, %d patterns refused, %d disagreements",
		pairs, len(cases), edge, matched, refused, bad)
}
