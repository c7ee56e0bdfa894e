package render

import (
	"fmt"
	"math"
	"strings"
)

// configDefaults seed openresty_config before it is decoded, so a key
// missing from the source (or null) reads as the server's fresh-install
// value (PROTOCOL 4.2). The server always sends these keys, so this never
// changes a published version; it makes a hand-written or partial source
// render a loadable main config instead of `worker_processes ;`. Only
// numbers and strings are seeded: their zero values are not valid nginx,
// while a missing boolean keeps meaning false, as it always has. Keys the
// server omits when empty (events_use, resolvers, cache_path, …) stay empty.
//
// A function rather than a variable: its values cost a few instructions of
// text instead of half a KiB of the binary's data segment.
func configDefaults() restyConfig {
	return restyConfig{
		WorkerProcesses:          "auto",
		WorkerConnections:        4096,
		WorkerRlimitNofile:       65535,
		KeepaliveTimeout:         20,
		KeepaliveRequests:        1000,
		ClientHeaderTimeout:      15,
		ClientBodyTimeout:        15,
		ClientMaxBodySize:        "64m",
		LargeClientHeaderBuffers: "4 16k",
		SendTimeout:              30,
		ProxyConnectTimeout:      3,
		ProxySendTimeout:         60,
		ProxyReadTimeout:         60,
		ProxyBuffers:             "16 16k",
		ProxyBufferSize:          "8k",
		ProxyBusyBuffersSize:     "64k",
		GzipMinLength:            1024,
		GzipCompLevel:            5,
		CacheLevels:              "1:2",
		CacheInactive:            "30m",
		CacheMaxSize:             "1g",
		CacheKeyTemplate:         "$scheme$host$request_uri",
		CacheLockTimeout:         "5s",
		CacheUseStale:            "error timeout updating http_500 http_502 http_503 http_504",
	}
}

const (
	// minWorkerConnections: nginx -t fails unless every worker has more
	// connections than the config has listening sockets; the stock config
	// opens up to four (:80, :443 over TCP and QUIC, the observability port).
	minWorkerConnections = 8
	// maxTimeoutSeconds is the largest whole-second timeout nginx can hold
	// in milliseconds.
	maxTimeoutSeconds = math.MaxInt64 / 1000
	// minHeaderBufferSize is nginx's connection_pool_size on 64-bit builds,
	// the floor it sets for large_client_header_buffers.
	minHeaderBufferSize = 512
	// maxProxyBufferSize is nginx's default proxy_max_temp_file_size (1g),
	// which must not be below proxy_buffer_size or one proxy_buffers buffer.
	maxProxyBufferSize = 1 << 30
)

// cacheUseStaleTokens are the values proxy_cache_use_stale accepts.
var cacheUseStaleTokens = map[string]bool{
	"error": true, "timeout": true, "invalid_header": true, "updating": true,
	"http_500": true, "http_502": true, "http_503": true, "http_504": true,
	"http_403": true, "http_404": true, "http_429": true, "off": true,
}

// mainTemplate is the template renderMain fills.
func mainTemplate(c *restyConfig) string {
	if strings.TrimSpace(c.MainConfigTemplate) == "" {
		return stockMainTemplate
	}
	return c.MainConfigTemplate
}

// configError names the openresty_config key at fault and what is wrong.
func configError(key, format string, args ...any) error {
	return fmt.Errorf("openresty_config.%s: %s", key, fmt.Sprintf(format, args...))
}

// validateConfig checks the openresty_config values the main template
// interpolates. A value is checked only where the template writes it: a
// custom template without a token never uses its value (and nginx -t, not
// the renderer, judges the template itself, PROTOCOL 5.1). The cache values
// count only when the cache block is rendered with the cache on.
func validateConfig(c *restyConfig) error {
	tmpl := mainTemplate(c)
	uses := func(name string) bool { return strings.Contains(tmpl, "{{OpenResty"+name+"}}") }
	if uses("WorkerProcesses") {
		if v := trimBlank(c.WorkerProcesses); v != "auto" {
			if n, ok := parseCount(v); !ok || n < 1 {
				return configError("worker_processes", "want \"auto\" or a positive integer, got %q", c.WorkerProcesses)
			}
		}
	}
	if uses("WorkerConnections") && c.WorkerConnections < minWorkerConnections {
		return configError("worker_connections", "want at least %d (nginx needs more connections per worker than listening sockets), got %d", minWorkerConnections, c.WorkerConnections)
	}
	if uses("WorkerRlimitNofile") && c.WorkerRlimitNofile < 1 {
		return configError("worker_rlimit_nofile", "want a positive integer, got %d", c.WorkerRlimitNofile)
	}
	if uses("EventsUseDirective") {
		// epoll is the one method Linux builds of nginx and OpenResty have;
		// `use` naming a method the binary lacks fails nginx -t.
		if v := strings.TrimSpace(c.EventsUse); v != "" && v != "epoll" {
			return configError("events_use", "unsupported event method %q (Linux builds provide epoll)", c.EventsUse)
		}
	}
	if uses("DefaultServerBlock") {
		if s := c.DefaultServerReturnStatus; s != 0 && (s < 100 || s > 999) {
			return configError("default_server_return_status", "want a status from 100 to 999 (or 0 for 421), got %d", s)
		}
	}
	for _, t := range []struct {
		token, key string
		v, min     int64
	}{
		{"KeepaliveTimeout", "keepalive_timeout", c.KeepaliveTimeout, 0}, // 0 turns keep-alive off
		{"ClientHeaderTimeout", "client_header_timeout", c.ClientHeaderTimeout, 1},
		{"ClientBodyTimeout", "client_body_timeout", c.ClientBodyTimeout, 1},
		{"SendTimeout", "send_timeout", c.SendTimeout, 1},
		{"ProxyConnectTimeout", "proxy_connect_timeout", c.ProxyConnectTimeout, 1},
		{"ProxySendTimeout", "proxy_send_timeout", c.ProxySendTimeout, 1},
		{"ProxyReadTimeout", "proxy_read_timeout", c.ProxyReadTimeout, 1},
	} {
		// A zero timeout other than keep-alive's would expire every request
		// at once: nginx loads it, but nothing would be served.
		if uses(t.token) && (t.v < t.min || int64(t.v) > maxTimeoutSeconds) {
			return configError(t.key, "want whole seconds from %d to %d, got %d", t.min, int64(maxTimeoutSeconds), t.v)
		}
	}
	if uses("KeepaliveRequests") && c.KeepaliveRequests < 0 {
		return configError("keepalive_requests", "want a non-negative integer, got %d", c.KeepaliveRequests)
	}
	if uses("GzipMinLength") && c.GzipMinLength < 0 {
		return configError("gzip_min_length", "want a non-negative number of bytes, got %d", c.GzipMinLength)
	}
	if uses("GzipCompLevel") && (c.GzipCompLevel < 1 || c.GzipCompLevel > 9) {
		return configError("gzip_comp_level", "want 1 to 9, got %d", c.GzipCompLevel)
	}
	if uses("ClientMaxBodySize") {
		if _, ok := parseSize(trimBlank(c.ClientMaxBodySize), true); !ok {
			return configError("client_max_body_size", "invalid size %q", c.ClientMaxBodySize)
		}
	}
	if uses("LargeClientHeaderBuffers") {
		if _, size, ok := parseBuffers(c.LargeClientHeaderBuffers); !ok {
			return configError("large_client_header_buffers", "want \"<number> <size>\" like \"4 16k\", got %q", c.LargeClientHeaderBuffers)
		} else if size < minHeaderBufferSize {
			return configError("large_client_header_buffers", "buffer size in %q is below nginx's minimum of %d bytes", c.LargeClientHeaderBuffers, minHeaderBufferSize)
		}
	}
	if err := validateProxyBuffers(c, uses); err != nil {
		return err
	}
	if uses("ResolverDirective") {
		if err := validateResolvers(c.Resolvers); err != nil {
			return err
		}
	}
	if uses("CacheBlock") && c.CacheEnabled {
		return validateCache(c)
	}
	return nil
}

// parseBuffers reads "<number> <size>" (proxy_buffers and
// large_client_header_buffers): a positive count and a positive size
// without a g unit, as nginx's ngx_conf_set_bufs_slot does.
func parseBuffers(v string) (num, size int64, ok bool) {
	f := splitBlank(v)
	if len(f) != 2 {
		return 0, 0, false
	}
	num, okN := parseCount(f[0])
	size, okS := parseSize(f[1], false)
	return num, size, okN && okS && num > 0 && size > 0
}

// validateProxyBuffers checks proxy_buffers, proxy_buffer_size and
// proxy_busy_buffers_size, and, when the template sets all three, the
// relations nginx enforces between them when it merges the http block.
func validateProxyBuffers(c *restyConfig, uses func(string) bool) error {
	num, bufSize, ok := parseBuffers(c.ProxyBuffers)
	if uses("ProxyBuffers") {
		switch {
		case !ok:
			return configError("proxy_buffers", "want \"<number> <size>\" like \"16 16k\", got %q", c.ProxyBuffers)
		case num < 2:
			return configError("proxy_buffers", "want at least 2 buffers, got %q", c.ProxyBuffers)
		case num > math.MaxInt64/bufSize:
			// nginx multiplies the two in its checks; keep that exact.
			return configError("proxy_buffers", "%q adds up to more bytes than nginx can count", c.ProxyBuffers)
		}
	}
	size, okSize := parseSize(trimBlank(c.ProxyBufferSize), false)
	if uses("ProxyBufferSize") && !okSize {
		return configError("proxy_buffer_size", "invalid size %q", c.ProxyBufferSize)
	}
	busy, okBusy := parseSize(trimBlank(c.ProxyBusyBuffersSize), false)
	if uses("ProxyBusyBuffersSize") && !okBusy {
		return configError("proxy_busy_buffers_size", "invalid size %q", c.ProxyBusyBuffersSize)
	}
	if !uses("ProxyBuffers") || !uses("ProxyBufferSize") || !uses("ProxyBusyBuffersSize") {
		return nil
	}
	largest := max(size, bufSize)
	if largest > maxProxyBufferSize {
		return configError("proxy_buffer_size", "%q and proxy_buffers %q must stay within 1g (nginx's proxy_max_temp_file_size)", c.ProxyBufferSize, c.ProxyBuffers)
	}
	if busy < largest {
		return configError("proxy_busy_buffers_size", "%q is below proxy_buffer_size %q or one buffer of proxy_buffers %q", c.ProxyBusyBuffersSize, c.ProxyBufferSize, c.ProxyBuffers)
	}
	if busy > (num-1)*bufSize {
		return configError("proxy_busy_buffers_size", "%q exceeds proxy_buffers %q minus one buffer", c.ProxyBusyBuffersSize, c.ProxyBuffers)
	}
	return nil
}

// validateResolvers checks the resolver line: addresses (IPv4 or [IPv6],
// with an optional port, or host names) and the valid= and ipv6= options
// nginx 1.22 knows, with at least one address.
func validateResolvers(v string) error {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil
	}
	addresses := 0
	for _, tok := range splitBlank(v) {
		switch {
		case strings.HasPrefix(tok, "valid="):
			if _, ok := parseTime(tok[len("valid="):], true); !ok {
				return configError("resolvers", "invalid time in %q", tok)
			}
		case tok == "ipv6=on" || tok == "ipv6=off":
		case hostPortProblem(tok) == "":
			addresses++
		default:
			return configError("resolvers", "%q is neither an address nor valid=<time> or ipv6=on|off", tok)
		}
	}
	if addresses == 0 {
		return configError("resolvers", "no address in %q", v)
	}
	return nil
}

// validateCache checks the values of the proxy_cache_* lines.
func validateCache(c *restyConfig) error {
	if p := proxyCachePath(c.CachePath); p != proxyCachePlaceholder {
		if !strings.HasPrefix(p, "/") {
			return configError("cache_path", "want an absolute path, got %q", c.CachePath)
		}
		// nginx -t creates the directory (and chowns it when root), so the
		// path must say plainly where: no `.` or `..` steps.
		for _, seg := range strings.Split(p, "/") {
			if seg == "." || seg == ".." {
				return configError("cache_path", "%q has a . or .. segment", c.CachePath)
			}
		}
		if problem := bareProblem(p); problem != "" {
			return configError("cache_path", "%q %s", c.CachePath, problem)
		}
	}
	if !validCacheLevels(c.CacheLevels) {
		return configError("cache_levels", "want one to three levels of 1 or 2 separated by \":\" like \"1:2\", got %q", c.CacheLevels)
	}
	if _, ok := parseTime(c.CacheInactive, true); !ok {
		return configError("cache_inactive", "invalid time %q", c.CacheInactive)
	}
	if _, ok := parseSize(c.CacheMaxSize, true); !ok {
		return configError("cache_max_size", "invalid size %q", c.CacheMaxSize)
	}
	if strings.TrimSpace(c.CacheKeyTemplate) == "" {
		return configError("cache_key_template", "is empty, which would give every response the same key")
	}
	if problem := quotedProblem(c.CacheKeyTemplate, true); problem != "" {
		return configError("cache_key_template", "%q %s", c.CacheKeyTemplate, problem)
	}
	if _, ok := parseTime(trimBlank(c.CacheLockTimeout), false); !ok {
		return configError("cache_lock_timeout", "invalid time %q", c.CacheLockTimeout)
	}
	tokens := splitBlank(c.CacheUseStale)
	if len(tokens) == 0 {
		return configError("cache_use_stale", "is empty")
	}
	for _, tok := range tokens {
		if !cacheUseStaleTokens[tok] {
			return configError("cache_use_stale", "unknown value %q in %q", tok, c.CacheUseStale)
		}
	}
	return nil
}

// validCacheLevels: levels= takes one to three levels, each 1 or 2.
func validCacheLevels(v string) bool {
	parts := strings.Split(v, ":")
	if len(parts) > 3 {
		return false
	}
	for _, p := range parts {
		if p != "1" && p != "2" {
			return false
		}
	}
	return true
}
