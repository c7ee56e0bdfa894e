package render

import (
	"sort"
	"strconv"
	"strings"
)

const (
	connectionUpgradeMap = "    map $http_upgrade $connection_upgrade {\n" +
		"        default upgrade;\n" +
		"        ''      \"\";\n" +
		"    }\n\n"

	observabilityBlock = "    lua_shared_dict openflare_observability 10m;\n" +
		"    lua_shared_dict openflare_pow_challenges 10m;\n" +
		"    lua_shared_dict openflare_pow_sessions 10m;\n" +
		"    lua_shared_dict openflare_pow_config 1m;\n" +
		"    lua_shared_dict openflare_waf_config 1m;\n" +
		"    lua_shared_dict openflare_waf_ip_groups 64m;\n" +
		"    init_worker_by_lua_file __OPENFLARE_LUA_DIR__/observability/init.lua;\n" +
		"    log_by_lua_file __OPENFLARE_LUA_DIR__/observability/log.lua;\n" +
		"\n" +
		"    server {\n" +
		"        listen __OPENFLARE_OBSERVABILITY_LISTEN__;\n" +
		"        server_name openflare-observability;\n" +
		"        access_log off;\n" +
		"\n" +
		"        location = /openflare/stub_status {\n" +
		"            stub_status;\n" +
		"        }\n" +
		"\n" +
		"        location = /openflare/observability {\n" +
		"            default_type application/json;\n" +
		"            content_by_lua_file __OPENFLARE_LUA_DIR__/observability/read.lua;\n" +
		"        }\n" +
		"    }\n\n"

	proxyCachePlaceholder = "__OPENFLARE_PROXY_CACHE_PATH__"
)

// renderMain fills the main template (PROTOCOL 5.1). Unknown {{…}} tokens are
// left as they are: the server accepts any non-empty template, and nginx -t,
// not the renderer, is the judge of it.
func renderMain(c *restyConfig, rates []string) string {
	tmpl := c.MainConfigTemplate
	if strings.TrimSpace(tmpl) == "" {
		tmpl = stockMainTemplate
	}
	r := strings.NewReplacer(
		"{{OpenRestyWorkerProcesses}}", c.WorkerProcesses,
		"{{OpenRestyWorkerConnections}}", strconv.FormatInt(c.WorkerConnections, 10),
		"{{OpenRestyWorkerRlimitNofile}}", strconv.FormatInt(c.WorkerRlimitNofile, 10),
		"{{OpenRestyEventsUseDirective}}", eventsUseDirective(c.EventsUse),
		"{{OpenRestyEventsMultiAcceptDirective}}", onlyIf(c.EventsMultiAcceptEnabled, "    multi_accept on;\n"),
		"{{OpenRestyConnectionUpgradeMap}}", connectionUpgradeMap,
		"{{OpenRestyDefaultServerBlock}}", defaultServerBlock(c),
		"{{OpenRestyAccessLogPath}}", "__OPENFLARE_ACCESS_LOG__",
		"{{OpenRestyErrorLogPath}}", "__OPENFLARE_ERROR_LOG__",
		"{{OpenRestyKeepaliveTimeout}}", strconv.FormatInt(c.KeepaliveTimeout, 10),
		"{{OpenRestyKeepaliveRequests}}", strconv.FormatInt(c.KeepaliveRequests, 10),
		"{{OpenRestyClientHeaderTimeout}}", strconv.FormatInt(c.ClientHeaderTimeout, 10),
		"{{OpenRestyClientBodyTimeout}}", strconv.FormatInt(c.ClientBodyTimeout, 10),
		"{{OpenRestyClientMaxBodySize}}", c.ClientMaxBodySize,
		"{{OpenRestyLargeClientHeaderBuffers}}", c.LargeClientHeaderBuffers,
		"{{OpenRestySendTimeout}}", strconv.FormatInt(c.SendTimeout, 10),
		"{{OpenRestyProxyConnectTimeout}}", strconv.FormatInt(c.ProxyConnectTimeout, 10),
		"{{OpenRestyProxySendTimeout}}", strconv.FormatInt(c.ProxySendTimeout, 10),
		"{{OpenRestyProxyReadTimeout}}", strconv.FormatInt(c.ProxyReadTimeout, 10),
		"{{OpenRestyProxyRequestBuffering}}", onOff(c.ProxyRequestBuffering),
		"{{OpenRestyProxyBuffering}}", onOff(c.ProxyBufferingEnabled),
		"{{OpenRestyProxyBuffers}}", c.ProxyBuffers,
		"{{OpenRestyProxyBufferSize}}", c.ProxyBufferSize,
		"{{OpenRestyProxyBusyBuffersSize}}", c.ProxyBusyBuffersSize,
		"{{OpenRestyGzip}}", onOff(c.GzipEnabled),
		"{{OpenRestyGzipMinLength}}", strconv.FormatInt(c.GzipMinLength, 10),
		"{{OpenRestyGzipCompLevel}}", strconv.FormatInt(c.GzipCompLevel, 10),
		"{{OpenRestyResolverDirective}}", resolverDirective(c.Resolvers),
		"{{OpenRestyCacheBlock}}", cacheBlock(c, rates),
		"{{OpenRestyRouteConfigInclude}}", "__OPENFLARE_ROUTE_CONFIG__",
	)
	return r.Replace(tmpl)
}

func eventsUseDirective(use string) string {
	use = strings.TrimSpace(use)
	if use == "" {
		return ""
	}
	return "    use " + use + ";\n"
}

func resolverDirective(resolvers string) string {
	resolvers = strings.TrimSpace(resolvers)
	if resolvers == "" {
		return ""
	}
	return "    resolver " + resolvers + ";\n"
}

func defaultServerBlock(c *restyConfig) string {
	status := c.DefaultServerReturnStatus
	if status == 0 {
		status = 421
	}
	var b strings.Builder
	writeLines(&b,
		"    server {\n",
		"        listen 80 default_server;\n",
		"        server_name _;\n",
		"\n",
		"        return ", strconv.FormatInt(status, 10), ";\n",
		"    }\n",
		"\n",
		"    server {\n",
		"        listen 443 ssl default_server;\n",
		onlyIf(c.HTTP3Enabled, "        listen 443 quic reuseport default_server;\n"),
		"        server_name _;\n",
		"\n",
		"        ssl_reject_handshake on;\n",
		"    }\n",
	)
	return b.String()
}

// cacheBlock is {{OpenRestyCacheBlock}}: connection/request limit zones, the
// proxy cache, the Lua shared dicts and the observability server.
func cacheBlock(c *restyConfig, rates []string) string {
	var b strings.Builder
	b.WriteString("    limit_conn_zone $server_name zone=openflare_conn_per_server:10m;\n" +
		"    limit_conn_zone $binary_remote_addr zone=openflare_conn_per_ip:10m;\n")
	for _, rate := range rates {
		writeLines(&b, "    limit_req_zone $openflare_waf_site$binary_remote_addr zone=", limitZone(rate), ":10m rate=", rate, ";\n")
	}
	if c.CacheEnabled {
		writeLines(&b,
			"    proxy_cache_path ", proxyCachePath(c.CachePath), " levels=", c.CacheLevels,
			" keys_zone=openflare_cache:10m inactive=", c.CacheInactive, " max_size=", c.CacheMaxSize, ";\n",
			"    proxy_cache_key ", quoted(c.CacheKeyTemplate), ";\n",
			"    proxy_cache_lock ", onOff(c.CacheLockEnabled), ";\n",
			"    proxy_cache_lock_timeout ", c.CacheLockTimeout, ";\n",
			"    proxy_cache_use_stale ", c.CacheUseStale, ";\n",
		)
	}
	b.WriteString(observabilityBlock)
	return b.String()
}

// proxyCachePath maps an empty path, or one under /var/, to the placeholder
// the agent resolves to its own cache directory (PROTOCOL 6.2).
func proxyCachePath(p string) string {
	p = strings.TrimSpace(p)
	if p == "" || strings.HasPrefix(p, "/var/") {
		return proxyCachePlaceholder
	}
	return p
}

// requestRates collects the distinct effective limit_req rates, sorted, for
// the limit_req_zone lines.
func requestRates(routes []route, c *restyConfig) []string {
	seen := make(map[string]bool)
	var rates []string
	for i := range routes {
		rate := effectiveRate(routes[i].LimitReqPerIP, c.DefaultLimitReqPerIP)
		if rate != "" && !seen[rate] {
			seen[rate] = true
			rates = append(rates, rate)
		}
	}
	sort.Strings(rates)
	return rates
}

func onOff(v bool) string {
	if v {
		return "on"
	}
	return "off"
}

func onlyIf(cond bool, s string) string {
	if cond {
		return s
	}
	return ""
}
