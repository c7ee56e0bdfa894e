package policy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"openflare/agent/render"
)

// Where a server-sent config may have nginx connect. Loopback and private
// addresses stay allowed: an edge node usually fronts applications on
// 127.0.0.1 or its LAN, and the server is trusted with the node's sites.
// Link-local addresses are not: 169.254.169.254 (fd00:ec2::254 on AWS over
// IPv6) is where a cloud hands its instance credentials, to any process
// that asks, and a control plane that routed a public domain there would
// read them from anywhere.
var refusedOrigins = []struct {
	net  netip.Prefix
	what string
}{
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address (cloud metadata lives there)"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "the cloud metadata address of AWS over IPv6"},
	// Alibaba Cloud's metadata is outside link-local, in the shared
	// address space; one address, so CGNAT and VPN origins stay allowed.
	{netip.MustParsePrefix("100.100.100.200/32"), "the cloud metadata address of Alibaba Cloud"},
}

const allowLinkLocal = "allow_link_local_origins in agent.json permits it"

// passDirectives connect to the server their first argument names.
var passDirectives = map[string]bool{
	"proxy_pass": true, "grpc_pass": true, "fastcgi_pass": true,
	"uwsgi_pass": true, "scgi_pass": true, "memcached_pass": true,
}

// CheckOrigins reviews where a rendered version has nginx connect: the
// routes' origins (render.Output.Origins) and what a custom main template
// (mainText, as rendered) passes requests to or lists as upstream servers.
// It runs after Check, which refuses the text it could not read.
//
// A literal address is judged as nginx reads it, odd spellings included;
// a host name by what lookup (the system resolver, which nginx also uses
// when it loads the config) returns for it now. A name that does not
// resolve is not refused: nginx cannot resolve it either, and the version
// fails its `nginx -t`. What a name resolves to later, when nginx loads
// the config or re-resolves a `server … resolve`, is not seen here; each
// apply checks again. A pass target built from variables in the main
// template is refused: nginx picks its address per request.
func (p Policy) CheckOrigins(mainText string, origins []render.Origin, lookup func(host string) ([]netip.Addr, error)) error {
	if p.Trusted || p.AllowLinkLocalOrigins {
		return nil
	}
	c := originCheck{lookup: lookup, judged: map[string]string{}}
	upstreams := map[string]bool{}
	for _, o := range origins {
		if o.Upstream != "" {
			upstreams[strings.ToLower(o.Upstream)] = true
		}
		if why := c.judge(o.Host); why != "" {
			return fmt.Errorf("%w: %s: origin %s %s; %s", ErrRefused, routeName(o), o.URL, why, allowLinkLocal)
		}
	}
	return c.checkMain(mainText, upstreams)
}

func routeName(o render.Origin) string {
	id := strconv.FormatUint(o.RouteID, 10)
	if o.Site == "" {
		return "route " + id
	}
	return "route " + id + " (" + o.Site + ")"
}

// originCheck judges hosts, each once: a name many routes share is looked
// up one time.
type originCheck struct {
	lookup func(host string) ([]netip.Addr, error)
	judged map[string]string
}

// checkMain reviews the pass directives and upstream servers of the main
// config. upstreams are the upstream blocks the route config declares; a
// pass target naming one of them or of the main config's own is that
// block, whose servers are checked themselves.
func (c *originCheck) checkMain(text string, upstreams map[string]bool) error {
	dirs, err := parse(text)
	if err != nil {
		return fmt.Errorf("%w: main config: %v", ErrRefused, err)
	}
	for _, d := range dirs {
		if d.name == "upstream" && d.block && len(d.args) == 1 {
			upstreams[strings.ToLower(d.args[0])] = true
		}
	}
	for _, d := range dirs {
		if len(d.args) == 0 {
			continue
		}
		arg := d.args[0]
		var host, port string
		var ok bool
		switch {
		case passDirectives[d.name]:
			if strings.Contains(arg, "$") {
				return fmt.Errorf("%w: main config line %d: %s %s: a target built from variables gets its address per request, which the agent cannot check; %s",
					ErrRefused, d.line, d.name, arg, allowLinkLocal)
			}
			host, port, ok = targetHost(arg)
			if ok && port == "" && upstreams[strings.ToLower(host)] {
				continue
			}
		case d.name == "server" && !d.block:
			host, _, ok = targetHost(arg)
		}
		if !ok {
			continue
		}
		if why := c.judge(host); why != "" {
			return fmt.Errorf("%w: main config line %d: %s %s %s; %s", ErrRefused, d.line, d.name, arg, why, allowLinkLocal)
		}
	}
	return nil
}

// targetHost splits a pass target or upstream server (scheme://host:port/uri,
// host:port, [v6]:port) as nginx's ngx_parse_url does: the host ends at the
// first ':', '/' or '?'. ok is false for a unix: socket, which Check refuses.
func targetHost(arg string) (host, port string, ok bool) {
	rest := arg
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	if strings.HasPrefix(strings.ToLower(rest), "unix:") {
		return "", "", false
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	if strings.HasPrefix(rest, "[") {
		if end := strings.IndexByte(rest, ']'); end >= 0 {
			return rest[:end+1], strings.TrimPrefix(rest[end+1:], ":"), true
		}
		return rest, "", true
	}
	host, port, _ = strings.Cut(rest, ":")
	return host, port, true
}

// judge returns why an origin on host is refused, or "".
func (c *originCheck) judge(host string) string {
	key := strings.ToLower(host)
	if why, done := c.judged[key]; done {
		return why
	}
	why := c.judgeOnce(host)
	c.judged[key] = why
	return why
}

func (c *originCheck) judgeOnce(host string) string {
	if host == "" {
		return "has no host the agent can read"
	}
	if addrs, literal := literalAddrs(host); literal {
		if len(addrs) == 0 {
			return "is an IPv6 address the agent cannot read"
		}
		for _, a := range addrs {
			if at, what := refusedAs(a); what != "" {
				if at.String() == strings.Trim(host, "[]") {
					return "is " + what
				}
				return "is " + at.String() + ", " + what
			}
		}
		return ""
	}
	addrs, err := c.lookup(host)
	if err != nil {
		// Not a refusal: nginx resolves the name itself when it loads the
		// config, through the same system configuration, and a name it
		// cannot resolve fails nginx -t. A name whose server fails this
		// lookup on purpose and answers nginx's is the DNS rebinding
		// CheckOrigins does not cover.
		return ""
	}
	for _, a := range addrs {
		if at, what := refusedAs(a); what != "" {
			return "resolves to " + at.String() + ", " + what
		}
	}
	return ""
}

// refusedAs finds a in refusedOrigins, also when it is an IPv4 address
// written as IPv6 (mapped, ::ffff:a.b.c.d, or the old compatible form,
// ::a.b.c.d): the address it was found as, and what that is.
func refusedAs(a netip.Addr) (netip.Addr, string) {
	// A zone names the interface; a prefix never contains a zoned address.
	a = a.WithZone("")
	forms := []netip.Addr{a}
	if b := a.As16(); a.Is6() && [12]byte(b[:12]) == [12]byte{} || a.Is4In6() {
		forms = append(forms, netip.AddrFrom4([4]byte(b[12:])))
	}
	for _, f := range forms {
		for _, r := range refusedOrigins {
			if r.net.Contains(f) {
				return f, r.what
			}
		}
	}
	return netip.Addr{}, ""
}

// literalAddrs reports whether host is an address rather than a name, and
// the addresses nginx may read it as. nginx tries its own reader first
// (ngx_inet_addr) and then getaddrinfo, whose C library reads the numeric
// forms of inet_aton (2852039166, 0xa9fea9fe, 0251.0376.0251.0376,
// 169.254.43518); every reading either may take counts. A trailing dot is
// dropped first: it makes a fully qualified name of the address, which a
// resolver may well answer with the address itself. A bracketed host is
// IPv6 whatever it holds; an empty list means it is none nginx reads.
func literalAddrs(host string) ([]netip.Addr, bool) {
	if inner, ok := strings.CutPrefix(host, "["); ok {
		return ipv6Addrs(strings.TrimSuffix(inner, "]")), true
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, true
	}
	h := strings.TrimSuffix(host, ".")
	var addrs []netip.Addr
	for _, bits := range []uint{32, 64} {
		if a, ok := ngxInetAddr(h, bits); ok {
			addrs = append(addrs, a)
		}
	}
	// C libraries before glibc 2.28 took "1.2.3.4 anything" as 1.2.3.4.
	if i := strings.IndexAny(h, " \t\n\v\f\r"); i >= 0 {
		h = h[:i]
	}
	if a, ok := inetAton(h); ok {
		addrs = append(addrs, a)
	}
	return addrs, len(addrs) > 0
}

// ipv6Addrs reads the inside of a bracketed host. nginx reads an embedded
// IPv4 tail with ngx_inet_addr, leading zeros and all, which netip does
// not.
func ipv6Addrs(s string) []netip.Addr {
	if a, err := netip.ParseAddr(s); err == nil && a.Is6() {
		return []netip.Addr{a}
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 || !strings.Contains(s[i:], ".") {
		return nil
	}
	var addrs []netip.Addr
	for _, bits := range []uint{32, 64} {
		if v4, ok := ngxInetAddr(s[i+1:], bits); ok {
			if a, err := netip.ParseAddr(s[:i+1] + v4.String()); err == nil {
				addrs = append(addrs, a)
			}
		}
	}
	return addrs
}

// ngxInetAddr reads s as nginx's ngx_inet_addr: four dot-separated decimal
// numbers below 256, leading zeros read as decimal and an empty number as
// 0. Each number accumulates in nginx's ngx_uint_t, 32 or 64 bits wide on
// the node, and wraps there: a long enough number lands below 256.
func ngxInetAddr(s string, bits uint) (netip.Addr, bool) {
	mask := uint64(1)<<bits - 1
	var b [4]byte
	var n int
	var octet uint64
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			octet = (octet*10 + uint64(c-'0')) & mask
		case c == '.' && octet < 256 && n < 3:
			b[n], octet = byte(octet), 0
			n++
		default:
			return netip.Addr{}, false
		}
	}
	if n != 3 || octet >= 256 {
		return netip.Addr{}, false
	}
	b[3] = byte(octet)
	return netip.AddrFrom4(b), true
}

// inetAton reads s as the C library's inet_aton (glibc and musl alike):
// one to four dot-separated numbers in C notation (decimal, 0x hex, 0
// octal), each but the last one byte, the last filling the bytes left.
func inetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var n uint32
	for i, p := range parts {
		v, ok := cNumber(p)
		last := i == len(parts)-1
		if !ok || !last && v > 0xff || last && v>>(8*(4-uint(i))) != 0 {
			return netip.Addr{}, false
		}
		if last {
			n |= uint32(v)
		} else {
			n |= uint32(v) << (24 - 8*uint(i))
		}
	}
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

// cNumber reads one unsigned 32-bit number as strtoul with base 0 does,
// but only from a digit on (inet_aton refuses signs and spaces). A bare
// "0x" is 0, as older glibc read it.
func cNumber(p string) (uint64, bool) {
	if p == "" || p[0] < '0' || p[0] > '9' {
		return 0, false
	}
	base, digits := 10, p
	if len(p) > 1 && p[0] == '0' {
		base, digits = 8, p[1:]
		if p[1] == 'x' || p[1] == 'X' {
			base, digits = 16, p[2:]
		}
	}
	if digits == "" {
		return 0, true
	}
	v, err := strconv.ParseUint(digits, base, 32)
	return v, err == nil
}
