// Package policy decides what a server-sent nginx config may do on this
// node. The rules are the node owner's (agent.json), not the server's: the
// control plane is trusted with the node's sites, not with its machine. A
// config that runs code (Lua, Perl, JavaScript), loads modules, sets the
// environment, asks for root workers, connects to local sockets or names a
// file outside the agent's tree is refused before anything reaches nginx,
// `nginx -t` included (which runs as root and executes init Lua); so is one
// that proxies to a link-local or cloud metadata address (CheckOrigins).
//
// The check reads the rendered text with its placeholders intact: every
// path the agent manages is written as __OPENFLARE_*__ there, so "inside
// the agent's tree" is "rooted at a placeholder".
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// ErrRefused marks a config the policy refuses.
var ErrRefused = errors.New("refused by the node's template policy")

// Policy is the node owner's rule set.
type Policy struct {
	// Trusted turns the checks off (agent.json "template_policy":
	// "trusted"): upstream's behaviour, for owners who want it.
	Trusted bool
	// Allowed are absolute directories the owner lets configs name
	// besides the agent's own tree (agent.json "allowed_paths").
	Allowed []string
	// AllowLinkLocalOrigins lets configs proxy to link-local and cloud
	// metadata addresses (agent.json "allow_link_local_origins"), which
	// CheckOrigins otherwise refuses.
	AllowLinkLocalOrigins bool
	// Blind makes the policy's reader miss every directive of this name:
	// a test hook (agent/testhook), so end-to-end tests can prove that
	// the nginx parse (ParseCopy) refuses what the reader did not see.
	Blind string
}

// Check reviews a rendered main config and route config.
func (p Policy) Check(mainText, routeText string) error {
	if p.Trusted {
		return nil
	}
	if err := p.checkMain(mainText, false, nil); err != nil {
		return err
	}
	// The route config is the agent's own rendering of validated fields;
	// only the Pages root (local_root) and aliases carry server paths.
	for i, line := range strings.Split(routeText, "\n") {
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, "root") && !strings.HasPrefix(t, "alias") {
			continue
		}
		dirs, err := parse(t)
		if err != nil || len(dirs) != 1 || (dirs[0].name != "root" && dirs[0].name != "alias") {
			continue // a Lua line that merely starts with the word
		}
		d := dirs[0]
		if len(d.args) != 1 {
			return fmt.Errorf("%w: route config line %d: %s: %d arguments", ErrRefused, i+1, d.name, len(d.args))
		}
		if why := p.path(d.name, d.args[0]); why != "" {
			return fmt.Errorf("%w: route config line %d: %s: %s", ErrRefused, i+1, d.name, why)
		}
	}
	return nil
}

// CheckAdapted reviews the main config once the agent adapted it to the
// binary (agent/nginx): adapting rewrites and drops whole lines, which
// must not change what nginx reads. modules are the load_module paths the
// agent itself adds; the user line is the agent's own choice.
func (p Policy) CheckAdapted(mainText string, modules []string) error {
	if p.Trusted {
		return nil
	}
	return p.checkMain(mainText, true, modules)
}

func (p Policy) checkMain(mainText string, adapted bool, modules []string) error {
	if i := strings.IndexFunc(mainText, control); i >= 0 {
		return fmt.Errorf("%w: main config line %d: control character %q", ErrRefused, 1+strings.Count(mainText[:i], "\n"), mainText[i])
	}
	dirs, err := parseText(mainText, true, p.Blind)
	if err != nil {
		return fmt.Errorf("%w: main config: %v", ErrRefused, err)
	}
	for _, d := range dirs {
		if d.name == "error_log" && d.depth > 0 && len(d.args) > 0 && (d.args[0] == "__OPENFLARE_ERROR_LOG__" || d.args[0] == "stderr") {
			// Requests log to a file of their own (landing adds it at the
			// http level): what a client can write never lands in the log
			// the agent reads nginx's verdicts from.
			return fmt.Errorf("%w: main config line %d: error_log %s inside a block: only the main context may name the master's log", ErrRefused, d.line, d.args[0])
		}
		switch {
		case adapted && d.name == "load_module" && len(d.args) == 1 && slices.Contains(modules, d.args[0]):
			continue
		case adapted && d.name == "user":
			continue
		}
		if why := p.directive(d); why != "" {
			return fmt.Errorf("%w: main config line %d: %s: %s", ErrRefused, d.line, d.name, why)
		}
	}
	return nil
}

// control reports a byte nginx would take into a word but no editor shows
// (NUL, escape sequences): tab, CR and LF are the only control characters
// a config needs.
func control(r rune) bool {
	return r < 0x20 && r != '\t' && r != '\r' && r != '\n' || r == 0x7f
}

// Directives that run code or change the process, refused outright.
var refused = map[string]string{
	"load_module":       "loads a module into nginx",
	"env":               "sets the environment of nginx and its Lua",
	"working_directory": "moves nginx's working directory",
	"daemon":            "changes how the agent controls nginx",
	"master_process":    "changes how the agent controls nginx",
	"lua_package_path":  "sets where Lua code is loaded from (the agent sets it)",
	"lua_package_cpath": "sets where native Lua modules are loaded from",
}

// pathRules are the directives whose first argument names a file or
// directory, with the placeholders (or literals) each may use: every path
// the agent manages is one placeholder, so a log cannot be pointed at a
// Lua file or an include at a server-shipped support file.
var pathRules = map[string][]string{
	"include":    {"__OPENFLARE_ROUTE_CONFIG__", "mime.types"},
	"access_log": {"__OPENFLARE_ACCESS_LOG__"},
	"error_log":  {"__OPENFLARE_ERROR_LOG__"},
	"pid":        {"__OPENFLARE_PID_PATH__", "logs/nginx.pid"},
	"root":       {"__OPENFLARE_PAGES_DIR__/", "__OPENFLARE_PAGES_DIR__"},
	"alias":      {"__OPENFLARE_POW_STATIC_DIR__/", "__OPENFLARE_SW_DIR__/", "__OPENFLARE_PAGES_DIR__/"},
}

// tempPath, cachePath and certPath directives share a rule.
var (
	tempPathRule  = []string{"__OPENFLARE_NGINX_CACHE_DIR__/"}
	cachePathRule = []string{"__OPENFLARE_PROXY_CACHE_PATH__", "__OPENFLARE_PROXY_CACHE_PATH__-", "/var/cache/openresty"}
	certPathRule  = []string{"__OPENFLARE_CERT_DIR__/"}
	noAgentPath   = []string{}
)

// rule returns the placeholders a path directive may use, and whether the
// directive takes a path at all.
func rule(name string) ([]string, bool) {
	switch {
	case pathRules[name] != nil:
		return pathRules[name], true
	case strings.HasSuffix(name, "_temp_path"):
		return tempPathRule, true
	case strings.HasSuffix(name, "_cache_path"):
		return cachePathRule, true
	case (strings.HasPrefix(name, "ssl_") || strings.Contains(name, "_ssl_")) &&
		(strings.HasSuffix(name, "_certificate") || strings.HasSuffix(name, "_certificate_key") || strings.HasSuffix(name, "_file") ||
			strings.HasSuffix(name, "_dhparam") || strings.HasSuffix(name, "_crl") || strings.HasSuffix(name, "_key")):
		return certPathRule, true
	case name == "auth_basic_user_file" || name == "proxy_store":
		return noAgentPath, true
	}
	return nil, false
}

// directive returns why d is refused, or "".
func (p Policy) directive(d directive) string {
	name := d.name
	switch {
	case refused[name] != "":
		return refused[name]
	case strings.HasSuffix(name, "_by_lua_block") || strings.HasSuffix(name, "_by_lua"):
		return "runs Lua code sent by the server"
	case strings.HasSuffix(name, "_by_lua_file"):
		if len(d.args) != 1 || !agentLuaFile(d.args[0]) {
			return "runs a Lua file that is not one of the agent's"
		}
	case strings.HasPrefix(name, "lua_") && name != "lua_shared_dict":
		return "configures the Lua module (only lua_shared_dict is the template's)"
	case strings.HasPrefix(name, "perl") || strings.HasPrefix(name, "js_"):
		return "runs code sent by the server"
	case name == "user" && len(d.args) > 0 && d.args[0] == "root":
		return "asks for root workers (set nginx_user in agent.json to allow that)"
	}
	for _, a := range d.args {
		// nginx parses URLs case-insensitively.
		if l := strings.ToLower(a); strings.HasPrefix(l, "unix:") || strings.Contains(l, "://unix:") {
			return "connects to a local socket (" + a + ")"
		}
	}
	if _, ok := rule(name); ok && len(d.args) > 0 {
		return p.path(name, d.args[0])
	}
	return ""
}

// agentLuaFile reports whether f is a plain file name under the agent's
// Lua directory: lower-case words, slashes and .lua, nothing Lua or nginx
// could read as code or variables.
func agentLuaFile(f string) bool {
	rel, ok := strings.CutPrefix(f, "__OPENFLARE_LUA_DIR__/")
	if !ok || !strings.HasSuffix(rel, ".lua") || hasDotDot(rel) {
		return false
	}
	for i := 0; i < len(rel); i++ {
		if c := rel[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '/' || c == '.') {
			return false
		}
	}
	return true
}

// path returns why the path argument of directive name is refused, or "".
func (p Policy) path(name, arg string) string {
	allowed, _ := rule(name)
	l := strings.ToLower(arg)
	switch {
	case arg == "off" || arg == "on" || arg == "stderr" || strings.HasPrefix(l, "syslog:") || strings.HasPrefix(l, "memory:") || strings.HasPrefix(arg, "data:"):
		return ""
	case hasDotDot(arg):
		return arg + " climbs out with .."
	case strings.ContainsAny(arg, "$*?[{"):
		return arg + " is built from variables or patterns"
	}
	for _, a := range allowed {
		if arg == a || strings.HasSuffix(a, "/") && strings.HasPrefix(arg, a) && safeRel(arg[len(a):]) ||
			strings.HasSuffix(a, "-") && strings.HasPrefix(arg, a) && safeRel(arg[len(a):]) && !strings.Contains(arg[len(a):], "/") {
			return ""
		}
	}
	if filepath.IsAbs(arg) {
		clean := filepath.Clean(arg)
		for _, dir := range p.Allowed {
			dir = filepath.Clean(dir)
			if clean == dir || strings.HasPrefix(clean, dir+string(filepath.Separator)) {
				return ""
			}
		}
	}
	if strings.HasPrefix(arg, "__OPENFLARE_") {
		return arg + " is not where " + name + " may point inside the agent's tree"
	}
	return arg + " is outside the agent's tree (allowed_paths in agent.json extends it)"
}

// safeRel reports whether rel is a plain relative path: letters, digits,
// '.', '_', '-' and '/', no empty or dot-dot segment.
func safeRel(rel string) bool {
	if rel == "" || hasDotDot(rel) {
		return false
	}
	for i := 0; i < len(rel); i++ {
		if c := rel[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/') {
			return false
		}
	}
	return true
}

func hasDotDot(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

// cachePaths are the directives whose first argument is a cache directory
// nginx creates, hands to the workers and prunes.
var cachePaths = map[string]bool{"proxy_cache_path": true, "fastcgi_cache_path": true, "uwsgi_cache_path": true, "scgi_cache_path": true}

// Confine moves a cache directory the server names outside the agent's
// tree (openresty_config.cache_path) inside it, beside the agent's own
// cache directory: a cache is the node's own business, so the version
// still applies, but nginx never chowns or prunes a directory it was not
// given. Trusted policies and the owner's allowed_paths keep the path.
// It is the rewriting's second step (apply's transaction names them all):
// the policy judges its result.
func (p Policy) Confine(mainText string) string {
	if p.Trusted {
		return mainText
	}
	lines := strings.SplitAfter(mainText, "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) < 2 || !cachePaths[f[0]] {
			continue
		}
		arg := strings.TrimSuffix(f[1], ";")
		if !filepath.IsAbs(arg) || arg == "/var/cache/openresty" || !safeRel(strings.TrimPrefix(arg, "/")) || p.path(f[0], arg) == "" {
			continue
		}
		// One level, beside the agent's cache: nginx creates only the
		// last directory of a cache path, and the workers can reach it.
		sum := sha256.Sum256([]byte(filepath.Clean(arg)))
		at := strings.Index(l, arg)
		lines[i] = l[:at] + "__OPENFLARE_PROXY_CACHE_PATH__-" + hex.EncodeToString(sum[:4]) + l[at+len(arg):]
	}
	return strings.Join(lines, "")
}
