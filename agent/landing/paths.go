// Package landing places a rendered version on disk (PROTOCOL 6): it turns
// the renderer's placeholders into this node's paths, plans every file to
// write or delete, and does so inside a backup transaction that a crash at
// any instant can roll back.
package landing

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/openflare/openflare-agent/agent/config"
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
}

// FromConfig derives the paths from agent.json (PROTOCOL 6.1).
func FromConfig(c *config.Config) Paths {
	// VAR is three levels above the access log (DD/var by default); config
	// always fills access_log_path.
	v := filepath.Dir(filepath.Dir(filepath.Dir(c.AccessLogPath)))
	return Paths{
		Main:              c.MainConfigPath,
		Route:             c.RouteConfigPath,
		AccessLog:         c.AccessLogPath,
		ErrorLog:          filepath.Join(filepath.Dir(c.AccessLogPath), "error.log"),
		PID:               filepath.Join(v, "run", "nginx.pid"),
		TempDir:           filepath.Join(v, "cache", "nginx"),
		ProxyCache:        filepath.Join(v, "cache", "openflare_proxy"),
		CertDir:           c.CertDir,
		OpenRestyCertDir:  c.OpenRestyCertDir,
		LuaDir:            c.LuaDir,
		OpenRestyLuaDir:   c.OpenRestyLuaDir,
		RuntimeConfigDir:  c.RuntimeConfigDir,
		PagesDir:          c.PagesDir,
		CountryMMDB:       c.MMDBPath,
		CityMMDB:          c.CityMMDBPath,
		ObservabilityPort: c.ObservabilityPort,
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
	dirs := []string{filepath.Dir(p.Main), filepath.Dir(p.Route), filepath.Dir(p.AccessLog), filepath.Dir(p.ErrorLog), filepath.Dir(p.PID), p.ProxyCache, p.CertDir, p.LuaDir, p.RuntimeConfigDir}
	for _, t := range tempPaths {
		dirs = append(dirs, filepath.Join(p.TempDir, t[1]))
	}
	return dirs
}

func (p Paths) replacer() *strings.Replacer {
	return strings.NewReplacer(
		"__OPENFLARE_ROUTE_CONFIG__", p.Route,
		"__OPENFLARE_ACCESS_LOG__", p.AccessLog,
		"__OPENFLARE_ERROR_LOG__", p.ErrorLog,
		"__OPENFLARE_PID_PATH__", p.PID,
		"pid logs/nginx.pid;", "pid "+p.PID+";",
		"__OPENFLARE_NGINX_CACHE_DIR__", p.TempDir,
		"__OPENFLARE_PROXY_CACHE_PATH__", p.ProxyCache,
		"/var/cache/openresty", p.ProxyCache,
		"__OPENFLARE_LUA_DIR__", p.OpenRestyLuaDir,
		"__OPENFLARE_OBSERVABILITY_LISTEN__", "127.0.0.1:"+strconv.Itoa(p.ObservabilityPort),
		"__OPENFLARE_OBSERVABILITY_PORT__", strconv.Itoa(p.ObservabilityPort),
		"__OPENFLARE_ERROR_PAGE_TMPL__", filepath.Join(p.OpenRestyCertDir, "error_pages", "origin_error.html.tmpl"),
		"__OPENFLARE_SW_DIR__", filepath.Join(p.OpenRestyCertDir, "sw"),
		"__OPENFLARE_POW_STATIC_DIR__", filepath.Join(p.OpenRestyLuaDir, "pow", "static"),
		"__OPENFLARE_CERT_DIR__", p.OpenRestyCertDir,
		"__OPENFLARE_PAGES_DIR__", p.PagesDir,
	)
}

// MainText turns a rendered main config into the one this node runs.
func (p Paths) MainText(text string) string {
	text = p.replacer().Replace(text)
	if !strings.Contains(text, "client_body_temp_path") {
		var b strings.Builder
		for _, t := range tempPaths {
			fmt.Fprintf(&b, "    %s %s;\n", t[0], filepath.Join(p.TempDir, t[1]))
		}
		text = afterHTTPOpen(text, b.String())
	}
	text = afterHTTPOpen(text, p.probeServer(text))
	if strings.Contains(text, "lua_shared_dict openflare_waf_config") {
		text = p.wafInit(text)
	}
	return text
}

// ProbeAddr is where the agent's self-probe listens before its set is
// stamped with an address of the generation's own (probeAddrFor), and in
// configs landed by older releases: a loopback address of the agent's (all
// of 127/8 is local on Linux), so the probe server is never the default
// server of a port the template's servers use, and no site or access log
// sees the probe.
const ProbeAddr = "127.79.70.1"

// probeMarker names the probe server; agent/nginx looks for it before
// probing (nginx.ProbeMarker).
const probeMarker = "server_name openflare-agent-probe;"

// ProbePath is the probe's location.
const ProbePath = "/openflare/agent-probe"

// ProbeURL is the address the agent sends its self-probe to.
func (p Paths) ProbeURL() string {
	return "http://" + ProbeAddr + ":" + strconv.Itoa(p.ObservabilityPort) + ProbePath
}

// probeServer is the self-probe's server block. With Lua it runs probe.lua
// in a worker (the same files, runtime and temp directories the sites
// use); a config without Lua (the safe fallback) only proves a worker
// answers.
func (p Paths) probeServer(text string) string {
	handler := `return 200 "ok $openflare_generation\n";`
	if strings.Contains(text, "_by_lua") || strings.Contains(text, "lua_shared_dict") {
		handler = "content_by_lua_file " + filepath.Join(p.OpenRestyLuaDir, "probe.lua") + ";"
	}
	return fmt.Sprintf(`    # openflare-agent self-probe: loopback only, called by the agent after each reload.
    server {
        listen %s:%d;
        %s
        access_log off;
        set $openflare_generation "%s";
        location = %s {
            %s
        }
        location / {
            return 404;
        }
    }
`, ProbeAddr, p.ObservabilityPort, probeMarker, generationSlot, ProbePath, handler)
}

// The probe answers "ok <generation>", the generation being a hash of
// everything the apply lands: an answer from a worker of the previous
// configuration (still accepting for a few milliseconds after a reload)
// is told apart from one of the new, so the reload is confirmed as soon as
// a new worker serves, without waiting for the old ones to leave. The slot
// holds the place until the set is complete (Set.stamp).
const (
	generationSlot = "pending-generation"
	// generationPrefix starts the line of a landed main config that names
	// its generation; agent/nginx reads it back (its generationLine) to
	// check the probe's answer.
	generationPrefix = `set $openflare_generation "`
)

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

// RouteText turns a rendered route config into the one this node runs:
// placeholders, and the origin error page's {{host}} HTML-escaped (a
// wildcard domain lets a visitor choose the host name; the server's
// rendering inserts it as is, and that text is what its checksum covers).
func (p Paths) RouteText(text string) string {
	return escapeHost.Replace(p.replacer().Replace(text))
}

// escapeHTML is Lua that turns the characters HTML gives meaning to into
// numeric references.
const escapeHTML = `:gsub("[&<>\"']", function(c) return "&#" .. string.byte(c) .. ";" end)`

var escapeHost = strings.NewReplacer(
	`local host = ngx.var.host or ""`, `local host = (ngx.var.host or "")`+escapeHTML,
	`function() return ngx.var.host or "" end`, `function() return ((ngx.var.host or "")`+escapeHTML+`) end`,
)
