package landing

import (
	"path/filepath"
	"strconv"
	"strings"

	"openflare/agent/luaassets"
)

// texts are the kinds of text a placeholder appears in.
type texts uint8

const (
	// nginxText is render's main and route configs (and the server's
	// templates they carry).
	nginxText texts = 1 << iota
	// luaText is the agent's own Lua (agent/luaassets).
	luaText
)

// placeholder is one row of the placeholder table (replacer): an
// __OPENFLARE_*__ name, what it stands for on this node, and the texts
// that use it.
type placeholder struct {
	name, value string
	in          texts
}

// replacer substitutes the placeholders of texts in, from the one table of
// the names that rendered configs and the agent's Lua give this node's
// paths (and the Lua its snapshot limit). A name is substituted only in the
// texts that use it: a server template that writes a Lua-only name keeps
// it as written, as it always has. agent/policy judges paths by these
// names (a path rooted at one is inside the agent's tree), and
// policy.Confine writes one. nginx text also gets this node's paths for
// the two that upstream's templates write literally (the pid file and the
// proxy cache), which nginx would otherwise take as they are.
func (p Paths) replacer(in texts) *strings.Replacer {
	port := strconv.Itoa(p.ObservabilityPort)
	table := [...]placeholder{
		{"__OPENFLARE_ROUTE_CONFIG__", p.Route, nginxText},
		{"__OPENFLARE_ACCESS_LOG__", p.AccessLog, nginxText},
		{"__OPENFLARE_ERROR_LOG__", p.ErrorLog, nginxText},
		{"__OPENFLARE_PID_PATH__", p.PID, nginxText},
		{"__OPENFLARE_NGINX_CACHE_DIR__", p.TempDir, nginxText | luaText},
		{"__OPENFLARE_PROXY_CACHE_PATH__", p.ProxyCache, nginxText},
		{"__OPENFLARE_LUA_DIR__", p.OpenRestyLuaDir, nginxText | luaText},
		{"__OPENFLARE_OBSERVABILITY_LISTEN__", "127.0.0.1:" + port, nginxText},
		{"__OPENFLARE_OBSERVABILITY_PORT__", port, nginxText},
		{"__OPENFLARE_ERROR_PAGE_TMPL__", filepath.Join(p.OpenRestyCertDir, "error_pages", "origin_error.html.tmpl"), nginxText},
		{"__OPENFLARE_SW_DIR__", filepath.Join(p.OpenRestyCertDir, "sw"), nginxText},
		{"__OPENFLARE_POW_STATIC_DIR__", filepath.Join(p.OpenRestyLuaDir, "pow", "static"), nginxText},
		{"__OPENFLARE_CERT_DIR__", p.OpenRestyCertDir, nginxText | luaText},
		{"__OPENFLARE_PAGES_DIR__", p.PagesDir, nginxText},
		{"__OPENFLARE_RUNTIME_CONFIG_DIR__", p.RuntimeConfigDir, luaText},
		{"__OPENFLARE_COUNTRY_MMDB_PATH__", p.CountryMMDB, luaText},
		{"__OPENFLARE_CITY_MMDB_PATH__", p.CityMMDB, luaText},
		{"__OPENFLARE_WAF_IP_GROUPS_MAX_SNAPSHOT_BYTES__", luaassets.MaxSnapshotBytes, luaText},
	}
	pairs := make([]string, 0, 2*len(table)+4)
	for _, ph := range table {
		if ph.in&in != 0 {
			pairs = append(pairs, ph.name, ph.value)
		}
	}
	if in == nginxText {
		pairs = append(pairs, "pid logs/nginx.pid;", "pid "+p.PID+";", "/var/cache/openresty", p.ProxyCache)
	}
	return strings.NewReplacer(pairs...)
}

// LuaReplacer turns the agent's Lua scripts into the ones this node runs:
// what luaassets.Files applies to each.
func (p Paths) LuaReplacer() *strings.Replacer { return p.replacer(luaText) }
