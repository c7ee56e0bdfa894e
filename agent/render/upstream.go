package render

import (
	"net/url"
	"strconv"
	"strings"
)

// upstreamPlan is how a proxy route reaches its origin: through a named
// upstream block (name != "") or with origin_url verbatim.
type upstreamPlan struct {
	name      string
	hosts     []string // one `server` line each, host[:port] as written
	urls      []string // the URL each of hosts came from
	proxyPass string
}

// planUpstream applies PROTOCOL 5.2's named-upstream rule: one upstream with
// scheme and host, or several sharing a scheme with no path or query.
// Anything else keeps origin_url verbatim, which is the only faithful form
// for mixed schemes or per-upstream paths.
func planUpstream(r *route) upstreamPlan {
	verbatim := upstreamPlan{proxyPass: r.OriginURL}
	list := make([]string, 0, len(r.Upstreams))
	for _, u := range r.Upstreams {
		if u = strings.TrimSpace(u); u != "" {
			list = append(list, u)
		}
	}
	if len(list) == 0 {
		list = append(list, strings.TrimSpace(r.OriginURL))
	}
	name := upstreamName(r)
	if len(list) == 1 {
		u, err := url.Parse(list[0])
		if err != nil || u.Scheme == "" || u.Host == "" {
			return verbatim
		}
		pass := u.Scheme + "://" + name
		if p := u.EscapedPath(); p != "/" {
			pass += p
		}
		if u.RawQuery != "" {
			pass += "?" + u.RawQuery
		}
		return upstreamPlan{name: name, hosts: []string{u.Host}, urls: list, proxyPass: pass}
	}
	var scheme string
	hosts := make([]string, 0, len(list))
	for i, raw := range list {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme == "" || u.Host == "" || u.RawQuery != "" || u.ForceQuery {
			return verbatim
		}
		if p := u.EscapedPath(); p != "" && p != "/" {
			return verbatim
		}
		if i == 0 {
			scheme = u.Scheme
		} else if u.Scheme != scheme {
			return verbatim
		}
		hosts = append(hosts, u.Host)
	}
	return upstreamPlan{name: name, hosts: hosts, urls: list, proxyPass: scheme + "://" + name}
}

// upstreamName is backend_<sanitised site>_<route id>.
func upstreamName(r *route) string {
	return "backend_" + sanitizeSiteName(r.wafSite()) + "_" + strconv.FormatUint(uint64(r.ID), 10)
}

// sanitizeSiteName keeps ASCII letters (lower-cased) and digits and turns
// every other rune into `_` without collapsing runs, then trims `_`; an
// empty result becomes "backend". It works per rune, so `é` is one `_`.
func sanitizeSiteName(site string) string {
	var b strings.Builder
	b.Grow(len(site))
	for _, c := range site {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b.WriteRune(c)
		case c >= 'A' && c <= 'Z':
			b.WriteRune(c + ('a' - 'A'))
		default:
			b.WriteByte('_')
		}
	}
	if s := strings.Trim(b.String(), "_"); s != "" {
		return s
	}
	return "backend"
}

func (p *upstreamPlan) writeBlock(b *strings.Builder) {
	if p.name == "" {
		return
	}
	writeLines(b, "upstream ", p.name, " {\n")
	for _, h := range p.hosts {
		writeLines(b, "    server ", h, " max_fails=3 fail_timeout=10s;\n")
	}
	b.WriteString("    keepalive 128;\n}\n\n")
}
