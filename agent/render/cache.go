package render

import (
	"strings"
)

// staticSuffixes is the built-in list of the `static` cache policy; the order
// is part of the rendered regex.
var staticSuffixes = []string{
	"css", "js", "mjs", "map", "ico", "cur", "gif", "jpg", "jpeg", "png", "webp", "avif", "svg", "svgz",
	"ttf", "otf", "woff", "woff2", "eot", "mp3", "mp4", "webm", "ogg", "flac", "wasm", "pdf", "zip", "7z", "gz", "tar",
}

// staticSuffixTest is the `static` test, computed once: it never varies.
var staticSuffixTest = suffixTest(staticSuffixes)

// cacheTest returns the `if` line that marks a URI as not cacheable under the
// route's policy, or "" when every GET is cacheable (""/url/all).
func cacheTest(policy string, rules []string) string {
	switch strings.ToLower(strings.TrimSpace(policy)) {
	case "", "url", "all":
		return ""
	case "suffix":
		return suffixTest(rules)
	case "path_prefix":
		return pathPrefixTest(rules)
	case "path_exact":
		return pathExactTest(rules)
	}
	return staticSuffixTest
}

// suffixTest: case-insensitive `\.(?:a|b)$` over the suffixes.
func suffixTest(suffixes []string) string {
	var re strings.Builder
	re.WriteString(`\.(?:`)
	for i, s := range suffixes {
		if i > 0 {
			re.WriteByte('|')
		}
		re.WriteString(quoteMeta(s))
	}
	re.WriteString(`)$`)
	return cacheIf("!~*", re.String())
}

// pathPrefixTest: case-sensitive `^(?:p(?:/|$)|…)`; a prefix matches itself
// or anything below it, and `/` alone matches every URI.
func pathPrefixTest(prefixes []string) string {
	var re strings.Builder
	re.WriteString(`^(?:`)
	for i, p := range prefixes {
		if i > 0 {
			re.WriteByte('|')
		}
		trimmed := strings.TrimRight(p, "/")
		if trimmed == "" && p != "" {
			re.WriteByte('/')
			continue
		}
		re.WriteString(quoteMeta(trimmed))
		re.WriteString(`(?:/|$)`)
	}
	re.WriteString(`)`)
	return cacheIf("!~", re.String())
}

// pathExactTest: case-sensitive `^(?:a|b)$`.
func pathExactTest(paths []string) string {
	var re strings.Builder
	re.WriteString(`^(?:`)
	for i, p := range paths {
		if i > 0 {
			re.WriteByte('|')
		}
		re.WriteString(quoteMeta(p))
	}
	re.WriteString(`)$`)
	return cacheIf("!~", re.String())
}

func cacheIf(op, pattern string) string {
	return "        if ($uri " + op + " " + quoted(pattern) + ") {\n" +
		"            set $openflare_skip_cache 1;\n" +
		"        }\n"
}

// writeCache emits the cache directives of a proxy location.
func writeCache(b *strings.Builder, r *route) {
	b.WriteString("        set $openflare_skip_cache 0;\n" +
		"        if ($request_method != GET) {\n" +
		"            set $openflare_skip_cache 1;\n" +
		"        }\n")
	b.WriteString(cacheTest(r.CachePolicy, r.CacheRules))
	b.WriteString("        proxy_cache openflare_cache;\n" +
		"        proxy_cache_methods GET;\n" +
		"        proxy_cache_bypass $openflare_skip_cache;\n" +
		"        proxy_no_cache $openflare_skip_cache $upstream_http_set_cookie;\n" +
		"        proxy_cache_valid 200 206 301 120m;\n" +
		"        proxy_cache_valid 302 303 20m;\n" +
		"        proxy_cache_valid 404 410 3m;\n")
}
