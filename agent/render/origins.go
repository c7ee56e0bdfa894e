package render

import (
	"net/url"
	"strings"
)

// Origin is one place a rendered route has nginx connect to: a proxy_pass
// URL (origin_url verbatim, or a Pages API proxy) or a `server` of the
// route's named upstream. The renderer itself never judges where an origin
// points; the node's template policy does (agent/policy), and it must see
// the host exactly as nginx will resolve it.
type Origin struct {
	RouteID uint64
	// Site is the route's site name, else its first domain.
	Site string
	// URL is the origin as the route wrote it: origin_url, one of its
	// upstreams, or pages_deployment.api_proxy_pass, trimmed.
	URL string
	// Scheme, Host and Port are the URL's, as written: an IPv6 host keeps
	// its brackets, and Port is "" when the URL names none. Host is ""
	// when the URL has none the renderer could read.
	Scheme, Host, Port string
	// Upstream is the upstream block the origin is a `server` of; "" when
	// proxy_pass names the origin itself.
	Upstream string
}

// origins lists what a proxy route's plan connects to: the servers of its
// named upstream, or origin_url when proxy_pass carries it verbatim (the
// upstreams are then not rendered at all).
func (p *upstreamPlan) origins(r *route) []Origin {
	if p.name == "" {
		return []Origin{newOrigin(r, trimBlank(p.proxyPass), "")}
	}
	out := make([]Origin, 0, len(p.urls))
	for _, u := range p.urls {
		out = append(out, newOrigin(r, u, p.name))
	}
	return out
}

// pagesOrigins lists what a Pages route connects to: its API proxy target,
// when it has an API location.
func pagesOrigins(r *route) []Origin {
	if _, pass := apiProxy(r.PagesDeployment); pass != "" {
		return []Origin{newOrigin(r, pass, "")}
	}
	return nil
}

func newOrigin(r *route, raw, upstream string) Origin {
	o := Origin{RouteID: r.ID, Site: r.wafSite(), URL: raw, Upstream: upstream}
	u, err := url.Parse(raw)
	if err != nil {
		return o
	}
	o.Scheme, o.Host = u.Scheme, u.Host
	if strings.HasPrefix(o.Host, "[") {
		if end := strings.IndexByte(o.Host, ']'); end >= 0 {
			o.Host, o.Port = o.Host[:end+1], strings.TrimPrefix(o.Host[end+1:], ":")
		}
	} else if i := strings.LastIndexByte(o.Host, ':'); i >= 0 {
		o.Host, o.Port = o.Host[:i], o.Host[i+1:]
	}
	return o
}

// dedupeOrigins keeps the first of origins that agree on everything but
// the URL's path (http://a and http://a/ reach the same server), in order.
func dedupeOrigins(origins []Origin) []Origin {
	type key struct {
		id                                 uint64
		site, scheme, host, port, upstream string
	}
	seen := make(map[key]bool, len(origins))
	out := make([]Origin, 0, len(origins))
	for _, o := range origins {
		k := key{o.RouteID, o.Site, o.Scheme, o.Host, o.Port, o.Upstream}
		if !seen[k] {
			seen[k] = true
			out = append(out, o)
		}
	}
	return out
}
