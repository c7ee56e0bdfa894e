package main

// The adversarial part: what one request costs the nginx workers at worst,
// for every node type, with inputs at the limits of nginx's defaults
// (request and header lines of up to 8 KB in four large buffers; the
// target of ≤ 200 µs per request applies there) and then at those of the
// config the agent renders (16 KB lines), bodies that nginx keeps in
// memory: long runs of white space, percent signs, backslashes and of the
// bytes detectors start on, a thousand arguments, near misses of the
// attack tokens, deeply nested JSON and XML, every large header nginx
// takes at once. Each request is measured on its own, from the scheduler's
// accounting of the workers, and each cell is the median of its requests.
// Figures are reported, never asserted.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"openflare/testing/benchkit"
)

// The header buffers the two tables fill: nginx's default, and what the
// agent renders by default (the server's fresh-install openresty_config).
const (
	defaultLine  = 8192
	renderedLine = 16384
)

const (
	// bodyMax is the largest body sent: under client_body_buffer_size (8 KB
	// on x86-64, which the rendered config keeps), so that nginx keeps it in
	// memory and security_check reads it.
	bodyMax = 8000
	// perCell requests are measured per cell, after warm unmeasured ones.
	perCell = 100
	warm    = 5
	// perConn requests go over one connection, from one client address:
	// make-challenge issues at most 60 challenges a minute to an address.
	perConn = 40
	// powDifficulty keeps the solving in this program quick.
	powDifficulty = 1
)

const chromeUA = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"

// advSite is a server of the adversarial part, its host <site>.bench.
type advSite struct {
	site string
	// graph is the site's rule group; nil leaves the WAF out.
	graph obj
	// pow renders the server of a route with PoW: the merged access block
	// and the PoW endpoints.
	pow bool
}

// server is the site's server block. Its origin is a Lua handler, so that
// the allowed requests cost the same in every column and no origin
// refuses the bytes of an input.
func (st advSite) server(luaDir string) string {
	access := fmt.Sprintf("access_by_lua_file %s/waf/check.lua;", luaDir)
	if st.graph == nil {
		access = ""
	}
	var pow string
	if st.pow {
		access = `access_by_lua_block {
            require("waf.runtime").check()
            if ngx.ctx.openflare_waf_blocked then
                return
            end
            require("pow.runtime").check()
        }`
		pow = fmt.Sprintf(`
        location = /.within.website/x/cmd/anubis/api/pass-challenge { content_by_lua_file %[1]s/pow/verify.lua; }
        location = /.within.website/x/cmd/anubis/api/make-challenge { content_by_lua_file %[1]s/pow/challenge.lua; }`, luaDir)
	}
	return fmt.Sprintf(`
    server {
        listen 80;
        server_name %[1]s.bench;
        set $openflare_waf_site "%[1]s";
        %[2]s%[3]s
        location / { content_by_lua_block { ngx.print("ok") } }
    }`, st.site, access, pow)
}

// A column is one node type: a site, and how its requests are made.
type column struct {
	name, site string
	// verify measures pass-challenge with a freshly solved challenge, the
	// input's arguments, headers and body added, instead of the input.
	verify bool
}

func advSites() []advSite {
	allFlags := obj{}
	for _, f := range []string{"sql_injection", "path_traversal", "command_injection", "xss", "ssrf", "file_inclusion", "malicious_upload", "xxe", "crlf_injection"} {
		allFlags[f] = true
	}
	return []advSite{
		{site: "adv-off"},
		{site: "adv-allow", graph: graph(obj{"type": "allow", "config": obj{}})},
		{site: "adv-block", graph: graph(obj{"type": "block", "config": obj{"status_code": 403, "response_body": "blocked"}})},
		// The snapshots the rows of the main table wrote.
		{site: "adv-ip", graph: checkGraph(obj{"type": "ip_match", "config": obj{"ip_group_ids": []int{3}}}, "false")},
		{site: "adv-geo", graph: checkGraph(obj{"type": "geo_match", "config": obj{"countries": geoCountries[:10]}}, "false")},
		{site: "adv-ua", graph: checkGraph(obj{"type": "ua_check", "config": obj{
			"require_ua": true, "block_common_bots": true, "block_abnormal_ua": true,
			"browsers": []string{"Chrome", "Firefox", "Safari", "Edge"}, "operating_systems": []string{"Windows", "macOS", "Linux", "Android", "iOS"},
			"block_custom_ua": true, "custom_ua_patterns": badBotPatterns(),
		}}, "true")},
		{site: "adv-ua-backtrack", graph: checkGraph(obj{"type": "ua_check", "config": obj{
			"block_custom_ua": true, "custom_ua_patterns": costlyPatterns(),
		}}, "true")},
		{site: "adv-security", graph: checkGraph(obj{"type": "security_check", "config": allFlags}, "true")},
		{site: "adv-pow", pow: true, graph: graph(obj{"type": "pow", "config": obj{
			"algorithm": "fast", "difficulty": powDifficulty, "session_ttl": 600, "challenge_ttl": 300,
		}, "next": obj{"next": "allow"}})},
	}
}

func columns() []column {
	return []column{
		{"WAF off", "adv-off", false},
		{"allow", "adv-allow", false},
		{"block", "adv-block", false},
		{"ip_match, 100 000-entry group", "adv-ip", false},
		{"geo_match, 10 countries", "adv-geo", false},
		{"ua_check, every rule, 32 patterns", "adv-ua", false},
		{"ua_check, (a+)+$ and 31 × a[ab]{0,600}cN", "adv-ua-backtrack", false},
		{"security_check, all flags", "adv-security", false},
		{"pow, issue", "adv-pow", false},
		{"pow, verify", "adv-pow", true},
	}
}

// badBotPatterns are 32 custom patterns of the kind a block list holds.
func badBotPatterns() []string {
	names := []string{"AhrefsBot", "SemrushBot", "MJ12bot", "DotBot", "PetalBot", "BLEXBot", "DataForSeoBot", "Bytespider",
		"GPTBot", "CCBot", "ClaudeBot", "Amazonbot", "YandexBot", "serpstatbot", "MegaIndex", "SeznamBot",
		"Sogou", "Exabot", "ZoominfoBot", "Barkrowler", "Nimbostratus", "masscan", "zgrab", "Nuclei"}
	p := make([]string, 0, 32)
	for _, n := range names {
		p = append(p, "(?i)"+n)
	}
	return append(p,
		`python-requests/\d+`, `Go-http-client/[12]\.`, `^curl/[0-9.]+$`, `(?i)(?:scrapy|httpclient|okhttp)/`,
		`^Mozilla/4\.0 \(compatible; MSIE [1-6]\.`, `^Java/1\.`, `libwww-perl`, `^$`)
}

// costlyPatterns are what costs a regex engine most, as many as a node
// takes: backtracking for PCRE, and for waf/regex.lua hundreds of NFA states
// live at once (each new combination of them a DFA state to compute).
func costlyPatterns() []string {
	p := []string{"(a+)+$"}
	for i := range 31 {
		p = append(p, fmt.Sprintf("a[ab]{0,600}c%d", i))
	}
	return p
}

// input is one request, sent to every column.
type input struct {
	name   string
	target string   // path and query; "" is "/"
	header []string // header lines; a User-Agent of Chrome unless one is given
	ctype  string   // the body's Content-Type
	body   string
	// ua, when set, makes the User-Agent of each request: one no cache has seen.
	ua func() string
}

func (in input) size() int {
	n := len(in.target) + len(in.body)
	if in.ua != nil {
		n += len(in.ua())
	}
	for _, h := range in.header {
		n += len(h)
	}
	return n
}

// request is the input as bytes, for host, with target in place of its
// own.
func (in input) request(host, target string) []byte {
	var b bytes.Buffer
	method := "GET"
	if in.body != "" {
		method = "POST"
	}
	if target == "" {
		target = "/"
	}
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, host)
	ua := in.ua != nil
	for _, h := range in.header {
		ua = ua || strings.HasPrefix(h, "User-Agent:")
		b.WriteString(h + "\r\n")
	}
	switch {
	case in.ua != nil:
		b.WriteString("User-Agent: " + in.ua() + "\r\n")
	case !ua:
		b.WriteString("User-Agent: " + chromeUA + "\r\n")
	}
	if in.body != "" {
		fmt.Fprintf(&b, "Content-Type: %s\r\nContent-Length: %d\r\n", in.ctype, len(in.body))
	}
	b.WriteString("\r\n" + in.body)
	return b.Bytes()
}

// fill is prefix followed by unit repeated while it stays within n bytes.
func fill(prefix, unit string, n int) string {
	return prefix + strings.Repeat(unit, (n-len(prefix))/len(unit))
}

// advInputs are the inputs for header buffers of buffer bytes, four of
// them: each line is less room for the parameters pass-challenge needs.
func advInputs(buffer int) []input {
	lineMax := buffer - 256
	kb := fmt.Sprintf("%d KB", buffer/1024)
	// The request line is "GET <target> HTTP/1.1\r\n"; a header line is
	// "<name>: <value>\r\n".
	target := lineMax - len("GET  HTTP/1.1\r\n")
	value := func(name string) int { return lineMax - len(name) - len(": \r\n") }
	// Inner white space runs keep their ends: nginx strips spaces around a
	// header value, not \v or \t.
	spaceUA := "User-Agent: \va" + strings.Repeat(" ", value("User-Agent")-3) + "b"
	// As many arguments as the line holds, up to the WAF's cap of 1,000.
	var args strings.Builder
	args.WriteString("/?")
	nargs := 0
	for ; nargs < 1000 && args.Len()+15 <= target; nargs++ {
		fmt.Fprintf(&args, "a%03d=%%2e%%2e+x&", nargs)
	}
	var form strings.Builder
	for i := 0; form.Len() < bodyMax-32; i++ {
		fmt.Fprintf(&form, "f%d=%s&", i, strings.Repeat("%25", 4))
	}
	jsonDepth := (bodyMax - 1) / len(`{"a":}`)
	xmlHead := `<?xml version="1.0"?>`
	xmlDepth := (bodyMax - len(xmlHead)) / len("<a></a>")
	// Every large header at once: the four buffers hold the request line
	// and three header lines of 8 KB, or four of 16 KB with room to spare.
	big := []string{
		fill("Cookie: k=", "%25 %5C\t", lineMax-2),
		fill("Cookie: j=", "%2527\\ ", lineMax-2),
		fill("Referer: http://x/?", "%25%0d\\ \t", lineMax-2),
		spaceUA,
	}
	if buffer < renderedLine {
		big = big[1:]
	}
	bigName := fmt.Sprintf("%s each: %d headers", kb, len(big))
	for _, h := range big {
		bigName += ", " + h[:strings.IndexByte(h, ':')]
	}
	// A run in every place at once: the request line and three header
	// lines, the four buffers.
	everywhere := func(unit, enc string) input {
		return input{name: fmt.Sprintf("%s runs of %s in the query, User-Agent, Cookie and Referer", kb, unit),
			target: fill("/?q=", enc, target),
			header: []string{
				fill("User-Agent: ", unit, lineMax-2),
				fill("Cookie: c=", unit, lineMax-2),
				fill("Referer: http://x/?r=", enc, lineMax-2),
			}}
	}
	quoteArgs := "/?" + strings.Repeat("a='&", min(1000, (target-2)/4)-1) + "a='"
	extra := []input{
		everywhere("'", "'"), everywhere("(", "("), everywhere("<", "<"), everywhere(";", "%3B"),
		// what each detector stops at, interleaved: no run for a loop to
		// stay on one path through
		everywhere(`a'b(c<d;e"f`, `a'b(c<d%3Be%22f`),
		{name: fmt.Sprintf("%s query: %d arguments a='", kb, strings.Count(quoteArgs, "&")+1), target: quoteArgs},
		{name: kb + " Cookie: 1,000 cookies a='", header: []string{"Cookie: " + strings.Repeat("a='; ", 999) + "a='"}},
	}
	return append([]input{
		{name: "GET /, a Chrome User-Agent"},
		{name: kb + " query: a run of %25", target: fill("/?q=", "%25", target)},
		{name: kb + ` query: runs of \ and %5C`, target: fill("/?q=", `\\%5C`, target)},
		{name: kb + " query: a run of '", target: fill("/?q=", "'", target)},
		{name: kb + " query: a run of (", target: fill("/?q=", "(", target)},
		{name: kb + " query: a run of <", target: fill("/?q=", "<", target)},
		{name: kb + " path: %2E and %5C runs", target: fill("/", "%2Ea%5C", target)},
		{name: fmt.Sprintf("%s query: %d arguments", kb, nargs), target: args.String()},
		{name: kb + " query: near misses of attack tokens", target: fill("/?q=", "unio%20selec+%3Cscrip+..%2+javascrip+sleep(x+", target)},
		{name: kb + " User-Agent: inner white space", header: []string{spaceUA}},
		{name: kb + " User-Agent: browser-token prefixes", header: []string{fill("User-Agent: ", "chrom edg opr firefo safar androi iphon windo ", lineMax-2)}},
		{name: "512-byte User-Agent: runs of 15 a", header: []string{"User-Agent: " + fill("", "aaaaaaaaaaaaaaa!", 512)}},
		{name: "512-byte User-Agent: a and b at random, new at each request", ua: randomAB},
		{name: bigName, header: big},
		{name: fmt.Sprintf("8 KB JSON body, nested %d deep", jsonDepth), ctype: "application/json",
			body: strings.Repeat(`{"a":`, jsonDepth) + "1" + strings.Repeat("}", jsonDepth)},
		{name: fmt.Sprintf("8 KB XML body, nested %d deep", xmlDepth), ctype: "application/xml",
			body: xmlHead + strings.Repeat("<a>", xmlDepth) + strings.Repeat("</a>", xmlDepth)},
		{name: "8 KB form body: runs of %25", ctype: "application/x-www-form-urlencoded", body: form.String()},
	}, extra...)
}

// meter reads what the workers have run, in nanoseconds.
type meter struct{ pids []int }

// settled is the workers' run time once they are done (benchkit.SettledRunTime).
func (m meter) settled() time.Duration {
	d, err := benchkit.SettledRunTime(m.pids)
	if err != nil {
		benchkit.Fatal(fmt.Errorf("the workers' run time: %w", err))
	}
	return d
}

// client is one keep-alive connection from its own address.
type client struct {
	c  net.Conn
	br *bufio.Reader
}

var nextAddr = 0

// dial connects from the next address of 127.3.0.0/16, each a client of
// its own (every 127/8 address is local in the test namespaces).
func dial() client {
	nextAddr++
	from := net.IPv4(127, 3, byte(nextAddr/250), byte(nextAddr%250+1))
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", "127.0.0.1:80")
	if err != nil {
		benchkit.Fatal(err)
	}
	return client{c, bufio.NewReader(c)}
}

// do sends req and returns the status and body of the answer.
func (cl client) do(req []byte) (int, []byte) {
	cl.c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := cl.c.Write(req); err != nil {
		benchkit.Fatal(err)
	}
	resp, err := http.ReadResponse(cl.br, nil)
	if err != nil {
		benchkit.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		benchkit.Fatal(err)
	}
	return resp.StatusCode, body
}

var challengeJSON = regexp.MustCompile(`<script id="anubis_challenge" type="application/json">(.*?)</script>`)

// solvedTarget asks the pow site for a challenge as a browser would, solves
// it as the page's worker does and returns the pass-challenge target that
// hands the answer in.
func solvedTarget(cl client, host string) string {
	status, page := cl.do(input{}.request(host, "/"))
	m := challengeJSON.FindSubmatch(page)
	if status != http.StatusOK || m == nil {
		benchkit.Fatal(fmt.Errorf("%s: no challenge page (%d): %.200q", host, status, page))
	}
	var c struct {
		Challenge struct {
			ID         string `json:"id"`
			RandomData string `json:"randomData"`
		} `json:"challenge"`
	}
	if err := json.Unmarshal(m[1], &c); err != nil {
		benchkit.Fatal(err)
	}
	zeros := strings.Repeat("0", powDifficulty)
	for n := 0; ; n++ {
		sum := sha256.Sum256([]byte(c.Challenge.RandomData + strconv.Itoa(n)))
		if h := hex.EncodeToString(sum[:]); strings.HasPrefix(h, zeros) {
			q := url.Values{"id": {c.Challenge.ID}, "response": {h}, "nonce": {strconv.Itoa(n)}, "elapsedTime": {"1"}}
			return "/.within.website/x/cmd/anubis/api/pass-challenge?" + q.Encode()
		}
	}
}

// cell is the median cost of the input at the column, and the statuses
// its requests got.
func (b *bench) cell(col column, in input) (time.Duration, []int) {
	m := meter{b.nginx.WorkerPIDs()}
	host := col.site + ".bench"
	var costs []time.Duration
	var statuses []int
	var cl client
	for i := range warm + perCell {
		if i%perConn == 0 {
			if cl.c != nil {
				cl.c.Close()
			}
			cl = dial()
		}
		target := in.target
		if col.verify {
			target = solvedTarget(cl, host)
			if _, q, ok := strings.Cut(in.target, "?"); ok {
				target += "&" + q
			}
		}
		req := in.request(host, target)
		before := m.settled()
		status, _ := cl.do(req)
		cost := m.settled() - before
		if i < warm {
			continue
		}
		costs = append(costs, cost)
		if !slices.Contains(statuses, status) {
			statuses = append(statuses, status)
		}
	}
	cl.c.Close()
	slices.Sort(statuses)
	return benchkit.Pct(costs, 50), statuses
}

// adversarial measures every input at every column, in *rounds rounds, and
// prints the table: per cell, the lowest median of the rounds.
// adversarial prints the table of inputs; target says whether the target
// applies to them.
func (b *bench) adversarial(inputs []input, target bool) {
	began := time.Now()
	cols := columns()
	cost := make([][]time.Duration, len(inputs))
	status := make([][][]int, len(inputs))
	for i := range inputs {
		cost[i] = make([]time.Duration, len(cols))
		status[i] = make([][]int, len(cols))
	}
	for round := range *rounds {
		for i, in := range inputs {
			for j, c := range cols {
				d, statuses := b.cell(c, in)
				if j == 0 && !slices.Equal(statuses, []int{http.StatusOK}) {
					benchkit.Fatal(fmt.Errorf("%s: nginx without the WAF answers %v: the input is not one nginx accepts", in.name, statuses))
				}
				if round == 0 || d < cost[i][j] {
					cost[i][j] = d
				}
				status[i][j] = statuses
			}
		}
	}
	fmt.Printf("\nWorst-case requests: nginx worker CPU per request, the lowest of %d rounds of the median of %d requests (the status when not 200)\n", *rounds, perCell)
	fmt.Println()
	head := "| input | bytes |"
	rule := "|---|---:|"
	for _, c := range cols {
		head += " " + c.name + " |"
		rule += "---:|"
	}
	fmt.Println(head)
	fmt.Println(rule)
	for i, in := range inputs {
		line := fmt.Sprintf("| %s | %d |", in.name, in.size())
		for j := range cols {
			line += " " + micros(cost[i][j])
			if s := status[i][j]; !slices.Equal(s, []int{http.StatusOK}) {
				line += fmt.Sprintf(" (%s)", strings.Trim(fmt.Sprint(s), "[]"))
			}
			line += " |"
		}
		fmt.Println(line)
	}
	worst := "| **worst, less WAF off** | |"
	over := []string{}
	for j, c := range cols[1:] {
		var w time.Duration
		var at string
		for i, in := range inputs {
			if d := cost[i][j+1] - cost[i][0]; d > w || at == "" {
				w, at = d, in.name
			}
		}
		worst += " " + micros(w) + " |"
		if w > 200*time.Microsecond {
			over = append(over, fmt.Sprintf("%s (%s on %q)", c.name, micros(w), at))
		}
	}
	fmt.Println(worst)
	fmt.Println()
	switch {
	case !target:
		if len(over) > 0 {
			fmt.Println("Over 200 µs per request (reported only): " + strings.Join(over, ", ") + ".")
		}
	case len(over) == 0:
		fmt.Println("Every node type is within the target of ≤ 200 µs per request.")
	default:
		fmt.Println("Over the target of ≤ 200 µs per request: " + strings.Join(over, ", ") + ".")
	}
	fmt.Printf("Measured in %v.\n", time.Since(began).Round(time.Second))
}

func micros(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

// uaDrawn seeds randomAB, so that no request repeats another's User-Agent.
var uaDrawn uint64

// randomAB is a User-Agent of 512 a's and b's drawn afresh for every
// request (a lazily built DFA has seen none of them, and a worker's cache
// holds a few requests' worth), ending in b so that (a+)+$ lets it pass.
func randomAB() string {
	uaDrawn++
	r := rand.New(rand.NewPCG(uaDrawn, 2))
	b := make([]byte, 512)
	for k := range b {
		b[k] = "ab"[r.IntN(2)]
	}
	b[len(b)-1] = 'b'
	return string(b)
}
