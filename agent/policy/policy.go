// Package policy decides what a server-sent nginx config may do on this
// node. The rules are the node owner's (agent.json), not the server's: the
// control plane is trusted with the node's sites, not with its machine. A
// config that runs code (Lua, Perl, JavaScript), loads modules, sets the
// environment, asks for root workers, connects to local sockets or names a
// file outside the agent's tree is refused before anything reaches nginx,
// `nginx -t` included (which runs as root and executes init Lua).
//
// The check reads the rendered text with its placeholders intact: every
// path the agent manages is written as __OPENFLARE_*__ there, so "inside
// the agent's tree" is "rooted at a placeholder".
package policy

import (
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
}

// Check reviews a rendered main config and route config.
func (p Policy) Check(mainText, routeText string) error {
	if p.Trusted {
		return nil
	}
	dirs, err := parse(mainText)
	if err != nil {
		return fmt.Errorf("%w: main config: %v", ErrRefused, err)
	}
	for _, d := range dirs {
		if why := p.directive(d); why != "" {
			return fmt.Errorf("%w: main config line %d: %s: %s", ErrRefused, d.line, d.name, why)
		}
	}
	// The route config is the agent's own rendering of validated fields;
	// only the Pages root (local_root) and aliases carry server paths.
	for i, line := range strings.Split(routeText, "\n") {
		f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(line), ";"))
		if len(f) != 2 || (f[0] != "root" && f[0] != "alias") {
			continue
		}
		if why := p.path(unquote(f[1]), false); why != "" {
			return fmt.Errorf("%w: route config line %d: %s: %s", ErrRefused, i+1, f[0], why)
		}
	}
	return nil
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

// pathArgs are the directives whose first argument names a file or
// directory.
var pathArgs = map[string]bool{
	"include": true, "error_log": true, "access_log": true, "pid": true,
	"client_body_temp_path": true, "proxy_temp_path": true, "fastcgi_temp_path": true, "uwsgi_temp_path": true, "scgi_temp_path": true,
	"proxy_cache_path": true, "fastcgi_cache_path": true, "uwsgi_cache_path": true, "scgi_cache_path": true,
	"root": true, "alias": true, "auth_basic_user_file": true, "proxy_store": true,
	"ssl_certificate": true, "ssl_certificate_key": true, "ssl_trusted_certificate": true, "ssl_client_certificate": true,
	"ssl_dhparam": true, "ssl_crl": true, "ssl_stapling_file": true, "ssl_session_ticket_key": true, "ssl_password_file": true,
	"proxy_ssl_certificate": true, "proxy_ssl_certificate_key": true, "proxy_ssl_trusted_certificate": true, "proxy_ssl_crl": true, "proxy_ssl_password_file": true,
	"grpc_ssl_certificate": true, "grpc_ssl_certificate_key": true, "grpc_ssl_trusted_certificate": true,
	"uwsgi_ssl_certificate": true, "uwsgi_ssl_certificate_key": true, "uwsgi_ssl_trusted_certificate": true,
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
		if len(d.args) == 0 || !strings.HasPrefix(d.args[0], "__OPENFLARE_LUA_DIR__/") || hasDotDot(d.args[0]) {
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
		if strings.HasPrefix(a, "unix:") || strings.Contains(a, "://unix:") {
			return "connects to a local socket (" + a + ")"
		}
	}
	if pathArgs[name] && len(d.args) > 0 {
		return p.path(d.args[0], name == "include")
	}
	return ""
}

// path returns why a path argument is refused, or "". Paths are inside
// the agent's tree when rooted at a placeholder; relative includes resolve
// in the main config's directory, which is the agent's.
func (p Policy) path(arg string, include bool) string {
	switch {
	case arg == "off" || arg == "on" || arg == "stderr" || strings.HasPrefix(arg, "syslog:") || strings.HasPrefix(arg, "memory:") || strings.HasPrefix(arg, "data:"):
		return ""
	case hasDotDot(arg):
		return arg + " climbs out with .."
	case strings.HasPrefix(arg, "__OPENFLARE_"):
		// The variable part, if any, comes after the agent's directory.
		return ""
	case strings.Contains(arg, "$"):
		return arg + " is built from variables"
	// Literals the agent rewrites into its own tree (PROTOCOL 6.2).
	case arg == "logs/nginx.pid" || arg == "/var/cache/openresty" || strings.HasPrefix(arg, "/var/cache/openresty/"):
		return ""
	case include && !filepath.IsAbs(arg):
		return ""
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
	return arg + " is outside the agent's tree (allowed_paths in agent.json extends it)"
}

func hasDotDot(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// cachePaths are the directives whose first argument is a cache directory
// nginx creates, hands to the workers and prunes.
var cachePaths = map[string]bool{"proxy_cache_path": true, "fastcgi_cache_path": true, "uwsgi_cache_path": true, "scgi_cache_path": true}

// Confine moves a cache directory the server names outside the agent's
// tree (openresty_config.cache_path) inside it, under the proxy cache
// directory: a cache is the node's own business, so the version still
// applies, but nginx never chowns or prunes a directory it was not given.
// Trusted policies and the owner's allowed_paths keep the path as is.
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
		if !filepath.IsAbs(arg) || strings.ContainsAny(arg, "$'\"") || hasDotDot(arg) || p.path(arg, false) == "" {
			continue
		}
		at := strings.Index(l, arg)
		lines[i] = l[:at] + "__OPENFLARE_PROXY_CACHE_PATH__" + filepath.Clean(arg) + l[at+len(arg):]
	}
	return strings.Join(lines, "")
}
