// Package landing places a rendered version on disk (PROTOCOL 6): it turns
// the renderer's placeholders into this node's paths, plans every file to
// write or delete, and does so inside a backup transaction that a crash at
// any instant can roll back.
package landing

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"openflare/agent/config"
	"openflare/agent/pages"
	"openflare/agent/selftest"
)

// Paths are where this node keeps everything the rendered config names.
type Paths struct {
	Main              string
	Route             string
	AccessLog         string
	ErrorLog          string
	PID               string
	TempDir           string // VAR/cache/nginx: the five *_temp_path dirs
	ProxyCache        string // VAR/cache/openflare_proxy
	CertDir           string
	OpenRestyCertDir  string
	LuaDir            string
	OpenRestyLuaDir   string
	RuntimeConfigDir  string
	PagesDir          string
	CountryMMDB       string
	CityMMDB          string
	ObservabilityPort int
	// HTTPErrorLog is where requests log their errors (MainText adds it at
	// the http level): client text never reaches ErrorLog, from which the
	// agent reads nginx's own verdicts.
	HTTPErrorLog string
	// SelfTestDir holds the self-test's sockets and log (agent/selftest).
	SelfTestDir string
	// EmptyDir is the root of whatever no site serves: an empty directory
	// instead of nginx's compiled-in html and its welcome page.
	EmptyDir string
}

// FromConfig takes the paths from agent.json's layout (PROTOCOL 6.1),
// the one the commands inspect too.
func FromConfig(c *config.Config) Paths {
	l := c.Layout()
	return Paths{
		Main:              l.Main,
		Route:             l.Route,
		AccessLog:         l.AccessLog,
		ErrorLog:          l.ErrorLog,
		PID:               l.PID,
		TempDir:           l.TempDir,
		ProxyCache:        l.ProxyCache,
		CertDir:           l.CertDir,
		OpenRestyCertDir:  l.OpenRestyCertDir,
		LuaDir:            l.LuaDir,
		OpenRestyLuaDir:   l.OpenRestyLuaDir,
		RuntimeConfigDir:  l.RuntimeConfigDir,
		PagesDir:          l.PagesDir,
		CountryMMDB:       l.CountryMMDB,
		CityMMDB:          l.CityMMDB,
		ObservabilityPort: c.ObservabilityPort,
		HTTPErrorLog:      l.HTTPErrorLog,
		SelfTestDir:       l.SelfTestDir,
		EmptyDir:          l.EmptyDir,
	}
}

// Managed are the directories an apply writes files into: what a backup
// may restore.
func (p Paths) Managed() []string {
	return []string{filepath.Dir(p.Main), filepath.Dir(p.Route), p.CertDir, p.LuaDir, p.RuntimeConfigDir}
}

// tempPaths pairs each nginx *_temp_path directive with its directory
// under TempDir.
var tempPaths = [][2]string{
	{"client_body_temp_path", "client_temp"},
	{"proxy_temp_path", "proxy_temp"},
	{"fastcgi_temp_path", "fastcgi_temp"},
	{"uwsgi_temp_path", "uwsgi_temp"},
	{"scgi_temp_path", "scgi_temp"},
}

// Dirs lists the directories nginx needs before -t can pass.
func (p Paths) Dirs() []string {
	dirs := []string{filepath.Dir(p.Main), filepath.Dir(p.Route), filepath.Dir(p.AccessLog), filepath.Dir(p.ErrorLog), filepath.Dir(p.HTTPErrorLog), filepath.Dir(p.PID), p.ProxyCache, p.CertDir, p.LuaDir, p.RuntimeConfigDir, p.EmptyDir}
	for _, t := range tempPaths {
		dirs = append(dirs, filepath.Join(p.TempDir, t[1]))
	}
	return dirs
}

// MainText turns a rendered main config, adapted to the binary, into the
// one this node runs (step 4 of the rewriting apply's transaction names):
// the placeholders become paths, then the http block gets the node's
// http-level lines, the self-test's server block and the temp paths a
// template lacks, and the WAF's worker initialisation.
func (p Paths) MainText(text string) string {
	text = p.replacer(nginxText).Replace(text)
	insert := p.httpDefaults(text) + p.selfTestServer(text)
	if !strings.Contains(text, "client_body_temp_path") {
		for _, t := range tempPaths {
			insert += "    " + t[0] + " " + filepath.Join(p.TempDir, t[1]) + ";\n"
		}
	}
	text = afterHTTPOpen(text, insert)
	if strings.Contains(text, "lua_shared_dict openflare_waf_config") {
		text = p.wafInit(text)
	}
	return text
}

// httpDefaults are the http-level lines every main config gets: requests
// log to an error log of their own (a client writes what it likes into a
// request's log lines, and none of it may reach the log the agent reads
// nginx's verdicts from), a missing file is not logged (a flood of 404s
// would write each URI), and a server or location with no root of its own
// serves an empty directory, not nginx's compiled-in html.
func (p Paths) httpDefaults(text string) string {
	return fmt.Sprintf("    error_log %s %s;\n    log_not_found off;\n    root %s;\n", p.HTTPErrorLog, errorLogLevel(text), p.EmptyDir)
}

// errorLogLevel is the level of the template's own error log, which the
// requests' log follows: "error" (nginx's default) when it names none.
func errorLogLevel(text string) string {
	for _, l := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), "error_log ")
		if !ok {
			continue
		}
		if f := strings.Fields(strings.TrimSuffix(rest, ";")); len(f) == 2 && f[0] == "__OPENFLARE_ERROR_LOG__" {
			switch f[1] {
			case "debug", "info", "notice", "warn", "error", "crit", "alert", "emerg":
				return f[1]
			}
		}
	}
	return "error"
}

// selfTestServer is the self-test's server block (agent/selftest): a
// config with Lua answers with probe.lua, one without (the safe fallback)
// with nginx alone.
func (p Paths) selfTestServer(text string) string {
	script := ""
	if strings.Contains(text, "_by_lua") || strings.Contains(text, "lua_shared_dict") {
		script = filepath.Join(p.OpenRestyLuaDir, "probe.lua")
	}
	return selftest.Block(p.SelfTestDir, script)
}

// wafInit makes every worker initialise the WAF runtime (PROTOCOL 6.2
// [MUST]): without it every WAF check fails closed.
func (p Paths) wafInit(text string) string {
	lua := p.OpenRestyLuaDir
	if !strings.Contains(text, "lua_package_path") {
		text = afterHTTPOpen(text, fmt.Sprintf("    lua_package_path \"%s/?.lua;%s/?/init.lua;;\";\n", lua, lua))
	}
	lines := strings.SplitAfter(text, "\n")
	replaced := false
	for i, l := range lines {
		body := strings.TrimRight(l, "\n")
		rest := strings.TrimLeft(body, " \t")
		arg, ok := strings.CutPrefix(rest, "init_worker_by_lua_file")
		semi := strings.IndexByte(arg, ';')
		if !ok || arg == "" || (arg[0] != ' ' && arg[0] != '\t') || semi < 0 || strings.TrimSpace(arg[:semi]) == "" {
			continue
		}
		lead := body[:len(body)-len(rest)]
		file := strings.TrimLeft(arg[:semi], " \t")
		lines[i] = lead + `init_worker_by_lua_block { require("waf.runtime").init() dofile("` + file + `") }` + l[len(body):]
		replaced = true
	}
	if replaced {
		return strings.Join(lines, "")
	}
	return afterHTTPOpen(text, "    init_worker_by_lua_block { require(\"waf.runtime\").init() }\n")
}

// afterHTTPOpen inserts text after the first line that opens the http
// block ("http {", any indentation).
func afterHTTPOpen(text, insert string) string {
	for at := 0; at < len(text); {
		end := strings.IndexByte(text[at:], '\n')
		if end < 0 {
			return text
		}
		line := strings.TrimLeft(text[at:at+end], " \t")
		if rest, ok := strings.CutPrefix(line, "http"); ok && strings.HasPrefix(strings.TrimLeft(rest, " \t"), "{") {
			at += end + 1
			return text[:at] + insert + text[at:]
		}
		at += end + 1
	}
	return text
}

// RouteText turns a rendered route config, adapted to the binary, into the
// one this node runs (step 4 of the rewriting apply's transaction names):
// placeholders, the origin error page's {{host}} HTML-escaped (a
// wildcard domain lets a visitor choose the host name; the server's
// rendering inserts it as is, and that text is what its checksum covers),
// no Pages site serving the release marker, and basic auth covering every
// location of the servers it protects.
func (p Paths) RouteText(text string) string {
	return escapeHosts(p.replacer(nginxText).Replace(hidePagesMarker(coverBasicAuth(text))))
}

// render.writeBasicAuth's check, as the first lines of a location, on
// either side of the expected credentials.
const (
	basicAuthHead = "        rewrite_by_lua_block {\n" +
		"            local auth = ngx.var.http_authorization\n" +
		"            if auth ~= \"Basic "
	basicAuthTail = "\" then\n" +
		"                ngx.header[\"WWW-Authenticate\"] = 'Basic realm=\"Restricted\"'\n" +
		"                return ngx.exit(401)\n" +
		"            end\n" +
		"        }\n"
	basicAuthLines = 7
	base64Digits   = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
)

// openLocations are the locations of a protected server that basic auth
// leaves open: the agent's own machinery, the same for every site, which
// serves neither the origin nor the site's files. The PoW endpoints and
// assets are the agent's Lua and files, and a pass they grant only gets
// a request past the WAF, which runs after the check; /sw.js and
// /offline.html are the agent's service worker and offline page; the SW
// challenge is internal and the origin error page a named location, so
// no request reaches either but from another location of the server.
var openLocations = map[string]bool{
	"    location = /.within.website/x/cmd/anubis/api/pass-challenge {\n": true,
	"    location = /.within.website/x/cmd/anubis/api/make-challenge {\n": true,
	"    location /.within.website/x/cmd/anubis/static/ {\n":              true,
	"    location = /sw.js {\n":                                           true,
	"    location = /offline.html {\n":                                    true,
	"    location = /__openflare_sw_challenge {\n":                        true,
	"    location @__openflare_origin_error {\n":                          true,
}

// coverBasicAuth closes what render's basic auth leaves open (DATAPLANE
// 9.1: only `location /`, or a Pages site's `location = /` and `location
// /`, check): in every server block where a location carries the check,
// every other location outside openLocations gets the same check, and the
// Pages API prefix (`location /api`) matches only as a path segment, so
// that /apifoo is the site's, not the API origin's. It works on render's
// own shapes: a server opens with "server {" and closes with "}" at column
// 0, its locations open and close at four spaces; a server of any other
// shape is left as it is.
func coverBasicAuth(text string) string {
	// Its line that names the header goes first: basicAuthHead is too long
	// for strings.Index's vector search, and the slow one takes 4 ms over a
	// thousand routes that have no basic auth.
	if !strings.Contains(text, "ngx.var.http_authorization") || !strings.Contains(text, basicAuthHead) {
		return text
	}
	lines := strings.SplitAfter(text, "\n")
	out := make([]string, 0, len(lines))
	for i := 0; i < len(lines); i++ {
		out = append(out, lines[i])
		if lines[i] != "server {\n" {
			continue
		}
		end := slices.Index(lines[i+1:], "}\n")
		if end < 0 {
			continue
		}
		out = append(out, coverServer(lines[i+1:i+1+end])...)
		i += end
	}
	return strings.Join(out, "")
}

// coverServer is coverBasicAuth for the lines inside one server block.
func coverServer(body []string) []string {
	type location struct{ head, close int }
	var locs []location
	for i := 0; i < len(body); i++ {
		if !strings.HasPrefix(body[i], "    location ") || !strings.HasSuffix(body[i], " {\n") {
			continue
		}
		n := slices.Index(body[i+1:], "    }\n")
		if n < 0 {
			return body
		}
		locs = append(locs, location{i, i + 1 + n})
		i += 1 + n
	}
	check := ""
	var site []string
	for _, l := range locs {
		if c := basicAuthCheck(body[l.head+1 : l.close]); c != "" && check == "" {
			check = c
		}
		if body[l.head] == "    location / {\n" {
			site = body[l.head+1 : l.close]
		}
	}
	if check == "" {
		return body
	}
	out := make([]string, 0, len(body)+2*basicAuthLines*len(locs))
	at := 0
	for _, l := range locs {
		head, inner := body[l.head], body[l.head+1:l.close]
		out = append(out, body[at:l.head+1]...)
		if !openLocations[head] && basicAuthCheck(inner) == "" {
			out = append(out, check)
		}
		out = append(out, inner...)
		if prefix, ok := segmentPrefix(head); ok && site != nil {
			out = append(out, segmentGuard(prefix, check, site)...)
		}
		at = l.close
	}
	return append(out, body[at:]...)
}

// basicAuthCheck is render's check when the location's lines open with
// it, else "".
func basicAuthCheck(inner []string) string {
	if len(inner) < basicAuthLines {
		return ""
	}
	c := strings.Join(inner[:basicAuthLines], "")
	token, ok := strings.CutPrefix(c, basicAuthHead)
	if !ok {
		return ""
	}
	if token, ok = strings.CutSuffix(token, basicAuthTail); !ok || token == "" || strings.Trim(token, base64Digits) != "" {
		return ""
	}
	return c
}

// segmentPrefix is the prefix of a location head that matches by prefix
// but not on a segment boundary (`location /api`, which also takes
// /apifoo); `/`, the PoW assets' `/…/static/`, exact, regex and named
// locations are not such heads.
func segmentPrefix(head string) (string, bool) {
	arg := strings.TrimSuffix(strings.TrimPrefix(head, "    location "), " {\n")
	if !strings.HasPrefix(arg, "/") || strings.HasSuffix(arg, "/") {
		return "", false
	}
	return arg, true
}

// segmentGuard is a regex location nested in `location <prefix>` that
// takes the URIs going on past the prefix without a `/` and serves them as
// the site's `location /` does (its lines, re-indented, checked). Nested,
// it is consulted only for URIs whose longest prefix match is <prefix>, so
// a longer prefix location (the PoW assets) keeps its own. The prefix
// location keeps its name, so proxy_pass maps /api and /api/… onto the
// origin as before: split into `= /api` and `/api/`, a proxy_pass with a
// URI and no rewrite would send /api/x to <uri>x instead of <uri>/x.
func segmentGuard(prefix, check string, site []string) []string {
	lines := strings.Join(site, "")
	if basicAuthCheck(site) == "" {
		lines = check + lines
	}
	lines = "    " + strings.ReplaceAll(strings.TrimSuffix(lines, "\n"), "\n", "\n    ") + "\n"
	return []string{"        location ~ ^" + pcreQuote(prefix) + "[^/] {\n", lines, "        }\n"}
}

// pcreQuote escapes what PCRE reads as syntax. A location prefix of
// render's holds no `\`, `{`, `}` or `$`, so the result is one unquoted
// nginx parameter, as render's own API rewrite pattern is.
func pcreQuote(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`.+*?()|[]^`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// pagesRoot starts the server-level root line of a rendered Pages site.
const pagesRoot = `    root "__OPENFLARE_PAGES_DIR__/`

// hidePagesMarker gives every Pages server a location that answers 404
// for the release marker (PROTOCOL 9: .openflare-pages.json at the top of
// each release, which is the site's root unless it names a root_dir): its
// project, deployment and package hash are the node's business.
func hidePagesMarker(text string) string {
	if !strings.Contains(text, pagesRoot) {
		return text
	}
	var b strings.Builder
	for _, l := range strings.SplitAfter(text, "\n") {
		b.WriteString(l)
		if strings.HasPrefix(l, pagesRoot) {
			b.WriteString("    location = /" + pages.MarkerName + " {\n        return 404;\n    }\n")
		}
	}
	return b.String()
}

// escapeHTML is Lua that turns the characters HTML gives meaning to into
// numeric references.
const escapeHTML = `:gsub("[&<>\"']", function(c) return "&#" .. string.byte(c) .. ";" end)`

var escapeHost = strings.NewReplacer(
	`local host = ngx.var.host or ""`, `local host = (ngx.var.host or "")`+escapeHTML,
	`function() return ngx.var.host or "" end`, `function() return ((ngx.var.host or "")`+escapeHTML+`) end`,
)

// escapeHosts is escapeHost's pass over a route config that has a line it
// rewrites: the replacer looks at every byte, some 5 ms for a thousand
// routes, and a config without the origin error page has none.
func escapeHosts(text string) string {
	if !strings.Contains(text, `ngx.var.host or ""`) {
		return text
	}
	return escapeHost.Replace(text)
}
