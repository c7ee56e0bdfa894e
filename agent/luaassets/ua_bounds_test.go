package luaassets

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"openflare/testing/benchkit"
)

// Patterns padded to one byte over and exactly at ua.lua's 256-byte cap:
// the first would match "Long", the second matches "Edge".
var (
	overCapPattern = "^Long|" + strings.Repeat("z", 251)
	atCapPattern   = "^Edge|" + strings.Repeat("z", 250)
)

// startUABoundsRig runs one ua_check node per site (true → allow, false →
// B(403, "ua_check")) with the header buffers the agent renders (4 16k),
// so that nginx accepts User-Agents of up to 16 KB as in production. The
// origin is Lua (uaSecurityServer): Go's server would refuse the \v in a
// forwarded User-Agent. \pL is beyond waf/regex.lua: PCRE runs backtrack's
// pattern, and backtracks. thrash's automaton has a state for every set of
// the last 21 bytes' a's: a random UA of a's and b's misses its cache at
// every byte.
func startUABoundsRig(t *testing.T) *rig {
	r := newRig(t)
	nodes := map[string]obj{
		"require":   {"require_ua": true},
		"other":     {"require_ua": true, "browsers": []string{"Other"}},
		"cli":       {"browsers": []string{"CLI"}},
		"exact":     {"block_custom_ua": true, "custom_ua_patterns": []string{"^EvilBot$"}},
		"backtrack": {"block_custom_ua": true, "custom_ua_patterns": []string{`(\pL+)+$`}},
		"linear":    {"block_custom_ua": true, "custom_ua_patterns": []string{"(a+)+$"}},
		"anywhere":  {"block_custom_ua": true, "custom_ua_patterns": []string{"EvilBot"}},
		"pcre":      {"block_custom_ua": true, "custom_ua_patterns": []string{`^EvilBot$|\p{Greek}`}},
		"thrash":    {"block_custom_ua": true, "custom_ua_patterns": []string{"a[ab]{20}c"}},
		"raise":     {"block_custom_ua": true, "custom_ua_patterns": []string{"(*LIMIT_MATCH=1000000000)(a+)+$"}},
		"long":      {"block_custom_ua": true, "custom_ua_patterns": []string{overCapPattern, atCapPattern}},
	}
	many := make([]string, 0, 33)
	for i := range 32 {
		many = append(many, fmt.Sprintf("^never%d$", i))
	}
	nodes["many"] = obj{"block_custom_ua": true, "custom_ua_patterns": append(many, "^EvilBot$")}
	var backtracking []string
	for i := range 32 {
		backtracking = append(backtracking, fmt.Sprintf("(a+)+$|zq%d", i))
	}
	nodes["backtrack32"] = obj{"block_custom_ua": true, "custom_ua_patterns": backtracking}
	// Hundreds of NFA states live at once.
	wide := []string{"(a+)+$"}
	for i := range 31 {
		wide = append(wide, fmt.Sprintf("a[ab]{0,600}c%d", i))
	}
	nodes["wide32"] = obj{"block_custom_ua": true, "custom_ua_patterns": wide}
	// Chains of empty-width instructions between characters: what a step
	// walks is mostly not characters.
	var empty []string
	for i := range 32 {
		empty = append(empty, fmt.Sprintf("a(?:$?){45}(?:[ab](?:$?){45}){20}z%d", i))
	}
	nodes["empty32"] = obj{"block_custom_ua": true, "custom_ua_patterns": empty}

	var groups, bindings []obj
	var servers strings.Builder
	servers.WriteString("    large_client_header_buffers 4 16k;\n")
	for site, config := range nodes {
		id := len(groups) + 1
		groups = append(groups, group(id, false, checkGraph("ua_check", config, "ua_check")))
		bindings = append(bindings, binding(site, id))
		servers.WriteString(r.uaSecurityServer(site))
	}
	// Two ua_check nodes in one group, then a third in another group: the
	// second and third read the labels the first one worked out.
	id := len(groups) + 1
	groups = append(groups,
		group(id, false, graph(obj{
			"start":         startNode("os"),
			"os":            branchNode("ua_check", obj{"operating_systems": []string{"Windows", "Linux"}}, "browser", "block-os"),
			"browser":       branchNode("ua_check", obj{"browsers": []string{"Chrome", "Firefox"}}, "allow", "block-browser"),
			"allow":         allowNode(),
			"block-os":      blockNode(403, "os"),
			"block-browser": blockNode(403, "browser"),
		})),
		group(id+1, false, checkGraph("ua_check", obj{"operating_systems": []string{"Windows"}}, "windows")))
	bindings = append(bindings, binding("shared", id, id+1))
	servers.WriteString(r.uaSecurityServer("shared"))
	r.writeWAF(obj{"rule_groups": groups, "bindings": bindings})
	r.start(servers.String())
	return r
}

// workerCPU is the CPU time all nginx workers have used so far.
func (r *rig) workerCPU() time.Duration {
	var sum time.Duration
	for _, pid := range r.nginx.WorkerPIDs() {
		sum += benchkit.CPUTime(pid)
	}
	return sum
}

// rawUA sends GET / to <site>.test with the User-Agent ua written byte for
// byte (Go's client refuses control bytes such as \v in a header value) on
// a fresh connection, and returns the reply and the workers' CPU time
// meanwhile.
func (r *rig) rawUA(site, ua string) (reply, time.Duration) {
	r.t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(otherIP)}, Timeout: 5 * time.Second}
	before := r.workerCPU()
	c, err := dialer.Dial("tcp", "127.0.0.1:80")
	if err != nil {
		r.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+site+".test\r\nUser-Agent: "+ua+"\r\nConnection: close\r\n\r\n"); err != nil {
		r.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		r.t.Fatalf("%s with a %d-byte User-Agent: %v", site, len(ua), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, body: string(b), header: resp.Header}, r.workerCPU() - before
}

// workerRunTime is what the nginx workers have run so far, from
// /proc/<pid>/schedstat (nanoseconds, where utime and stime count 10 ms
// ticks).
func (r *rig) workerRunTime() time.Duration {
	var sum time.Duration
	for _, pid := range r.nginx.WorkerPIDs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			r.t.Fatal(err)
		}
		ns, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
		if err != nil {
			r.t.Fatalf("/proc/%d/schedstat: %v", pid, err)
		}
		sum += time.Duration(ns)
	}
	return sum
}

// rawUARunTime is rawUA, with the workers' run time meanwhile in
// nanoseconds.
func (r *rig) rawUARunTime(site, ua string) (reply, time.Duration) {
	r.t.Helper()
	before := r.workerRunTime()
	got, _ := r.rawUA(site, ua)
	return got, r.workerRunTime() - before
}

// TestUACheckLongUserAgent sends User-Agents near nginx's header-line
// limit, made of runs of white space that the trim used to pay for
// quadratically (half a second or more of a worker for "\va", 15 000
// spaces, "b"). Each must get its answer, and cost the workers less than
// 100 ms of CPU: a linear trim needs well under 1 ms, so the bound only
// fails a superlinear one.
func TestUACheckLongUserAgent(t *testing.T) {
	r := startUABoundsRig(t)
	spaces := strings.Repeat(" ", 15000)
	for _, c := range []struct {
		name, site, ua string
		status         int
		body           string
	}{
		// nginx strips spaces around a header value, not \v or \t.
		{"inner spaces, VT in front", "other", "\va" + spaces + "b", 200, "origin-ok"},
		{"inner spaces, tab behind", "other", "a" + spaces + "b\t", 200, "origin-ok"},
		{"white space only", "require", "\v" + spaces + "\t", 403, "ua_check\n"},
		{"classified across the run", "cli", "\vcurl/8.5" + spaces + "x\t", 200, "origin-ok"},
		{"custom patterns see it all", "exact", "\va" + spaces + "b", 200, "origin-ok"},
		{"found at the end", "anywhere", "\va" + spaces + "EvilBot", 403, "ua_check\n"},
		{"too long for a PCRE pattern", "pcre", "\va" + spaces + "b", 403, "ua_check\n"},
	} {
		got, cpu := r.rawUA(c.site, c.ua)
		if got.status != c.status || got.body != c.body {
			t.Errorf("%s: got %d %q, want %d %q", c.name, got.status, got.body, c.status, c.body)
		}
		if cpu >= 100*time.Millisecond {
			t.Errorf("%s: the request cost the nginx workers %v of CPU, want < 100 ms", c.name, cpu)
		}
		t.Logf("%s (%d bytes): %v of worker CPU (counted in 10 ms ticks)", c.name, len(c.ua), cpu)
	}
}

// TestUACheckBounds: the trim, what ua_check does with custom patterns and
// User-Agents beyond its bounds (DATAPLANE 2.5), and the labels one node
// leaves to the next.
func TestUACheckBounds(t *testing.T) {
	r := startUABoundsRig(t)
	expect := func(site, ua string, status int) {
		t.Helper()
		got, _ := r.rawUA(site, ua)
		if got.status != status {
			t.Errorf("%s with a %d-byte UA %.40q: got %d %q, want %d", site, len(ua), ua, got.status, got.body, status)
		}
	}
	workers := len(r.nginx.WorkerPIDs())

	t.Run("leading and trailing tab, VT and space go, inner ones stay", func(t *testing.T) {
		expect("exact", "\v\t EvilBot \t\v", 403)
		expect("exact", "\vEvil Bot", 200)
		expect("exact", "\vEvilBot!", 200)
		expect("exact", "\v\t", 200) // empty: "^EvilBot$" cannot match
	})

	t.Run("a PCRE pattern that gives up counts as a match", func(t *testing.T) {
		// (\pL+)+$ on n letters and a "!" takes PCRE about 2^n steps and
		// matches nothing. 2^12 is within the limit; 2^20 (a million) is
		// beyond it, though within PCRE's own default of ten million, so a
		// refusal shows the node's limit at work.
		expect("backtrack", strings.Repeat("a", 12)+"!", 200)
		expect("backtrack", "!aaa", 403) // a real match
		ua := strings.Repeat("a", 20) + "!"
		for range 4 {
			expect("backtrack", ua, 403)
		}
		log := r.nginx.ErrorLog()
		if n := strings.Count(log, "gave up on a User-Agent"); n < 1 || n > workers {
			t.Errorf("%d log lines about the pattern giving up, want one per worker that met it (at most %d)", n, workers)
		}
		// It names the pattern and the error, never the client's User-Agent.
		line := regexp.MustCompile(`.*gave up on a User-Agent.*`).FindString(log)
		if !strings.Contains(line, `custom_ua_patterns[1] (\pL+)+$ gave up on a User-Agent (pcre_exec() failed: -8), which counts as a match`) || strings.Contains(line, ua) {
			t.Errorf("log line %q", line)
		}
		// Each worker says which pattern PCRE runs, once, when it loads the rules.
		if n := r.countLines(`custom_ua_patterns[1] (\pL+)+$ runs on PCRE, under its match limit and on User-Agents of up to 512 bytes (Unicode classes are not supported`); n != workers {
			t.Errorf("%d log lines about the PCRE pattern, want %d (one per worker)", n, workers)
		}
	})

	t.Run("the same pattern in the linear engine gives Go's answer", func(t *testing.T) {
		expect("linear", strings.Repeat("a", 20)+"!", 200)
		expect("linear", "xaaa", 403)
	})

	t.Run("a pattern cannot raise the limit", func(t *testing.T) {
		expect("raise", strings.Repeat("a", 12)+"!", 200)
		expect("raise", strings.Repeat("a", 20)+"!", 403)
	})

	t.Run("PCRE patterns see User-Agents of up to 512 bytes, the automaton all of it", func(t *testing.T) {
		expect("pcre", strings.Repeat("x", 512), 200)
		expect("pcre", strings.Repeat("x", 513), 403)
		// Trimmed first: the white space around it does not count.
		expect("pcre", "\t"+strings.Repeat("x", 512)+"\v", 200)
		expect("exact", strings.Repeat("x", 513), 200)
		expect("anywhere", strings.Repeat("x", 8000)+"EvilBot", 403)
		expect("anywhere", strings.Repeat("x", 8000)+"EvilBo", 200)
	})

	t.Run("a long UA may cost the automaton 512 steps, then counts as a match", func(t *testing.T) {
		rnd := rand.New(rand.NewPCG(5, 5))
		ab := func(n int) string { return randomAB(rnd, n) }
		// Each UA is new to the cache. Up to 512 bytes, Go's answer.
		expect("thrash", ab(512), 200)
		ua := ab(500) + "c"
		want := 200
		if regexp.MustCompile("a[ab]{20}c").MatchString(ua) {
			want = 403
		}
		expect("thrash", ua, want)
		for range 3 {
			ua := ab(16000)
			got, cpu := r.rawUARunTime("thrash", ua)
			if got.status != 403 {
				t.Errorf("thrash with a 16 KB UA: got %d, want 403 (over the budget)", got.status)
			}
			// 512 steps take 1 to 3 ms; 16 000 of them took 40 ms and more.
			if cpu > 20*time.Millisecond {
				t.Errorf("thrash with a 16 KB UA cost the workers %v, want < 20 ms", cpu)
			}
			t.Logf("thrash with a 16 KB UA: %v of worker CPU", cpu)
		}
	})

	t.Run("patterns that keep hundreds of NFA states live stop at the work budget", func(t *testing.T) {
		rnd := rand.New(rand.NewPCG(6, 6))
		// Without the work budget wide32 took 450 ms, and empty32 42 ms
		// while the budget counted only the character instructions.
		for _, site := range []string{"wide32", "empty32"} {
			expect(site, chromeUA, 200)
			for range 3 {
				// (a+)+$ does not match it, nor does any other
				got, cpu := r.rawUARunTime(site, randomAB(rnd, 511)+"b")
				if got.status != 403 {
					t.Errorf("%s with a fresh 512-byte UA of a and b: got %d, want 403 (over the budget)", site, got.status)
				}
				if cpu > 20*time.Millisecond {
					t.Errorf("%s with a fresh 512-byte UA cost the workers %v, want < 20 ms", site, cpu)
				}
				t.Logf("%s with a fresh 512-byte UA: %v of worker CPU", site, cpu)
			}
		}
		if n := r.countLines("openflare waf ua_check custom_ua_patterns needed more than 512 new DFA steps or 65536 units of work for a User-Agent of 512 bytes, which counts as a match"); n < 2 || n > 2*workers {
			t.Errorf("the budget's warning was logged %d times, want once per node and worker that hit it (2 to %d)", n, 2*workers)
		}
	})

	t.Run("32 patterns of up to 256 bytes", func(t *testing.T) {
		expect("many", "EvilBot", 200) // the 33rd pattern is left out
		expect("many", "never31", 403)
		expect("long", "Long", 200)
		expect("long", "Edge", 403)
		// Each worker says what it left out once, when it loads the rules.
		for _, line := range []string{
			"ua_check ignored custom_ua_patterns[33] and later: over the 32-pattern cap",
			"ua_check ignored custom_ua_patterns[1]: over the 256-byte cap",
		} {
			if n := r.countLines(line); n != workers {
				t.Errorf("%d log lines %q, want %d (one per worker)", n, line, workers)
			}
		}
	})

	t.Run("labels worked out at one node serve the next, in the group and in the next group", func(t *testing.T) {
		for _, c := range []struct {
			ua     string
			status int
			body   string
		}{
			{uaChrome, 200, "origin-ok"},
			{uaAndroid, 403, "os\n"},
			{uaEdge, 403, "browser\n"},
			{uaFirefox, 403, "windows\n"},
		} {
			got, _ := r.rawUA("shared", c.ua)
			if got.status != c.status || got.body != c.body {
				t.Errorf("shared with UA %q: got %d %q, want %d %q", c.ua, got.status, got.body, c.status, c.body)
			}
		}
	})
}

// TestUACheckBacktrackingPatterns: patterns that make a backtracking engine
// take time exponential in runs of the User-Agent cost the linear one next
// to nothing, with Go's verdict. Under PCRE, one (a+)+$ took a worker 6.7
// ms on this 512-byte UA and 32 of them about 200 ms; the bound of 5 ms
// is 40 times under that and 100 times over what the automaton needs.
func TestUACheckBacktrackingPatterns(t *testing.T) {
	r := startUABoundsRig(t)
	adversarial := strings.Repeat("aaaaaaaaaaaaaaa!", 32)
	for _, c := range []struct{ site, ua string }{
		{"linear", strings.Repeat("a", 512)},
		{"linear", adversarial},
		{"linear", "b" + strings.Repeat("a", 511)},
		{"backtrack32", adversarial},
		{"backtrack32", adversarial + "a"},
	} {
		want := 200
		if regexp.MustCompile("(a+)+$").MatchString(c.ua) {
			want = 403
		}
		best := time.Hour
		for range 3 {
			got, cpu := r.rawUARunTime(c.site, c.ua)
			if got.status != want {
				t.Errorf("%s with %.20q… (%d bytes): got %d, want %d as Go's regexp says", c.site, c.ua, len(c.ua), got.status, want)
			}
			best = min(best, cpu)
		}
		if best > 5*time.Millisecond {
			t.Errorf("%s with %.20q… (%d bytes) cost the workers %v, want < 5 ms", c.site, c.ua, len(c.ua), best)
		}
		t.Logf("%s with %.20q… (%d bytes): %v of worker CPU", c.site, c.ua, len(c.ua), best)
	}
}

// randomAB is n bytes of a's and b's drawn from rnd: User-Agents no DFA
// cache has seen.
func randomAB(rnd *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = "ab"[rnd.IntN(2)]
	}
	return string(b)
}
