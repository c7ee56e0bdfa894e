package render

import (
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// The checks in this file mirror how nginx 1.22 reads the text the renderer
// writes: its tokenizer (ngx_conf_read_token), its size and time parsers
// (ngx_parse_size, ngx_parse_offset, ngx_parse_time) and its variable syntax
// (ngx_http_script_compile). They answer "would nginx accept this value
// where the renderer puts it", not "is this value sensible".

const (
	// maxParam bounds one rendered parameter (quotes and escapes included).
	// nginx reads a configuration through a 4096-byte buffer and rejects a
	// parameter that does not fit ("too long parameter"); the margin covers
	// placeholders (__OPENFLARE_*__) the agent replaces with longer paths.
	maxParam = 4000
	// maxLuaBlock bounds a rendered *_by_lua_block: the Lua module reads
	// the whole block through the same buffer ("too long lua code block").
	// nginx 1.22 with lua-nginx-module failed at about 4000 bytes.
	maxLuaBlock = 3584
	// maxExactServerName and maxServerNameLabel are what nginx's default
	// server_names_hash_bucket_size (64, the x86-64 cache line) holds: a
	// hash element is an 8-byte pointer plus the name and two bytes,
	// rounded to 8, and the bucket keeps 8 bytes for its terminator. Exact
	// names are hashed whole; wildcard names label by label.
	maxExactServerName = 46
	maxServerNameLabel = 46
)

// isBlank reports whether nginx's tokenizer separates arguments at c.
func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// trimBlank strips what nginx would treat as separators around a value that
// the renderer writes as a whole directive argument.
func trimBlank(s string) string { return strings.Trim(s, " \t\r\n") }

// splitBlank splits s into the arguments nginx would see.
func splitBlank(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r < 0x80 && isBlank(byte(r)) })
}

// isControl reports ASCII control characters (C0 and DEL).
func isControl(c byte) bool { return c < 0x20 || c == 0x7f }

// bareProblem says why s cannot be written as one unquoted nginx parameter,
// or returns "". Whitespace splits it; `;`, `{` and `}` end the directive
// or open a block; quotes open a string at the start of a token; `\`
// escapes the next character; control characters have no place in a path,
// URL or name.
func bareProblem(s string) string {
	if s == "" {
		return "is empty"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isBlank(c):
			return "contains whitespace"
		case isControl(c):
			return "contains a control character"
		case strings.IndexByte(";{}\"'\\", c) >= 0:
			return fmt.Sprintf("contains %q", string(c))
		}
	}
	if len(s)+1 > maxParam {
		return fmt.Sprintf("is %d bytes long; nginx reads at most %d per parameter", len(s), maxParam)
	}
	return ""
}

// literalProblem checks s for an unquoted parameter that nginx evaluates
// for variables (URLs, try_files, rewrite targets): a `$` would read as a
// variable there, which these values never mean.
func literalProblem(s string) string {
	if p := bareProblem(s); p != "" {
		return p
	}
	if strings.IndexByte(s, '$') >= 0 {
		return "contains $, which nginx would read as a variable"
	}
	return ""
}

// quotedProblem checks s for a double-quoted parameter (nginxQuote escapes
// `\` and `"`, so the quoting itself cannot break; the length counts the
// quotes and those escapes). Control characters are refused: inside a
// header value a newline would split the request sent to the origin. vars
// says whether `$` may introduce a variable (header values, the cache key);
// elsewhere `$` is refused.
func quotedProblem(s string, vars bool) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; isControl(c) && c != '\t' {
			return "contains a control character"
		}
	}
	if vars {
		if err := checkVariables(s); err != nil {
			return err.Error()
		}
	} else if strings.IndexByte(s, '$') >= 0 {
		return "contains $, which nginx would read as a variable"
	}
	if n := len(s) + 2 + strings.Count(s, `\`) + strings.Count(s, `"`); n > maxParam {
		return fmt.Sprintf("is %d bytes long quoted; nginx reads at most %d per parameter", n, maxParam)
	}
	return ""
}

// parseCount reads a non-negative decimal integer as nginx's ngx_atoi does
// (digits only, no sign, no overflow).
func parseCount(s string) (int64, bool) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// parseSize reads an nginx size: digits with an optional k/K or m/M unit,
// plus g/G where nginx parses an offset (client_max_body_size, max_size=).
// The unit scales by 1024; the result must fit nginx's signed 64-bit size.
func parseSize(s string, offset bool) (int64, bool) {
	if s == "" {
		return 0, false
	}
	scale := int64(1)
	switch s[len(s)-1] {
	case 'k', 'K':
		scale = 1 << 10
	case 'm', 'M':
		scale = 1 << 20
	case 'g', 'G':
		if !offset {
			return 0, false
		}
		scale = 1 << 30
	}
	digits := s
	if scale != 1 {
		digits = s[:len(s)-1]
	}
	n, ok := parseCount(digits)
	if !ok || n > math.MaxInt64/scale {
		return 0, false
	}
	return n * scale, true
}

// timeUnits are ngx_parse_time's units in the order they must appear, with
// their length in seconds; ms is handled apart.
var timeUnits = []struct {
	unit    string
	seconds int64
}{
	{"y", 365 * 24 * 3600}, {"M", 30 * 24 * 3600}, {"w", 7 * 24 * 3600}, {"d", 24 * 3600},
	{"h", 3600}, {"m", 60}, {"s", 1},
}

// parseTime reads an nginx time the way ngx_parse_time does: one or more
// <digits><unit> groups, units in descending order, each at most once, a
// trailing group without a unit meaning seconds. With seconds=false the
// value is in milliseconds (timeouts): `ms` is allowed and `y`/`M` are not.
// Spaces between groups, which nginx also accepts, are refused: the renderer
// writes these values as one parameter or inside key=value.
func parseTime(s string, seconds bool) (int64, bool) {
	if s == "" {
		return 0, false
	}
	next := 0 // index into timeUnits of the largest unit still allowed
	if !seconds {
		next = 2 // no years or months for millisecond values
	}
	msUsed := false
	var total int64
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		n, ok := parseCount(s[:i])
		if !ok {
			return 0, false
		}
		s = s[i:]
		var unitMs int64 // the group's unit, in the result's unit
		switch {
		case s == "":
			if msUsed {
				return 0, false
			}
			unitMs = 1
			if !seconds {
				unitMs = 1000
			}
		case strings.HasPrefix(s, "ms"):
			if seconds || msUsed {
				return 0, false
			}
			msUsed, next = true, len(timeUnits)
			unitMs, s = 1, s[2:]
		default:
			j := next
			for j < len(timeUnits) && !strings.HasPrefix(s, timeUnits[j].unit) {
				j++
			}
			if j == len(timeUnits) {
				return 0, false
			}
			next = j + 1
			unitMs, s = timeUnits[j].seconds, s[1:]
			if !seconds {
				unitMs *= 1000
			}
		}
		if n > math.MaxInt64/unitMs || total > math.MaxInt64-n*unitMs {
			return 0, false
		}
		total += n * unitMs
	}
	return total, true
}

// checkVariables checks every `$` reference in a complex value as
// ngx_http_script_compile reads it: `$name`, `${name}` or a capture `$1`…`$9`,
// where the name must be a variable every nginx build defines. Variables the
// config itself defines ($openflare_waf_site and the like) are not known
// here, because a value that uses them only works while a route sets them.
func checkVariables(s string) error {
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			continue
		}
		i++
		if i == len(s) {
			return fmt.Errorf("ends with a lone $")
		}
		if s[i] >= '1' && s[i] <= '9' {
			continue
		}
		bracket := s[i] == '{'
		if bracket {
			i++
		}
		start := i
		for i < len(s) && isNameChar(s[i]) {
			i++
		}
		name := s[start:i]
		if bracket {
			if i == len(s) || s[i] != '}' {
				return fmt.Errorf("has ${ without its closing }")
			}
		} else {
			i--
		}
		if name == "" {
			return fmt.Errorf("has a $ not followed by a variable name")
		}
		if !knownVariable(name) {
			return fmt.Errorf("uses $%s, which nginx does not define", name)
		}
	}
	return nil
}

func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// validHostname accepts a DNS-style host name: dot-separated labels of ASCII
// letters, digits, `-` and `_` (internal names use it), 1–63 bytes each,
// 253 in all. Dotted IPv4 literals are host names by this rule too.
func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !(isNameChar(c) || c == '-') {
				return false
			}
		}
	}
	return true
}

// hostPortProblem checks host[:port] as nginx's ngx_parse_url reads it in
// `server` lines: a host name, an IPv4 address or a bracketed IPv6 address
// without a zone, and a port of 1–65535 when one is given.
func hostPortProblem(hp string) string {
	host, port := hp, ""
	if strings.HasPrefix(hp, "[") {
		end := strings.IndexByte(hp, ']')
		if end < 0 {
			return "has an unclosed [ in its host"
		}
		host, port = hp[:end+1], hp[end+1:]
		if port != "" && port[0] != ':' {
			return "has text after its IPv6 address"
		}
		if a, err := netip.ParseAddr(host[1 : len(host)-1]); err != nil || !a.Is6() || a.Zone() != "" {
			return "has an invalid IPv6 address"
		}
	} else if i := strings.LastIndexByte(hp, ':'); i >= 0 {
		host, port = hp[:i], hp[i:]
		if !validHostname(host) {
			return "has an invalid host name"
		}
	} else if !validHostname(host) {
		return "has an invalid host name"
	}
	if port != "" {
		n, ok := parseCount(port[1:])
		if !ok || n < 1 || n > 65535 {
			return "has an invalid port"
		}
	}
	return ""
}

// proxyURLProblem checks a URL written into proxy_pass (or a named upstream
// built from it): an http or https URL with a host, no user info (nginx
// cannot send it) and no fragment, that fits one unquoted parameter without
// variables.
func proxyURLProblem(raw string) string {
	s := trimBlank(raw)
	if p := literalProblem(s); p != "" {
		return p
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Scheme != "http" && u.Scheme != "https":
		return "is not an http:// or https:// URL"
	case u.Host == "":
		return "has no host"
	case u.User != nil:
		return "carries user info, which nginx cannot send"
	case strings.IndexByte(s, '#') >= 0:
		return "has a fragment"
	}
	return hostPortProblem(u.Host)
}
