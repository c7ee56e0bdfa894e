package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"openflare/agent/protocol"
	"openflare/agent/render"
)

// fakeDNS answers from a table, case-insensitively as DNS does, and
// records every name it was asked; a name not in the table does not
// resolve.
type fakeDNS struct {
	table map[string][]string
	asked []string
}

func (d *fakeDNS) lookup(host string) ([]netip.Addr, error) {
	d.asked = append(d.asked, host)
	addrs, ok := d.table[strings.ToLower(host)]
	if !ok {
		return nil, errors.New("no such host")
	}
	var out []netip.Addr
	for _, a := range addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

func newDNS() *fakeDNS {
	return &fakeDNS{table: map[string][]string{
		"localhost":          {"127.0.0.1", "::1"},
		"app.internal":       {"10.0.0.5"},
		"lan.example":        {"192.168.1.2", "fd12::7"},
		"www.example.com":    {"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
		"metadata.example":   {"169.254.169.254"},
		"sneaky.example":     {"10.0.0.9", "::ffff:169.254.169.254"},
		"v6meta.example":     {"fd00:ec2::254"},
		"scoped.example":     {"fe80::1%eth0"},
		"alibaba.example":    {"100.100.100.200"},
		"169.254.169.254.in": {"169.254.169.254"},
	}}
}

func origin(url string) render.Origin {
	o := render.Origin{RouteID: 3, Site: "api", URL: url}
	rest := url[strings.Index(url, "://")+3:]
	o.Scheme = url[:strings.Index(url, "://")]
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	o.Host, o.Port, _ = targetHost(rest)
	return o
}

func TestCheckOriginsRefuses(t *testing.T) {
	cases := []struct {
		url, why string
		looked   bool // the host is a name, asked of the resolver
	}{
		{"http://169.254.169.254/", "is a link-local address (cloud metadata lives there)", false},
		{"http://169.254.0.1:8080", "is a link-local address (cloud metadata lives there)", false},
		{"http://[fe80::1]/", "is a link-local address", false},
		{"http://[FE80::a:b]:81", "is fe80::a:b, a link-local address", false},
		{"http://[febf::1]", "is a link-local address", false},
		{"http://[fd00:ec2::254]/latest", "is the cloud metadata address of AWS over IPv6", false},
		{"http://[fe80::1%eth0]", "is fe80::1, a link-local address", false},
		{"http://100.100.100.200/latest/meta-data", "is the cloud metadata address of Alibaba Cloud", false},
		// IPv4 written as IPv6.
		{"http://[::ffff:169.254.169.254]/", "is 169.254.169.254, a link-local address", false},
		{"http://[::ffff:a9fe:a9fe]/", "is 169.254.169.254, a link-local address", false},
		{"http://[0:0:0:0:0:ffff:a9fe:a9fe]/", "is 169.254.169.254, a link-local address", false},
		{"http://[::169.254.169.254]/", "is 169.254.169.254, a link-local address", false},
		{"http://[::ffff:169.254.169.0254]/", "is 169.254.169.254, a link-local address", false},
		// What nginx's ngx_inet_addr reads.
		{"http://169.254.169.0254/", "is 169.254.169.254, a link-local address", false},
		{"http://0169.0254.0169.0254/", "is 169.254.169.254, a link-local address", false},
		{"http://169.254..1/", "is 169.254.0.1, a link-local address", false},
		{"http://169.254.169.18446744073709551870/", "is 169.254.169.254, a link-local address", false}, // 2^64+254
		{"http://169.254.169.4294967550/", "is 169.254.169.254, a link-local address", false},           // 2^32+254
		// What the C library's inet_aton reads, through getaddrinfo.
		{"http://2852039166/", "is 169.254.169.254, a link-local address", false},
		{"http://0xa9fea9fe/", "is 169.254.169.254, a link-local address", false},
		{"http://0XA9FEA9FE/", "is 169.254.169.254, a link-local address", false},
		{"http://0251.0376.0251.0376/", "is 169.254.169.254, a link-local address", false},
		{"http://0xa9.0xfe.0xa9.0xfe/", "is 169.254.169.254, a link-local address", false},
		{"http://169.254.43518/", "is 169.254.169.254, a link-local address", false},
		{"http://169.16689662/", "is 169.254.169.254, a link-local address", false},
		{"http://025177524776/", "is 169.254.169.254, a link-local address", false},
		{"http://169.254.169.254./", "is 169.254.169.254, a link-local address", false},
		{"http://0xa9fea9fe./", "is 169.254.169.254, a link-local address", false},
		// Names, through the resolver.
		{"http://metadata.example/", "resolves to 169.254.169.254, a link-local address", true},
		{"https://sneaky.example:8443/", "resolves to 169.254.169.254, a link-local address", true},
		{"http://v6meta.example", "resolves to fd00:ec2::254, the cloud metadata address of AWS over IPv6", true},
		{"http://scoped.example", "resolves to fe80::1, a link-local address", true},
		{"http://alibaba.example", "resolves to 100.100.100.200, the cloud metadata address", true},
		{"http://169.254.169.254.in/", "resolves to 169.254.169.254", true},
	}
	for _, tc := range cases {
		dns := newDNS()
		o := origin(tc.url)
		err := Policy{}.CheckOrigins("", []render.Origin{o}, dns.lookup)
		if !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want a refusal", tc.url, err)
			continue
		}
		want := "route 3 (api): origin " + tc.url + " " + tc.why
		if !strings.Contains(err.Error(), want) || !strings.HasSuffix(err.Error(), "; allow_link_local_origins in agent.json permits it") {
			t.Errorf("%s: %q\nwant it to say %q and name the switch", tc.url, err, want)
		}
		if looked := len(dns.asked) > 0; looked != tc.looked {
			t.Errorf("%s: resolver asked %v", tc.url, dns.asked)
		}
		// The owner's switch and a trusted policy let every one through.
		for _, p := range []Policy{{AllowLinkLocalOrigins: true}, {Trusted: true}} {
			if err := p.CheckOrigins("", []render.Origin{o}, newDNS().lookup); err != nil {
				t.Errorf("%s with %+v: %v", tc.url, p, err)
			}
		}
	}
}

func TestCheckOriginsAllows(t *testing.T) {
	for _, url := range []string{
		"http://127.0.0.1:9000", "http://127.8.9.1", "http://[::1]:8080/", "http://10.0.0.5",
		"https://192.168.1.2:8443/", "http://172.16.4.4", "http://[fd12::1]", "http://[fc00::9]",
		"http://100.64.0.1", "http://100.100.100.100", "http://93.184.215.14/", "http://[2606:4700::1111]",
		"http://8.8.8.8", "http://[::ffff:10.0.0.1]", "http://0.0.0.0", "http://010.0.0.1",
		"http://localhost:3000", "http://app.internal/", "http://lan.example", "https://www.example.com/",
		"http://LocalHost",
		"http://nowhere.invalid/", // does not resolve: nginx -t fails it
		"http://169.254.169.254.5/", "http://0x1.0x2.0x3.0x4.0x5/", "http://169.254.169.256/", "http://08.1.2.3/",
	} {
		if err := (Policy{}).CheckOrigins("", []render.Origin{origin(url)}, newDNS().lookup); err != nil {
			t.Errorf("%s: %v", url, err)
		}
	}
}

// One lookup per name, however many origins share it; none for literals.
func TestCheckOriginsLooksUpEachNameOnce(t *testing.T) {
	dns := newDNS()
	origins := []render.Origin{origin("http://app.internal/"), origin("http://APP.internal:81"), origin("http://10.0.0.1"), origin("http://lan.example")}
	if err := (Policy{}).CheckOrigins("", origins, dns.lookup); err != nil {
		t.Fatal(err)
	}
	if strings.Join(dns.asked, " ") != "app.internal lan.example" {
		t.Fatalf("asked %v", dns.asked)
	}
}

// The first refused origin is named, with its route; one without a site
// name is named by id alone.
func TestCheckOriginsNamesTheRoute(t *testing.T) {
	origins := []render.Origin{
		{RouteID: 1, Site: "ok", URL: "http://10.0.0.1", Host: "10.0.0.1"},
		{RouteID: 9, URL: "http://169.254.169.254:80", Host: "169.254.169.254", Port: "80", Upstream: "backend_x_9"},
		{RouteID: 10, Site: "later", URL: "http://169.254.1.1", Host: "169.254.1.1"},
	}
	err := Policy{}.CheckOrigins("", origins, newDNS().lookup)
	want := "refused by the node's template policy: route 9: origin http://169.254.169.254:80 is a link-local address (cloud metadata lives there); allow_link_local_origins in agent.json permits it"
	if err == nil || err.Error() != want {
		t.Fatalf("%v\nwant %s", err, want)
	}
	// An origin whose URL the renderer could not read has no host.
	err = Policy{}.CheckOrigins("", []render.Origin{{RouteID: 2, Site: "s", URL: "http://[::1"}}, newDNS().lookup)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "route 2 (s): origin http://[::1 has no host the agent can read") {
		t.Fatalf("%v", err)
	}
}

// A custom main template's own pass targets and upstream servers are
// checked too: it is server text as much as the routes.
func TestCheckOriginsMainTemplate(t *testing.T) {
	routeOrigins := []render.Origin{{RouteID: 1, Site: "a", URL: "http://10.0.0.1", Host: "10.0.0.1", Upstream: "backend_a_1"}}
	cases := []struct{ line, want string }{
		{`    server { listen 81; location / { proxy_pass http://169.254.169.254/latest/; } }`,
			"main config line 8: proxy_pass http://169.254.169.254/latest/ is a link-local address"},
		{`    server { listen 81; location / { proxy_pass http://0xa9fea9fe; } }`,
			"main config line 8: proxy_pass http://0xa9fea9fe is 169.254.169.254, a link-local address"},
		{`    upstream meta { server 169.254.169.254:80 weight=2; }` + "\n" + `    server { listen 81; location / { proxy_pass http://meta; } }`,
			"main config line 8: server 169.254.169.254:80 is a link-local address"},
		{`    upstream meta { server metadata.example; }`,
			"main config line 8: server metadata.example resolves to 169.254.169.254"},
		{`    server { listen 81; location / { grpc_pass grpc://[fe80::1]:50051; } }`,
			"main config line 8: grpc_pass grpc://[fe80::1]:50051 is a link-local address"},
		{`    server { listen 81; location / { fastcgi_pass 169.254.169.254:9000; } }`,
			"main config line 8: fastcgi_pass 169.254.169.254:9000 is a link-local address"},
		{`    server { listen 81; location / { proxy_pass "http://169.254.169.254 x"; } }`,
			`main config line 8: proxy_pass http://169.254.169.254 x is 169.254.169.254, a link-local address`},
		// A name that is an upstream only with no port: with one, nginx
		// resolves it as a host.
		{`    server { listen 81; location / { proxy_pass http://metadata.example:80; } }` + "\n" + `    upstream metadata.example { server 10.0.0.2; }`,
			"main config line 8: proxy_pass http://metadata.example:80 resolves to 169.254.169.254"},
		{`    server { listen 81; set $m 169.254.169.254; location / { proxy_pass http://$m; } }`,
			"main config line 8: proxy_pass http://$m: a target built from variables gets its address per request, which the agent cannot check; allow_link_local_origins in agent.json permits it"},
		{`    server { listen 81; location / { proxy_pass http://10.0.0.1$request_uri; } }`,
			"a target built from variables"},
	}
	for _, tc := range cases {
		main := withHTTP(tc.line)
		if err := (Policy{}).Check(main, ""); err != nil {
			t.Fatalf("%s: Check: %v", tc.line, err)
		}
		err := Policy{}.CheckOrigins(main, routeOrigins, newDNS().lookup)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n%v\nwant %q", tc.line, err, tc.want)
		}
		if err := (Policy{AllowLinkLocalOrigins: true}).CheckOrigins(main, routeOrigins, newDNS().lookup); err != nil {
			t.Errorf("%s with the switch: %v", tc.line, err)
		}
	}

	dns := newDNS()
	allowed := withHTTP(`    upstream app { server 127.0.0.1:3000; server app.internal:8080 backup; }` + "\n" +
		`    server { listen 81; location / { proxy_pass http://app; } location /b { proxy_pass http://backend_a_1/b; }` +
		` location /c { proxy_pass http://lan.example:8080/c?x=1; } location /d { uwsgi_pass suwsgi://[::1]:9000; } }`)
	if err := (Policy{}).Check(allowed, ""); err != nil {
		t.Fatalf("allowed main: Check: %v", err)
	}
	if err := (Policy{}).CheckOrigins(allowed, routeOrigins, dns.lookup); err != nil {
		t.Fatalf("allowed main: %v", err)
	}
	// The upstream names are blocks, not hosts: never looked up.
	if strings.Join(dns.asked, " ") != "app.internal lan.example" {
		t.Errorf("asked %v", dns.asked)
	}
}

// Hosts are split from targets where nginx's ngx_parse_url splits them.
func TestTargetHost(t *testing.T) {
	cases := map[string][3]string{
		"http://h":                {"h", "", "ok"},
		"http://h:81/p":           {"h", "81", "ok"},
		"https://h?x=1":           {"h", "", "ok"},
		"h:9000":                  {"h", "9000", "ok"},
		"grpcs://[fe80::1]:50051": {"[fe80::1]", "50051", "ok"},
		"[::1]":                   {"[::1]", "", "ok"},
		"[::1":                    {"[::1", "", "ok"},
		"http://a:b:c/":           {"a", "b:c", "ok"},
		"unix:/run/x.sock":        {"", "", ""},
		"http://UNIX:/run/x.sock": {"", "", ""},
	}
	for in, want := range cases {
		host, port, ok := targetHost(in)
		if host != want[0] || port != want[1] || ok != (want[2] == "ok") {
			t.Errorf("targetHost(%q) = %q %q %v, want %v", in, host, port, ok, want)
		}
	}
}

// Every version the real server rendered passes: no false refusals of
// their route origins (private addresses and names of the LAN).
func TestCheckOriginsFixturesPass(t *testing.T) {
	renderedFixtures(t, func(name, _, _ string, ac protocol.ActiveConfig) {
		out, err := render.Config(ac.SourceConfigJSON, ac.SupportFiles)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(out.Origins) == 0 {
			t.Errorf("%s: no origins", name)
		}
		dns := &fakeDNS{table: map[string][]string{"origin.internal.example": {"10.0.3.2"}, "api.internal.example": {"10.0.16.9"}}}
		if err := (Policy{}).CheckOrigins(out.Main, out.Origins, dns.lookup); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
}
