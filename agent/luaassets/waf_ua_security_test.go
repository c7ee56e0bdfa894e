package luaassets

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// User-Agents, one per classifier label.
const (
	uaWeChat   = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 MicroMessenger/8.0.40(0x1800282a) NetType/WIFI Language/en"
	uaPostman  = "PostmanRuntime/7.36.0"
	uaCurl     = "curl/8.5.0"
	uaWget     = "Wget/1.21.4"
	uaEdge     = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Edg/120.0.2210.91"
	uaOpera    = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 OPR/106.0.0.0"
	uaFirefox  = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0"
	uaChrome   = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"
	uaChromium = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chromium/120.0.6099.71 Chrome/120.0.6099.71 Safari/537.36"
	uaSafari   = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1"
	uaMacSaf   = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15"
	uaGooglebt = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
	uaMobileGB = "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.71 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
	uaAndroid  = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Mobile Safari/537.36"
	uaCrOS     = "Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"
	uaOther    = "TotallyUnknownClient/1.0"
	uaPython   = "python-requests/2.31.0"
)

// checkGraph is start → typ(config), true → allow, false → B(403, body).
func checkGraph(typ string, config obj, body string) obj {
	return graph(obj{
		"start": startNode("n"),
		"n":     branchNode(typ, config, "allow", "block"),
		"allow": allowNode(),
		"block": blockNode(403, body),
	})
}

var (
	browserLabels = []string{"WeChat", "Postman", "CLI", "Edge", "Opera", "Firefox", "Chrome", "Chromium", "Safari", "Bot", "Other", "Unknown"}
	osLabels      = []string{"Android", "iOS", "Windows", "macOS", "Chrome OS", "Linux", "Bot", "Other", "Unknown"}
	// A User-Agent of each label ("" = no header) and one of another label.
	browserSample = map[string][2]string{
		"WeChat": {uaWeChat, uaSafari}, "Postman": {uaPostman, uaCurl}, "CLI": {uaCurl, uaPostman},
		"Edge": {uaEdge, uaChrome}, "Opera": {uaOpera, uaChrome}, "Firefox": {uaFirefox, uaChrome},
		"Chrome": {uaChrome, uaChromium}, "Chromium": {uaChromium, uaChrome}, "Safari": {uaSafari, uaWeChat},
		"Bot": {uaGooglebt, uaMobileGB}, "Other": {uaOther, uaCurl}, "Unknown": {"", uaOther},
	}
	osSample = map[string][2]string{
		"Android": {uaAndroid, uaCrOS}, "iOS": {uaSafari, uaMacSaf}, "Windows": {uaChrome, uaFirefox},
		"macOS": {uaMacSaf, uaSafari}, "Chrome OS": {uaCrOS, uaFirefox}, "Linux": {uaFirefox, uaAndroid},
		"Bot": {uaGooglebt, uaMobileGB}, "Other": {uaOther, ""}, "Unknown": {"", uaOther},
	}
)

// uaSecurityConfig binds one check node per site.
func uaSecurityConfig() (obj, []string) {
	var groups, bindings []obj
	var sites []string
	add := func(site, typ string, config obj) {
		id := len(groups) + 2
		groups = append(groups, group(id, false, checkGraph(typ, config, typ)))
		bindings = append(bindings, binding(site, id))
		sites = append(sites, site)
	}
	for i, l := range browserLabels {
		add(fmt.Sprintf("ub%d", i), "ua_check", obj{"browsers": []string{l}})
	}
	for i, l := range osLabels {
		add(fmt.Sprintf("uo%d", i), "ua_check", obj{"operating_systems": []string{l}})
	}
	add("require", "ua_check", obj{"require_ua": true})
	add("abnormal", "ua_check", obj{"block_abnormal_ua": true})
	add("bots", "ua_check", obj{"block_common_bots": true})
	add("and", "ua_check", obj{"browsers": []string{"Chrome"}, "operating_systems": []string{"iOS"}, "match_mode": "and"})
	add("or", "ua_check", obj{"browsers": []string{"Chrome"}, "operating_systems": []string{"iOS"}, "match_mode": "OR?"})
	add("custom", "ua_check", obj{"block_custom_ua": true, "custom_ua_patterns": []string{"", `python-requests/\d+\.`, `^Evil[A-Z]`}})
	add("lua-pattern", "ua_check", obj{"block_custom_ua": true, "custom_ua_patterns": []string{"python-requests"}})
	add("badre", "ua_check", obj{"block_custom_ua": true, "custom_ua_patterns": []string{"ok", "(unclosed"}})
	add("badre-off", "ua_check", obj{"block_custom_ua": false, "custom_ua_patterns": []string{"(unclosed"}})
	return obj{"rule_groups": append([]obj{group(1, true, allowGraph())}, groups...), "bindings": bindings}, sites
}

// uaSecurityServer is wafServer with an explicit 8 KiB body buffer (the
// x86-64 default) so that the in-memory body rule is platform-independent,
// and a Lua content handler standing in for the origin: it reads the body,
// which the Go test origin would not (nginx then gets a reset and a 502).
func (r *rig) uaSecurityServer(site string) string {
	return fmt.Sprintf(`
    server {
        listen 80;
        server_name %[1]s.test;
        set $openflare_waf_site "%[1]s";
        client_body_buffer_size 8k;
        access_by_lua_file %[2]s/waf/check.lua;
        location / { content_by_lua_block { ngx.req.read_body() ngx.print("origin-ok") } }
    }
`, site, r.luaDir)
}

func startUASecurityRig(t *testing.T) *rig {
	r := newRig(t)
	doc, sites := uaSecurityConfig()
	r.writeWAF(doc)
	var servers strings.Builder
	for _, s := range sites {
		if strings.HasPrefix(s, "bench-") {
			servers.WriteString(fmt.Sprintf(`
    server {
        listen 80;
        server_name %[1]s.test;
        set $openflare_waf_site "%[1]s";
        access_by_lua_file %[2]s/waf/check.lua;
        location / { content_by_lua_block { ngx.print("ok") } }
    }
`, s, r.luaDir))
			continue
		}
		servers.WriteString(r.uaSecurityServer(s))
	}
	// A WAF-less server exposing the classifier.
	servers.WriteString(`
    server {
        listen 80;
        server_name tools.test;
        location = /classify {
            content_by_lua_block {
                local b, o = require("waf.ua").classify(ngx.var.http_user_agent)
                ngx.say(b, "|", o)
            }
        }
        location = /classify-batch {
            client_body_buffer_size 4m;
            client_max_body_size 4m;
            content_by_lua_block {
                local cjson = require("cjson.safe")
                local ua = require("waf.ua")
                ngx.req.read_body()
                local out = {}
                for i, s in ipairs(assert(cjson.decode(ngx.req.get_body_data()))) do
                    local b, o = ua.classify(s)
                    out[i] = b .. "|" .. o
                end
                ngx.print(cjson.encode(out))
            }
        }
    }
`)
	r.start(servers.String())
	return r
}

type uaCase struct {
	site, ua string
	status   int
}

// uaReq sends GET / with the User-Agent ua ("" = no header at all).
func (r *rig) uaReq(site, ua string) reply {
	r.t.Helper()
	h := http.Header{}
	if ua != "" {
		h["User-Agent"] = []string{ua}
	} else {
		// Go's client adds its own User-Agent unless the header is present and empty.
		h["User-Agent"] = []string{""}
	}
	return r.request(otherIP, http.MethodGet, site+".test", "/", h)
}

func (r *rig) expectStatus(got reply, status int, what string) {
	r.t.Helper()
	if got.status != status {
		r.t.Errorf("%s: got %d %q, want %d", what, got.status, got.body, status)
	}
}

func TestUASecurity(t *testing.T) {
	r := startUASecurityRig(t)

	t.Run("classifier", func(t *testing.T) {
		for _, c := range []struct{ ua, want string }{
			{uaWeChat, "WeChat|iOS"},
			{uaPostman, "Postman|Other"},
			{uaCurl, "CLI|Other"},
			{uaWget, "CLI|Other"},
			{uaEdge, "Edge|Windows"},
			{"Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) EdgiOS/120.0 Mobile/15E148 Safari/605.1.15", "Edge|iOS"},
			{uaOpera, "Opera|Windows"},
			{"Opera/9.80 (Windows NT 6.1) Presto/2.12.388 Version/12.18", "Opera|Windows"},
			{uaFirefox, "Firefox|Linux"},
			{"Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) FxiOS/121.0 Mobile/15E148 Safari/605.1.15", "Firefox|iOS"},
			{uaChrome, "Chrome|Windows"},
			{"Mozilla/5.0 (iPad; CPU OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/120.0 Mobile/15E148 Safari/604.1", "Chrome|iOS"},
			{uaChromium, "Chromium|Linux"},
			{uaSafari, "Safari|iOS"},
			{uaMacSaf, "Safari|macOS"},
			{uaGooglebt, "Bot|Bot"},
			{"Mozilla/5.0 (compatible; Yahoo! Slurp; http://help.yahoo.com/help/us/ysearch/slurp)", "Bot|Other"},
			{"Baiduspider", "Bot|Bot"},
			{uaMobileGB, "Chrome|Android"},
			{uaAndroid, "Chrome|Android"},
			{uaCrOS, "Chrome|Chrome OS"},
			{uaOther, "Other|Other"},
			{uaPython, "Other|Other"},
			{"   ", "Unknown|Unknown"},
			{"", "Unknown|Unknown"},
			{"  CURL/7.0  ", "CLI|Other"},
			// Overlapping tokens: "chrome" ends where "edg/" starts.
			{"x chromedg/1", "Edge|Other"},
			{"ipod touch macos", "Other|iOS"},
		} {
			h := http.Header{"User-Agent": {c.ua}}
			got := r.request(otherIP, http.MethodGet, "tools.test", "/classify", h)
			if got.status != 200 || got.body != c.want+"\n" {
				t.Errorf("classify(%q) = %d %q, want %q", c.ua, got.status, got.body, c.want)
			}
		}
	})

	t.Run("ua_check labels", func(t *testing.T) {
		for i, l := range browserLabels {
			s := browserSample[l]
			r.expectStatus(r.uaReq(fmt.Sprintf("ub%d", i), s[0]), 200, "browsers=["+l+"] hit")
			r.expectStatus(r.uaReq(fmt.Sprintf("ub%d", i), s[1]), 403, "browsers=["+l+"] miss")
		}
		for i, l := range osLabels {
			s := osSample[l]
			r.expectStatus(r.uaReq(fmt.Sprintf("uo%d", i), s[0]), 200, "operating_systems=["+l+"] hit")
			r.expectStatus(r.uaReq(fmt.Sprintf("uo%d", i), s[1]), 403, "operating_systems=["+l+"] miss")
		}
	})

	t.Run("ua_check rules", func(t *testing.T) {
		for _, c := range []uaCase{
			// DATAPLANE 11 case 9.
			{"require", "", 403}, {"require", "   ", 403}, {"require", uaChrome, 200},
			// Case 10.
			{"abnormal", uaCurl, 200}, {"abnormal", uaOther, 403}, {"abnormal", uaGooglebt, 200}, {"abnormal", "", 403},
			// Case 11.
			{"bots", uaGooglebt, 403}, {"bots", "Baiduspider", 403}, {"bots", uaChrome, 200}, {"bots", uaMobileGB, 200}, {"bots", "", 200},
			{"and", uaChrome, 403}, {"and", uaSafari, 403},
			{"and", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/120.0 Mobile/15E148 Safari/604.1", 200},
			// Any match_mode but "and" is "or".
			{"or", uaChrome, 200}, {"or", uaSafari, 200}, {"or", uaFirefox, 403},
			// Custom PCRE, case-sensitive, unanchored, on the original UA.
			{"custom", uaPython, 403}, {"custom", "Python-Requests/2.31.0", 200}, {"custom", "python-requests/", 200},
			{"custom", "EvilBot", 403}, {"custom", "  EvilBot", 403}, {"custom", "Evilbot", 200}, {"custom", "x EvilBot", 200},
			{"custom", uaChrome, 200}, {"custom", "", 200},
			// A plain pattern matches as a substring; "-" is literal, not a Lua quantifier.
			{"lua-pattern", uaPython, 403},
			// Patterns are ignored while block_custom_ua is off, even an invalid one.
			{"badre-off", uaPython, 200},
		} {
			r.expectStatus(r.uaReq(c.site, c.ua), c.status, fmt.Sprintf("%s with UA %q", c.site, c.ua))
		}
	})

	t.Run("invalid custom PCRE fails closed", func(t *testing.T) {
		for _, ua := range []string{uaChrome, "ok", ""} {
			r.expectFailClosed(r.uaReq("badre", ua))
		}
		if r.countLines("custom_ua_patterns[2] (unclosed is not a valid regular expression: missing closing )") == 0 || r.countLines(" (PCRE: ") == 0 {
			t.Error("the invalid pattern was not logged at load")
		}
	})

}

// The DATAPLANE 2.5 classification tables, transcribed independently of
// the Lua: the first rule with a token in the lower-cased UA wins.
var (
	oracleBrowsers = []struct {
		label           string
		tokens, exclude []string
	}{
		{"WeChat", []string{"micromessenger"}, nil},
		{"Postman", []string{"postman"}, nil},
		{"CLI", []string{"curl/", "wget/"}, nil},
		{"Edge", []string{"edg/", "edgios/", "edga/"}, nil},
		{"Opera", []string{"opr/", "opera"}, nil},
		{"Firefox", []string{"firefox", "fxios"}, nil},
		{"Chrome", []string{"crios", "chrome"}, []string{"chromium"}},
		{"Chromium", []string{"chromium"}, nil},
		{"Safari", []string{"safari"}, nil},
		{"Bot", []string{"bot", "spider", "crawler", "slurp"}, nil},
	}
	oracleOSes = []struct {
		label           string
		tokens, exclude []string
	}{
		{"Android", []string{"android"}, nil},
		{"iOS", []string{"iphone", "ipad", "ipod", "ios"}, nil},
		{"Windows", []string{"windows"}, nil},
		{"macOS", []string{"mac os x", "macintosh", "macos"}, nil},
		{"Chrome OS", []string{"cros"}, nil},
		{"Linux", []string{"linux"}, nil},
		{"Bot", []string{"bot", "spider", "crawler"}, nil},
	}
)

func oracleClassify(ua string) string {
	ual := strings.ToLower(strings.Trim(ua, " \t\n\v\f\r"))
	if ual == "" {
		return "Unknown|Unknown"
	}
	pick := func(rules []struct {
		label           string
		tokens, exclude []string
	}) string {
	rule:
		for _, r := range rules {
			for _, ex := range r.exclude {
				if strings.Contains(ual, ex) {
					continue rule
				}
			}
			for _, tok := range r.tokens {
				if strings.Contains(ual, tok) {
					return r.label
				}
			}
		}
		return "Other"
	}
	return pick(oracleBrowsers) + "|" + pick(oracleOSes)
}

// TestUAClassifierMatchesOracle compares the Lua classifier with the
// tables applied one token at a time, on random User-Agents made of token
// pieces (also overlapping ones), case changes and noise.
func TestUAClassifierMatchesOracle(t *testing.T) {
	startUASecurityRig(t)
	rng := rand.New(rand.NewPCG(25, 14))
	var pieces []string
	for _, r := range oracleBrowsers {
		for _, tok := range append(slices.Clone(r.tokens), r.exclude...) {
			pieces = append(pieces, tok, strings.ToUpper(tok), tok[:len(tok)/2], tok[len(tok)/2:])
		}
	}
	for _, r := range oracleOSes {
		for _, tok := range r.tokens {
			pieces = append(pieces, tok, strings.ToUpper(tok), tok[:len(tok)/2], tok[len(tok)/2:])
		}
	}
	pieces = append(pieces, " ", "/", "(", ";", "Mozilla/5.0", "1", "x", "e", "s", "o", "m", "c", "r", "\t")
	const n = 5000
	uas := make([]string, n)
	for i := range uas {
		var b strings.Builder
		for range rng.IntN(7) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		uas[i] = b.String()
	}
	body, err := json.Marshal(uas)
	if err != nil {
		t.Fatal(err)
	}
	got := send(t, otherIP, http.MethodPost, "http://127.0.0.1/classify-batch", "tools.test", nil, bytes.NewReader(body))
	var labels []string
	if err := json.Unmarshal([]byte(got.body), &labels); err != nil || len(labels) != n {
		t.Fatalf("/classify-batch: %d %.200q: %v", got.status, got.body, err)
	}
	seen := map[string]int{}
	mismatches := 0
	for i, ua := range uas {
		want := oracleClassify(ua)
		seen[want]++
		if labels[i] != want && mismatches < 10 {
			mismatches++
			t.Errorf("classify(%q) = %s, oracle %s", ua, labels[i], want)
		}
	}
	t.Logf("%d User-Agents, %d distinct label pairs", n, len(seen))
}
