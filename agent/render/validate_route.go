package render

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// maxConnLimit is the largest limit_conn value nginx accepts.
	maxConnLimit = 65535
	// clientClosedStatus is nginx's "client closed request" status.
	clientClosedStatus = 499
)

// routeFailure builds errors that name the route and field, like the
// renderer's own "route <site> …" errors.
type routeFailure struct{ name string }

func (f routeFailure) field(field, format string, args ...any) error {
	return fmt.Errorf("route %s %s: %s", f.name, field, fmt.Sprintf(format, args...))
}

// inherited reports a bad openresty_config default where a route uses it.
func (f routeFailure) inherited(key, format string, args ...any) error {
	return fmt.Errorf("route %s inherits openresty_config.%s: %s", f.name, key, fmt.Sprintf(format, args...))
}

// validateRoute checks every value of r that its server blocks interpolate
// (PROTOCOL 5.2), so that a route either renders text nginx loads or fails
// with the field at fault. It runs after the renderer's own domain and
// certificate checks, whose messages stay as they were.
func (rd *renderer) validateRoute(r *route) error {
	f := routeFailure{name: r.displayName()}
	for i, d := range r.Domains {
		if p := serverNameProblem(d, rd.cfg); p != "" {
			return f.field("domains["+strconv.Itoa(i)+"]", "%q %s", d, p)
		}
	}
	if r.SiteName != "" {
		if p := quotedProblem(r.SiteName, false); p != "" {
			return f.field("site_name", "%q %s", r.SiteName, p)
		}
	}
	if err := validateLimits(r, rd.cfg, f); err != nil {
		return err
	}
	if r.BasicAuthEnabled && r.BasicAuthUsername != "" && r.BasicAuthPassword != "" {
		var b strings.Builder
		writeBasicAuth(&b, r)
		if b.Len() > maxLuaBlock {
			return f.field("basic_auth_password", "user name and password are too long: their check is a %d-byte Lua block, nginx reads at most %d", b.Len(), maxLuaBlock)
		}
	}
	if r.isPages() {
		// A Pages route without a deployment fails right after this with the
		// renderer's own error.
		if r.PagesDeployment == nil {
			return nil
		}
		return validatePages(r.PagesDeployment, f)
	}
	return rd.validateProxy(r, f)
}

// serverNameProblem checks one server_name entry: a host name, optionally
// with nginx's wildcard forms (*.example.com, .example.com, www.example.*),
// or a bracketed IPv6 address. Labels may hold non-ASCII letters
// (internationalised names). The name must also fit nginx's default
// server_names_hash_bucket_size, or nginx -t fails with "could not build
// server_names_hash", unless the main template sets its own bucket size.
func serverNameProblem(d string, c *restyConfig) string {
	if strings.HasPrefix(d, "[") && strings.HasSuffix(d, "]") {
		if hostPortProblem(d) != "" {
			return "is not a valid IPv6 address"
		}
		return ""
	}
	name, wildcard := d, true
	switch {
	case strings.HasPrefix(d, "*."):
		name = d[2:]
	case strings.HasPrefix(d, "."):
		name = d[1:]
	case strings.HasSuffix(d, ".*"):
		name = d[:len(d)-2]
	default:
		wildcard = false
	}
	if !utf8.ValidString(name) {
		return "is not valid UTF-8"
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" {
			return "has an empty label"
		}
		for _, ch := range label {
			if !(ch < utf8.RuneSelf && (isNameChar(byte(ch)) || ch == '-') ||
				ch >= utf8.RuneSelf && (unicode.IsLetter(ch) || unicode.IsDigit(ch) || unicode.IsMark(ch))) {
				return fmt.Sprintf("contains %q, which is not allowed in a server name", ch)
			}
		}
		if wildcard && len(label) > maxServerNameLabel && !setsBucketSize(c) {
			return fmt.Sprintf("has a %d-byte label; nginx's default server_names_hash_bucket_size holds %d (set server_names_hash_bucket_size in a custom main template)", len(label), maxServerNameLabel)
		}
	}
	if !wildcard && len(d) > maxExactServerName && !setsBucketSize(c) {
		return fmt.Sprintf("is %d bytes long; nginx's default server_names_hash_bucket_size holds names up to %d (set server_names_hash_bucket_size in a custom main template)", len(d), maxExactServerName)
	}
	return ""
}

// setsBucketSize reports whether the main template chose its own
// server_names_hash_bucket_size, which lifts the default's length limit.
func setsBucketSize(c *restyConfig) bool {
	return strings.Contains(mainTemplate(c), "server_names_hash_bucket_size")
}

// validateLimits checks the effective limits the route's locations write.
// A bad value the route inherits is reported as the openresty_config key.
func validateLimits(r *route, c *restyConfig, f routeFailure) error {
	for _, l := range []struct {
		field, defKey string
		own, def      int64
	}{
		{"limit_conn_per_server", "default_limit_conn_per_server", r.LimitConnPerServer, c.DefaultLimitConnPerServer},
		{"limit_conn_per_ip", "default_limit_conn_per_ip", r.LimitConnPerIP, c.DefaultLimitConnPerIP},
	} {
		if n := effectiveCount(l.own, l.def); n > maxConnLimit {
			if l.own > 0 {
				return f.field(l.field, "want at most %d connections, got %d", maxConnLimit, n)
			}
			return f.inherited(l.defKey, "want at most %d connections, got %d", maxConnLimit, n)
		}
	}
	for _, l := range []struct {
		field, defKey string
		own, def      string
		check         func(string) string
	}{
		{"limit_rate", "default_limit_rate", r.LimitRate, c.DefaultLimitRate, rateProblem},
		{"limit_req_per_ip", "default_limit_req_per_ip", r.LimitReqPerIP, c.DefaultLimitReqPerIP, requestRateProblem},
	} {
		v := effectiveRate(l.own, l.def)
		if v == "" {
			continue
		}
		p := l.check(v)
		if p == "" {
			continue
		}
		if own := strings.ToLower(strings.TrimSpace(l.own)); own != "" && own != "0" {
			return f.field(l.field, "%q %s", l.own, p)
		}
		return f.inherited(l.defKey, "%q %s", l.def, p)
	}
	return nil
}

// rateProblem checks a limit_rate value: an nginx size without a g unit.
func rateProblem(v string) string {
	if _, ok := parseSize(v, false); !ok {
		return "is not a size like 512k, 1m or 2048"
	}
	return ""
}

// requestRateProblem checks a limit_req_per_ip rate: N r/s or N r/m with
// N ≥ 1. nginx keeps the rate and the burst (2N for r/s) in thousandths.
func requestRateProblem(v string) string {
	// What limit_req_zone's rate= takes here: digits then r/s or r/m
	// (nginx would also take a bare number).
	digits, unit, found := strings.Cut(v, "r/")
	if !found || digits == "" || strings.Trim(digits, "0123456789") != "" || (unit != "s" && unit != "m") {
		return "is not a rate like 10r/s or 30r/m"
	}
	n, ok := parseCount(digits)
	limit := int64(math.MaxInt64 / 1000)
	if unit == "s" {
		limit /= 2
	}
	if !ok || n < 1 || n > limit {
		return fmt.Sprintf("needs 1 to %d requests", limit)
	}
	return ""
}

// validateProxy checks a proxy route's origin, Host override, custom
// headers and cache rules.
func (rd *renderer) validateProxy(r *route, f routeFailure) error {
	if p := proxyURLProblem(r.OriginURL); p != "" {
		return f.field("origin_url", "%q %s", r.OriginURL, p)
	}
	for i, u := range r.Upstreams {
		if strings.TrimSpace(u) == "" {
			continue
		}
		if p := proxyURLProblem(u); p != "" {
			return f.field("upstreams["+strconv.Itoa(i)+"]", "%q %s", u, p)
		}
	}
	// proxy_pass is origin_url, or an upstream's scheme, path and query
	// around the upstream name (under 48 bytes plus the site name), with
	// the path escaped at most threefold; only long values can overflow it.
	longest := len(r.OriginURL)
	for _, u := range r.Upstreams {
		longest = max(longest, len(u))
	}
	if 3*longest+len(r.wafSite())+48 > maxParam {
		if plan := planUpstream(r); len(plan.proxyPass)+1 > maxParam {
			return f.field("origin_url", "the proxy_pass target is %d bytes long; nginx reads at most %d per parameter", len(plan.proxyPass), maxParam)
		}
	}
	if host := strings.TrimSpace(r.OriginHost); host != "" {
		if p := hostPortProblem(host); p != "" {
			return f.field("origin_host", "%q %s", r.OriginHost, p)
		}
	}
	for i, h := range r.CustomHeaders {
		key := strings.TrimSpace(h.Key)
		if key == "" {
			continue
		}
		if p := headerNameProblem(key); p != "" {
			return f.field("custom_headers["+strconv.Itoa(i)+"].key", "%q %s", h.Key, p)
		}
		if p := quotedProblem(h.Value, true); p != "" {
			return f.field("custom_headers["+strconv.Itoa(i)+"].value", "%q %s", h.Value, p)
		}
	}
	// All-methods mode lists the codes in error_page, which refuses 499
	// (nginx's own "client closed request"); a range like 400-599 has it.
	if rd.errPage.active() && !rd.errPage.getOnly && slices.Contains(rd.errPage.codes, clientClosedStatus) {
		return f.inherited("origin_error_page_status_codes", "%q include %d, which nginx's error_page refuses (use get-only mode or leave 499 out)", rd.cfg.OriginErrorPageCodes, clientClosedStatus)
	}
	if rd.cfg.CacheEnabled && r.CacheEnabled {
		for i, rule := range r.CacheRules {
			if strings.IndexFunc(rule, func(c rune) bool { return c < utf8.RuneSelf && isControl(byte(c)) }) >= 0 {
				return f.field("cache_rules["+strconv.Itoa(i)+"]", "%q contains a control character", rule)
			}
		}
		test := cacheTest(r.CachePolicy, r.CacheRules)
		if start, end := strings.IndexByte(test, '"'), strings.LastIndexByte(test, '"'); start >= 0 && end-start+1 > maxParam {
			return f.field("cache_rules", "the %d rules make a %d-byte pattern; nginx reads at most %d per parameter", len(r.CacheRules), end-start+1, maxParam)
		}
	}
	return nil
}

// headerNameProblem checks a custom header name: an HTTP token (RFC 9110
// tchar), which also keeps it one unquoted nginx parameter, except that a
// leading `#` or `'` would start an nginx comment or string.
func headerNameProblem(k string) string {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(isNameChar(c) || strings.IndexByte("!#$%&'*+-.^`|~", c) >= 0) {
			return "is not an HTTP header name"
		}
	}
	if k[0] == '#' || k[0] == '\'' {
		return "starts with a character nginx reads as a comment or a quote"
	}
	if len(k)+1 > maxParam {
		return fmt.Sprintf("is %d bytes long; nginx reads at most %d per parameter", len(k), maxParam)
	}
	return ""
}

// validatePages checks what a Pages server writes from pages_deployment:
// root, index, the try_files targets and the API proxy location.
func validatePages(d *pagesDeployment, f routeFailure) error {
	if root := strings.TrimSpace(d.LocalRoot); root != "" {
		if p := quotedProblem(root, false); p != "" {
			return f.field("pages_deployment.local_root", "%q %s", d.LocalRoot, p)
		}
	}
	if entry := strings.TrimSpace(d.EntryFile); entry != "" {
		// The entry is a file of the deployment: try_files would follow
		// `..` out of the site root, since nginx does not clean that path.
		target := "/" + strings.TrimLeft(entry, "/")
		if p := literalProblem(target); p != "" {
			return f.field("pages_deployment.entry_file", "%q %s", d.EntryFile, p)
		}
		for _, seg := range strings.Split(target, "/") {
			if seg == "." || seg == ".." {
				return f.field("pages_deployment.entry_file", "%q leaves the site root", d.EntryFile)
			}
		}
	}
	if d.SPAFallbackEnabled {
		fb := spaFallback(d.SPAFallbackPath)
		if p := literalProblem(fb); p != "" {
			return f.field("pages_deployment.spa_fallback_path", "%q becomes %q, which %s", d.SPAFallbackPath, fb, p)
		}
	}
	loc, pass := apiProxy(d)
	if loc == "" {
		return nil
	}
	if p := literalProblem(loc); p != "" {
		return f.field("pages_deployment.api_proxy_path", "%q %s", d.APIProxyPath, p)
	}
	if n := len(quoteMeta(loc)) + len(`^/(.*)$`); n+1 > maxParam {
		return f.field("pages_deployment.api_proxy_path", "the rewrite pattern is %d bytes long; nginx reads at most %d per parameter", n, maxParam)
	}
	if p := proxyURLProblem(pass); p != "" {
		return f.field("pages_deployment.api_proxy_pass", "%q %s", d.APIProxyPass, p)
	}
	if rw := strings.TrimSpace(d.APIProxyRewrite); rw != "" {
		if p := literalProblem("/" + strings.TrimLeft(rw, "/")); p != "" {
			return f.field("pages_deployment.api_proxy_rewrite", "%q %s", d.APIProxyRewrite, p)
		}
	}
	return nil
}

// validateUpstreamNames runs once every route rendered: two proxy routes
// whose site names sanitise alike and that share an id would declare the
// same upstream block, which nginx rejects as a duplicate. Names are
// compared first; only routes that share one are planned again, to see
// whether they declare the block or pass origin_url verbatim.
func validateUpstreamNames(routes []route) error {
	byName := make(map[string][]*route)
	var shared []string
	for i := range routes {
		r := &routes[i]
		if r.isPages() {
			continue
		}
		name := upstreamName(r)
		byName[name] = append(byName[name], r)
		if len(byName[name]) == 2 {
			shared = append(shared, name)
		}
	}
	for _, name := range shared {
		var first *route
		for _, r := range byName[name] {
			if planUpstream(r).name == "" {
				continue
			}
			if first != nil {
				return fmt.Errorf("route %s and route %s both declare upstream %s (same sanitised site name and id)", first.displayName(), r.displayName(), name)
			}
			first = r
		}
	}
	return nil
}
