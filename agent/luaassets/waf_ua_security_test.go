package luaassets

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/openflare/openflare-agent/testing/benchkit"
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
	allFlags = []string{"sql_injection", "path_traversal", "command_injection", "xss", "ssrf", "file_inclusion", "malicious_upload", "xxe", "crlf_injection"}
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
	for _, f := range allFlags {
		add("s-"+strings.ReplaceAll(f, "_", "-"), "security_check", obj{f: true})
	}
	all := obj{}
	for _, f := range allFlags {
		all[f] = true
	}
	add("s-all", "security_check", all)
	add("s-none", "security_check", obj{})
	noCRLF := obj{}
	for _, f := range allFlags {
		noCRLF[f] = f != "crlf_injection"
	}
	add("s-nocrlf", "security_check", noCRLF)
	add("s-12", "security_check", obj{"path_traversal": true, "file_inclusion": true})
	add("s-truthy", "security_check", obj{"sql_injection": 1, "xss": "true", "ssrf": "1"})
	add("s-falsy", "security_check", obj{"sql_injection": 0, "xss": "yes", "ssrf": false, "path_traversal": "0"})
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
	// A WAF-less server exposing the classifier and an in-worker timing loop.
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
        location = /hits {
            client_body_buffer_size 4m;
            client_max_body_size 4m;
            content_by_lua_block {
                local cjson = require("cjson.safe")
                local security = require("waf.security")
                ngx.req.read_body()
                local req = assert(cjson.decode(ngx.req.get_body_data()))
                local config = {}
                for _, f in ipairs(req.flags) do config[f] = true end
                local out = {}
                for i, str in ipairs(req.strings) do
                    out[i] = security.hits(config, req.set, str)
                end
                ngx.print(cjson.encode(out))
            }
        }
        location = /time-security {
            content_by_lua_block {
                local security = require("waf.security")
                local config = {}
                for _, f in ipairs(security.FLAGS) do config[f] = true end
                local n = 2000
                for _ = 1, 100 do assert(security.check(config) == true) end
                local wall, cpu = math.huge, math.huge
                for _ = 1, 3 do
                    ngx.update_time()
                    local t0, c0 = ngx.now(), os.clock()
                    for _ = 1, n do security.check(config) end
                    local c1 = os.clock()
                    ngx.update_time()
                    wall = math.min(wall, (ngx.now() - t0) * 1e6 / n)
                    cpu = math.min(cpu, (c1 - c0) * 1e6 / n)
                end
                ngx.say(string.format("%.2f %.2f", wall, cpu))
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
		if r.countLines("is not a valid PCRE") == 0 {
			t.Error("the invalid pattern was not logged at load")
		}
	})

	t.Run("security_check flags", func(t *testing.T) {
		type sc struct {
			target string
			header http.Header
			status int
		}
		cases := map[string][]sc{
			"path_traversal": {
				{"/dl?f=..%2F..%2Fetc%2Fpasswd", nil, 403},
				{"/?f=..%5Cwin.ini", nil, 403},
				{"/?f=....%2F%2Fx", nil, 403},
				{"/static/..%5c..%5cboot.ini", nil, 403}, // PATH: nginx decodes %5c to a backslash
				{"/?f=%252e%252e%252f", nil, 403},        // double-encoded
				{"/?f=%25252e%25252e%25252f", nil, 403},  // %252e%252e after two decodes
				{"/etc/passwd", nil, 403},
				{"/a/../b", nil, 200}, // nginx resolves the segment first
				{"/?f=v1..2/x", nil, 200},
				{"/?f=a.b%2Fc", nil, 200},
				{"/", http.Header{"Cookie": {"a=../../etc"}}, 200}, // headers are not scanned for this flag
			},
			"file_inclusion": {
				{"/?p=php%3A%2F%2Ffilter", nil, 403},
				{"/?p=FILE:///x", nil, 403},
				{"/?p=%2Fproc%2Fself%2Fenviron", nil, 403},
				{"/?p=data://text/plain,x", nil, 403},
				{"/?p=x%252500", nil, 403}, // nginx decodes once, then d1 = "x%00"
				{"/?p=x%2500", nil, 200},   // only the decoded forms are searched: d1 is "x" NUL
				{"/?p=phpinfo", nil, 200},
				{"/?p=data://image", nil, 200},
				{"/?p=/proc/cpuinfo", nil, 200},
			},
			"sql_injection": {
				{"/?q=1%27%20union%20select%201--", nil, 403},
				{"/?q=1%27%20and%20sleep(5)--", nil, 403},
				{"/?q=sleep(%201", nil, 403},
				{"/?q=BENCHMARK(1000000,md5(1))", nil, 403},
				{"/?q=x%2527%2520UNION%2520SELECT%2520y", nil, 403}, // double-encoded beyond nginx's own decode
				{"/?q=a%20or%201=1", nil, 403},
				{"/?q=1/**/and", nil, 403},
				{"/?union+select=1", nil, 403}, // keys count
				{"/", http.Header{"Cookie": {"q=1' union select 1"}}, 403},
				{"/", http.Header{"Referer": {"http://x/?id=1 UNION SELECT 2"}}, 403},
				{"/?name=sleep(better)", nil, 200},
				{"/?name=sleep()", nil, 200},
				{"/?q=unionselect", nil, 200},
				{"/?q=selection%20union", nil, 200},
				{"/", http.Header{"User-Agent": {"x union select y"}}, 200},
				{"/", http.Header{"X-Anything": {"1 union select 1"}}, 200},
			},
			"command_injection": {
				{"/?c=x%3Bwget%20http://e", nil, 403},
				{"/?c=a|sh%09-c", nil, 403},
				{"/?c=%24(id)", nil, 403},
				{"/?c=%60id%60", nil, 403},
				{"/?c=x%26%26curl", nil, 403},
				{"/?c=cmd.exe%20/c%20dir", nil, 403},
				{"/", http.Header{"Cookie": {"s=1;bash -i"}}, 403},
				{"/?c=a%26%26b", nil, 200},
				{"/?c=a||b", nil, 200},
				{"/?c=x;shell", nil, 200},
				{"/?c=powershell", nil, 200},
			},
			"xss": {
				{"/?x=%3Cscript%3Ealert(1)%3C/script%3E", nil, 403},
				{"/?x=%3CIFRAME%20src=x", nil, 403},
				{"/?x=%3Cimg%20src=x%20onerror=alert(1)%3E", nil, 403},
				{"/?x=javascript:alert(1)", nil, 403},
				{"/?x=%22javascript:%20(1)", nil, 403},
				{"/?x=a=javascript:document.x", nil, 403},
				{"/?x=javascript:void%20%20(0)", nil, 403},
				{"/?x=eval(%22x%22)", nil, 403},
				{"/?x=eval(%20(1))", nil, 403},
				{"/", http.Header{"Referer": {"http://x/?q=<script>"}}, 403},
				{"/?x=javascript:foo", nil, 200},
				{"/?x=learn%20javascript:%20(1)", nil, 200}, // not after = " ' ( < ; ,
				{"/?x=eval(x)%20eval(%22y%22)", nil, 200},   // only the first eval( counts
				{"/?x=evaluate(1)", nil, 200},
				{"/?x=onerror", nil, 200},
			},
			"ssrf": {
				{"/?u=http://127.0.0.1/admin", nil, 403},
				{"/?u=HTTP://LOCALHOST:8080", nil, 403},
				{"/?u=http://169.254.169.254/latest/meta-data", nil, 403},
				{"/?u=gopher://x", nil, 403},
				{"/?u=http://%5B::1%5D/", nil, 403},
				{"/", http.Header{"Referer": {"http://metadata.google.internal/"}}, 403},
				{"/?u=http://127.0.0.2/", nil, 200},
				{"/?u=localhost", nil, 200},
				{"/?u=https://example.com/", nil, 200},
			},
			"crlf_injection": {
				{"/?x=a%0d%0aSet-Cookie:x", nil, 403},
				{"/?x=a%250d%250aX", nil, 403},
				{"/?x=a%25250d%25250aX", nil, 403},
				{"/?x=a%0aX", nil, 200},
				{"/?x=a%0dX", nil, 200},
			},
			// Body-only flags: nothing in the URL or headers counts.
			"malicious_upload": {
				{"/?f=shell.php.jpg", nil, 200},
			},
			"xxe": {
				{"/?x=%3C!ENTITY%20x%20SYSTEM%20%22file:///etc/passwd%22%3E", nil, 200},
			},
		}
		for _, f := range allFlags {
			for _, c := range cases[f] {
				site := "s-" + strings.ReplaceAll(f, "_", "-")
				got := r.request(otherIP, http.MethodGet, site+".test", c.target, c.header)
				r.expectStatus(got, c.status, fmt.Sprintf("%s: GET %s %v", f, c.target, c.header))
				if got.status == 403 && got.body != "security_check\n" {
					t.Errorf("%s: GET %s: body %q", f, c.target, got.body)
				}
				if c.status == 200 {
					// Every flag's near-miss passes the all-flags node too
					// unless another flag catches it.
					continue
				}
				r.expectStatus(r.request(otherIP, http.MethodGet, "s-all.test", c.target, c.header), 403, "all flags: GET "+c.target)
			}
		}
	})

	t.Run("security_check case 12 and 13", func(t *testing.T) {
		for _, c := range []struct {
			site, target string
			header       http.Header
			status       int
		}{
			{"s-12", "/ok", nil, 200},
			{"s-12", "/dl?f=..%2F..%2Fetc%2Fpasswd", nil, 403},
			{"s-12", "/?p=php%3A%2F%2Ffilter", nil, 403},
			{"s-12", "/?f=%252e%252e%252f", nil, 403},
			{"s-sql-injection", "/?q=1%27%20union%20select%201--", nil, 403},
			{"s-sql-injection", "/?name=sleep(better)", nil, 200},
			{"s-sql-injection", "/?q=1%27%20and%20sleep(5)--", nil, 403},
			{"s-sql-injection", "/", http.Header{"Cookie": {"q=1' union select 1"}}, 403},
			{"s-sql-injection", "/", http.Header{"User-Agent": {"x union select y"}}, 200},
		} {
			got := r.request(otherIP, http.MethodGet, c.site+".test", c.target, c.header)
			r.expectStatus(got, c.status, c.site+": GET "+c.target)
			if c.status == 403 && got.body != "security_check\n" {
				t.Errorf("%s %s: body %q", c.site, c.target, got.body)
			}
		}
	})

	t.Run("security_check flag values", func(t *testing.T) {
		r.expectStatus(r.get(otherIP, "s-none.test", "/?q=1%27%20union%20select%201--%3Cscript%3E../../etc/passwd"), 200, "no flags")
		for _, target := range []string{"/?q=1%27%20union%20select%201", "/?x=%3Cscript%3E", "/?u=http://localhost/"} {
			r.expectStatus(r.get(otherIP, "s-truthy.test", target), 403, "1/\"true\"/\"1\" flags: "+target)
			r.expectStatus(r.get(otherIP, "s-falsy.test", target), 200, "0/\"yes\"/false flags: "+target)
		}
		r.expectStatus(r.get(otherIP, "s-falsy.test", "/?f=../../x"), 200, "path_traversal \"0\"")
	})

	t.Run("security_check bodies", func(t *testing.T) {
		post := func(site, ct string, body io.Reader) reply {
			t.Helper()
			h := http.Header{}
			if ct != "" {
				h["Content-Type"] = []string{ct}
			}
			return send(t, otherIP, http.MethodPost, "http://127.0.0.1/", site+".test", h, body)
		}
		form := "application/x-www-form-urlencoded"
		attack := "q=1%27+union+select+1"
		pad := func(n int) string { return "pad=" + strings.Repeat("a", n-len(attack)-5) + "&" + attack }
		multipart := func(filename, ctype string) string {
			return "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + filename + "\"\r\nContent-Type: " + ctype + "\r\n\r\nhello\r\n--XyZ--\r\n"
		}
		xxe := `<!DOCTYPE r [<!ENTITY e SYSTEM "file:///etc/passwd">]><r>&e;</r>`
		for _, c := range []struct {
			name, site, ct, body string
			chunked              bool
			status               int
		}{
			{"small body scanned", "s-sql-injection", form, attack, false, 403},
			{"double-encoded body", "s-sql-injection", form, "q=1%2527%2bunion%2bselect%2b1", false, 403},
			{"clean body", "s-sql-injection", form, "q=hello+world", false, 200},
			{"4 KiB body in memory", "s-sql-injection", form, pad(4096), false, 403},
			// nginx keeps up to 1.25 × client_body_buffer_size in memory.
			{"20 KiB body in a temp file", "s-sql-injection", form, pad(20 * 1024), false, 200},
			{"body over 64 KiB", "s-sql-injection", form, pad(70000), false, 200},
			{"chunked body", "s-sql-injection", form, attack, true, 200},
			{"body path traversal", "s-path-traversal", form, "f=..%2F..%2Fx", false, 403},
			{"body crlf", "s-crlf-injection", "text/plain", "a\r\nb", false, 403},
			{"multipart php upload", "s-malicious-upload", "multipart/form-data; boundary=XyZ", multipart("shell.php.jpg", "image/jpeg"), false, 403},
			{"multipart x-php type", "s-malicious-upload", "Multipart/Form-Data; boundary=XyZ", multipart("a.txt", "application/x-php"), false, 403},
			{"multipart phar", "s-malicious-upload", "multipart/form-data; boundary=XyZ", multipart("x.phar", "application/octet-stream"), false, 403},
			{"multipart clean upload", "s-malicious-upload", "multipart/form-data; boundary=XyZ", multipart("photo.jpg", "image/jpeg"), false, 200},
			{"upload tokens outside multipart", "s-malicious-upload", "text/plain", multipart("shell.php.jpg", "image/jpeg"), false, 200},
			{"xxe in application/xml", "s-xxe", "application/xml", xxe, false, 403},
			{"xxe in image/svg+xml", "s-xxe", "image/svg+xml", xxe, false, 403},
			{"xxe with <?xml in text/plain", "s-xxe", "text/plain", `<?xml version="1.0"?>` + xxe, false, 403},
			{"xxe url-encoded with <?xml", "s-xxe", form, url.QueryEscape(`<?xml version="1.0"?>` + xxe), false, 403},
			{"entity without xml", "s-xxe", "text/plain", xxe, false, 200},
			{"xml without entity", "s-xxe", "application/xml", `<?xml version="1.0"?><r>file</r>`, false, 200},
			{"all flags small body", "s-all", form, attack, false, 403},
			// crlf_injection searches the body too, and multipart bodies are
			// made of CRLF lines: with every flag on, any multipart upload is refused.
			{"all flags clean multipart", "s-all", "multipart/form-data; boundary=XyZ", multipart("photo.jpg", "image/jpeg"), false, 403},
			{"all flags but crlf, clean multipart", "s-nocrlf", "multipart/form-data; boundary=XyZ", multipart("photo.jpg", "image/jpeg"), false, 200},
			{"all flags but crlf, php upload", "s-nocrlf", "multipart/form-data; boundary=XyZ", multipart("shell.php.jpg", "image/jpeg"), false, 403},
		} {
			var body io.Reader = strings.NewReader(c.body)
			if c.chunked {
				body = io.MultiReader(strings.NewReader(c.body)) // unknown length: chunked
			}
			got := post(c.site, c.ct, body)
			r.expectStatus(got, c.status, c.name)
		}
	})

	t.Run("body not scanned but the query still is", func(t *testing.T) {
		// DATAPLANE 10: a body too large, in a temp file or chunked is
		// skipped; the other inputs are still scanned.
		big := strings.Repeat("a", 70000)
		got := send(t, otherIP, http.MethodPost, "http://127.0.0.1/?q=1%27%20union%20select%201", "s-sql-injection.test", nil, strings.NewReader(big))
		r.expectStatus(got, 403, "large body, attack in the query")
		got = send(t, otherIP, http.MethodPost, "http://127.0.0.1/?q=ok", "s-sql-injection.test", http.Header{"Cookie": {"x=1 union select 2"}}, io.MultiReader(strings.NewReader("x")))
		r.expectStatus(got, 403, "chunked body, attack in the cookie")
	})
}

// TestSecurityCheckInWorker reports (does not assert) what a
// security_check node with all nine flags costs on a clean 4 KiB query
// string, timed inside a worker; testing/wafbench (make bench) measures it
// through nginx.
func TestSecurityCheckInWorker(t *testing.T) {
	r := startUASecurityRig(t)
	got := r.request(otherIP, http.MethodGet, "tools.test", "/time-security?"+benchkit.CleanQuery4K(), nil)
	if got.status != 200 {
		t.Fatalf("time-security: %d %q", got.status, got.body)
	}
	fields := strings.Fields(got.body)
	if len(fields) != 2 {
		t.Fatalf("time-security: %q", got.body)
	}
	t.Logf("inside a worker, security_check with all nine flags on the 4 KiB query: %s µs/check wall, %s µs/check CPU", fields[0], fields[1])
}

// The DATAPLANE 2.6 token tables, transcribed independently of the Lua,
// for the cross-check below (QUERY set, malicious_upload and xxe excluded).
var oracleTokens = map[string][]string{
	"path_traversal":    {"../", `..\`, "..%2f", "..%5c", "%2e%2e/", `%2e%2e\`, "%252e%252e", "....//", "/etc/passwd"},
	"file_inclusion":    {"php://", "file://", "zip://", "data://text", "expect://", "/etc/passwd", "/proc/self", "%00"},
	"sql_injection":     {"union select", " or 1=1", "' or '", `" or "`, "information_schema", "xp_cmdshell", "load_file(", " into outfile", "/**/", "/*!", "*/--", "@@version"},
	"command_injection": {";wget", ";curl", ";bash", ";sh ", "|bash", "|sh ", "|sh\t", "`id`", "$(id)", "&&wget", "&&curl", "&&bash", "&&sh ", "||wget", "||curl", "||bash", "/bin/sh ", "/bin/bash ", "cmd.exe /c", "powershell -", "powershell.exe"},
	"xss":               {"<script", "<iframe", "onerror=", "onload=", "onmouseover=", "document.cookie"},
	"ssrf":              {"http://127.0.0.1", "https://127.0.0.1", "http://localhost", "https://localhost", "http://0.0.0.0", "https://0.0.0.0", "http://[::1]", "https://[::1]", "://169.254.", "169.254.169.254", "metadata.google", "file://", "gopher://", "dict://"},
	"crlf_injection":    {"%0d%0a", "\r\n"},
}

const (
	oracleSpace = `[\t\n\v\f\r ]`
	oracleQuote = "[\"'`(]"
)

var (
	oracleSleep = regexp.MustCompile(`(?:sleep|benchmark)\(` + oracleSpace + `*[0-9]`)
	oracleJS    = regexp.MustCompile(`(?:^|[="'(<;,])javascript:` + oracleSpace + "*(?:" + oracleQuote + `|(?:alert|void|eval)` + oracleSpace + `*\(|window\.|document\.)`)
	oracleEval  = regexp.MustCompile(`^` + oracleSpace + "*" + oracleQuote)
)

func oracleDecode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b.WriteByte(' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			v, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b.WriteByte(byte(v))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func oracleHit(flags []string, s string) bool {
	d1 := oracleDecode(s)
	forms := []string{strings.ToLower(d1)}
	if d2 := strings.ToLower(oracleDecode(d1)); d2 != forms[0] {
		forms = append(forms, d2)
	}
	for _, n := range forms {
		for _, f := range flags {
			for _, tok := range oracleTokens[f] {
				if strings.Contains(n, tok) {
					return true
				}
			}
			switch f {
			case "sql_injection":
				if oracleSleep.MatchString(n) {
					return true
				}
			case "xss":
				if oracleJS.MatchString(n) {
					return true
				}
				if i := strings.Index(n, "eval("); i >= 0 && oracleEval.MatchString(n[i+5:]) {
					return true
				}
			}
		}
	}
	return false
}

// TestSecurityScannerMatchesOracle compares the Lua automaton with a
// straightforward implementation of DATAPLANE 2.6 (substring search and
// regular expressions on both normalised forms) on random strings built
// from token pieces, encodings, case changes and noise.
func TestSecurityScannerMatchesOracle(t *testing.T) {
	startUASecurityRig(t)
	rng := rand.New(rand.NewPCG(14, 26))
	var pieces []string
	for _, toks := range oracleTokens {
		for _, tok := range toks {
			pieces = append(pieces, tok, strings.ToUpper(tok))
			if len(tok) > 2 {
				k := 1 + rng.IntN(len(tok)-1)
				pieces = append(pieces, tok[:k], tok[k:], url.QueryEscape(tok), strings.ReplaceAll(url.QueryEscape(tok), "%", "%25"))
			}
		}
	}
	pieces = append(pieces, "sleep(", "benchmark(", "javascript:", "JavaScript:", "eval(", "alert", "void", "window.", "document.",
		" ", "\t", "\v", "\r", "\n", "+", "%", "%2", "%25", "%2e", "%2E", "%252e", "%20", "%09", "%28", "%27", "%22",
		"(", ")", "=", "'", "\"", "`", "<", ";", ",", "&", "|", "1", "5", "x", "a", "b", "c", "e", "l", "s", "/", ".", "..")
	for _, set := range []struct {
		name  string
		flags []string
	}{
		{"QUERY", []string{"path_traversal", "file_inclusion", "sql_injection", "command_injection", "xss", "ssrf", "crlf_injection"}},
		{"QUERY", []string{"xss"}},
		{"QUERY", []string{"sql_injection"}},
		{"HDR", []string{"sql_injection", "command_injection", "xss", "ssrf", "crlf_injection"}},
		{"PATH", []string{"path_traversal", "file_inclusion"}},
	} {
		const n = 4000
		strs := make([]string, n)
		for i := range strs {
			var b strings.Builder
			for range 1 + rng.IntN(8) {
				b.WriteString(pieces[rng.IntN(len(pieces))])
			}
			strs[i] = b.String()
		}
		body, err := json.Marshal(obj{"flags": set.flags, "set": set.name, "strings": strs})
		if err != nil {
			t.Fatal(err)
		}
		got := send(t, otherIP, http.MethodPost, "http://127.0.0.1/hits", "tools.test", nil, bytes.NewReader(body))
		var hits []bool
		if err := json.Unmarshal([]byte(got.body), &hits); err != nil || len(hits) != n {
			t.Fatalf("/hits: %d %.200q: %v", got.status, got.body, err)
		}
		var positives, mismatches int
		for i, s := range strs {
			want := oracleHit(set.flags, s)
			if want {
				positives++
			}
			if hits[i] != want && mismatches < 10 {
				mismatches++
				t.Errorf("%s %v: %q: Lua %v, oracle %v", set.name, set.flags, s, hits[i], want)
			}
		}
		t.Logf("%s %v: %d strings, %d hits", set.name, set.flags, n, positives)
	}
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
