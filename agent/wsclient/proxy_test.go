package wsclient

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"openflare/agent/protocol"
)

// connectProxy is an HTTP CONNECT proxy on 127.0.0.1. It tunnels every
// target to 127.0.0.1 on the target's port, so the tests can name the
// server example.com (a host proxy settings apply to, unlike loopback, and
// one the httptest certificate is valid for) without any DNS.
type connectProxy struct {
	t        *testing.T
	url      *url.URL           // http://[user:pass@]127.0.0.1:port
	wantAuth string             // the Proxy-Authorization to accept; "" accepts any
	answer   string             // a status line to refuse with instead of 200, e.g. "407 Proxy Authentication Required"
	silent   bool               // read the CONNECT and never answer
	requests chan *http.Request // every CONNECT received
	ln       net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]bool
}

func newConnectProxy(t *testing.T, user *url.Userinfo, configure func(*connectProxy)) *connectProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &connectProxy{
		t:        t,
		url:      &url.URL{Scheme: "http", User: user, Host: ln.Addr().String()},
		requests: make(chan *http.Request, 16),
		ln:       ln,
		conns:    make(map[net.Conn]bool),
	}
	if configure != nil {
		configure(p)
	}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !p.track(c) {
				return
			}
			p.wg.Go(func() { p.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.conns = nil
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// track registers c to be closed at cleanup; false once cleanup has run.
func (p *connectProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *connectProxy) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	p.requests <- req
	if p.silent {
		_, _ = io.Copy(io.Discard, br)
		return
	}
	if req.Method != http.MethodConnect {
		_, _ = io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
	answer := p.answer
	if answer == "" && p.wantAuth != "" && req.Header.Get("Proxy-Authorization") != p.wantAuth {
		answer = "407 Proxy Authentication Required"
	}
	if answer != "" {
		_, _ = io.WriteString(c, "HTTP/1.1 "+answer+"\r\nProxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 12\r\n\r\naccess denied")
		return
	}
	_, port, err := net.SplitHostPort(req.Host)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	if !p.track(up) {
		return
	}
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Splice until either side is done, then close both.
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, br); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
}

// fixedProxy always names p, as HTTP(S)_PROXY without NO_PROXY would.
func fixedProxy(p *url.URL) func(*url.URL) (*url.URL, error) {
	return func(*url.URL) (*url.URL, error) { return p, nil }
}

// schemeProxy names the proxy for each scheme of the request URL, as
// HTTP_PROXY and HTTPS_PROXY do; other schemes connect directly.
func schemeProxy(proxies map[string]*url.URL) func(*url.URL) (*url.URL, error) {
	return func(u *url.URL) (*url.URL, error) { return proxies[u.Scheme], nil }
}

// asExampleCom rewrites an httptest URL (http://127.0.0.1:port) to name
// example.com:port.
func asExampleCom(t *testing.T, serverURL string) (string, string) {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = net.JoinHostPort("example.com", u.Port())
	return u.String(), u.Host
}

func TestProxyWS(t *testing.T) {
	srv := newServer(t, false)
	proxy := newConnectProxy(t, nil, nil)
	serverURL, target := asExampleCom(t, srv.URL)
	o := options(t, serverURL)
	// A plain ws:// is asked about as http.
	o.Proxy = schemeProxy(map[string]*url.URL{"http": proxy.url})
	r := start(t, o, newHandler())
	req := await(t, proxy.requests, "CONNECT")
	if req.Method != http.MethodConnect || req.Host != target || req.RequestURI != target {
		t.Errorf("proxy got %s %s (Host %s), want CONNECT %s", req.Method, req.RequestURI, req.Host, target)
	}
	if got := req.Header.Get("Proxy-Authorization"); got != "" {
		t.Errorf("Proxy-Authorization %q without credentials", got)
	}
	p := srv.accept(t)
	if got := p.req.Header.Get(protocol.TokenHeader); got != testToken {
		t.Errorf("token header through the tunnel = %q", got)
	}
	if m, _ := p.recv(); m.Type != protocol.WSStatus {
		t.Fatalf("got %q through the proxy, want status", m.Type)
	}
	await(t, r.up, "up callback")
}

func TestProxyWSSWithCredentials(t *testing.T) {
	srv := newServer(t, true)
	user := url.UserPassword("agent", "pr0xy-p@ss")
	proxy := newConnectProxy(t, user, func(p *connectProxy) {
		p.wantAuth = "Basic YWdlbnQ6cHIweHktcEBzcw==" // agent:pr0xy-p@ss
	})
	serverURL, target := asExampleCom(t, srv.URL)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	o := options(t, serverURL)
	o.TLSConfig = &tls.Config{RootCAs: roots}
	// wss is asked about as https.
	o.Proxy = schemeProxy(map[string]*url.URL{"https": proxy.url})
	start(t, o, newHandler())
	req := await(t, proxy.requests, "CONNECT")
	if req.Host != target {
		t.Errorf("CONNECT %s, want %s", req.Host, target)
	}
	p := srv.accept(t)
	if p.req.TLS == nil || p.req.TLS.ServerName != "example.com" {
		t.Errorf("server saw TLS %+v, want SNI example.com through the tunnel", p.req.TLS)
	}
	if m, _ := p.recv(); m.Type != protocol.WSStatus {
		t.Fatalf("got %q over wss through the proxy, want status", m.Type)
	}
}

// A proxy refusing the credentials (or wanting some) is a clear error that
// names neither the credentials nor the token.
func TestProxyAuthRequired(t *testing.T) {
	srv := newServer(t, false)
	serverURL, _ := asExampleCom(t, srv.URL)
	for _, user := range []*url.Userinfo{url.UserPassword("agent-user", "wr0ng-secret"), nil} {
		proxy := newConnectProxy(t, user, func(p *connectProxy) { p.wantAuth = "Basic c29tZXRoaW5nOmVsc2U=" })
		o := options(t, serverURL)
		o.Proxy = fixedProxy(proxy.url)
		r := start(t, o, newHandler())
		err := r.wait(t, waitLimit)
		if err == nil || !strings.Contains(err.Error(), "407") || !strings.Contains(err.Error(), "proxy") ||
			!strings.Contains(err.Error(), "http://"+proxy.url.Host) {
			t.Fatalf("Run = %v, want a 407 naming the proxy", err)
		}
		want := "wants credentials"
		if user != nil {
			want = "rejected the credentials"
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run = %v, want %q", err, want)
		}
		for _, secret := range []string{"wr0ng-secret", "agent-user", testToken} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error contains %q: %v", secret, err)
			}
		}
		select {
		case p := <-srv.peers:
			t.Fatalf("the server was reached despite the 407: %v", p.req.URL)
		default:
		}
	}
}

func TestProxyOtherRefusal(t *testing.T) {
	srv := newServer(t, false)
	serverURL, _ := asExampleCom(t, srv.URL)
	proxy := newConnectProxy(t, nil, func(p *connectProxy) { p.answer = "403 Forbidden" })
	o := options(t, serverURL)
	o.Proxy = fixedProxy(proxy.url)
	err := start(t, o, newHandler()).wait(t, waitLimit)
	if err == nil || !strings.Contains(err.Error(), `"403 Forbidden"`) {
		t.Fatalf("Run = %v, want the proxy's 403", err)
	}
}

// The dial timeout covers the CONNECT exchange.
func TestProxySilent(t *testing.T) {
	proxy := newConnectProxy(t, url.UserPassword("u", "silent-secret"), func(p *connectProxy) { p.silent = true })
	o := options(t, "http://example.com:8080")
	o.Proxy = fixedProxy(proxy.url)
	o.DialTimeout = 200 * time.Millisecond
	began := time.Now()
	err := start(t, o, newHandler()).wait(t, waitLimit)
	if err == nil || !strings.Contains(err.Error(), "CONNECT example.com:8080") || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("Run = %v, want a timeout", err)
	}
	if strings.Contains(err.Error(), "silent-secret") {
		t.Errorf("error contains the proxy password: %v", err)
	}
	if d := time.Since(began); d > waitLimit/2 {
		t.Errorf("took %s with a 200ms dial timeout", d)
	}
}

func TestProxyFor(t *testing.T) {
	// What the proxy function is asked: the http(s) equivalent.
	var asked []string
	o := Options{Proxy: func(u *url.URL) (*url.URL, error) { asked = append(asked, u.String()); return nil, nil }}
	for _, ws := range []string{"ws://cp.example.com/of/api/v1/agent/ws", "wss://cp.example.com:8443/api/v1/agent/ws"} {
		u, _ := url.Parse(ws)
		if p, err := proxyFor(o, u); p != nil || err != nil {
			t.Fatalf("%s: %v, %v", ws, p, err)
		}
	}
	if want := []string{"http://cp.example.com/of/api/v1/agent/ws", "https://cp.example.com:8443/api/v1/agent/ws"}; strings.Join(asked, " ") != strings.Join(want, " ") {
		t.Errorf("asked %v, want %v", asked, want)
	}

	u, _ := url.Parse("wss://cp.example.com/api/v1/agent/ws")
	for name, proxy := range map[string]func(*url.URL) (*url.URL, error){
		"invalid": func(*url.URL) (*url.URL, error) {
			return nil, errors.New(`invalid proxy address "http://user:secret@bad host"`)
		},
		"socks5":  fixedProxy(&url.URL{Scheme: "socks5", User: url.UserPassword("user", "secret"), Host: "proxy:1080"}),
		"no host": fixedProxy(&url.URL{Scheme: "http", User: url.UserPassword("user", "secret")}),
	} {
		_, err := proxyFor(Options{Proxy: proxy}, u)
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: err %v, want an error without the credentials", name, err)
		}
	}
	if o := (Options{}).withDefaults(); o.Proxy == nil {
		t.Fatal("no default proxy function")
	}
}

// proxyChildEnv marks the process TestProxyFromEnvironment starts.
const proxyChildEnv = "OPENFLARE_WSCLIENT_PROXY_CHILD"

// The default follows HTTP_PROXY, HTTPS_PROXY and NO_PROXY as the agent's
// HTTP client does. net/http reads them once per process, so the check runs
// in a fresh one: this test binary, running only the test below.
func TestProxyFromEnvironment(t *testing.T) {
	if os.Getenv(proxyChildEnv) != "" {
		t.Skip("in the child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestProxyFromEnvironmentChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), proxyChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestProxyFromEnvironmentChild") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestProxyFromEnvironmentChild(t *testing.T) {
	if os.Getenv(proxyChildEnv) == "" {
		t.Skip("run by TestProxyFromEnvironment in a fresh process")
	}
	srv := newServer(t, false)
	proxy := newConnectProxy(t, url.UserPassword("env-user", "env-secret"), func(p *connectProxy) {
		p.wantAuth = "Basic ZW52LXVzZXI6ZW52LXNlY3JldA==" // env-user:env-secret
	})
	// Before anything in this process asked net/http about the environment.
	for _, k := range []string{"http_proxy", "https_proxy", "no_proxy", "all_proxy", "REQUEST_METHOD"} {
		t.Setenv(k, "")
	}
	t.Setenv("HTTP_PROXY", proxy.url.String())
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	t.Setenv("NO_PROXY", "cp.internal,.corp.example")

	for ws, want := range map[string]string{
		"ws://cp.example.com/api/v1/agent/ws":          proxy.url.Host,
		"wss://cp.example.com:8443/api/v1/agent/ws":    "127.0.0.1:1",
		"wss://cp.internal/api/v1/agent/ws":            "", // NO_PROXY
		"ws://edge.corp.example:81/of/api/v1/agent/ws": "", // NO_PROXY domain
		"ws://127.0.0.1:8080/api/v1/agent/ws":          "", // loopback is never proxied
	} {
		u, _ := url.Parse(ws)
		got, err := proxyFor(Options{}.withDefaults(), u)
		if err != nil {
			t.Fatalf("%s: %v", ws, err)
		}
		if (got == nil) != (want == "") || got != nil && got.Host != want {
			t.Errorf("%s: proxy %v, want %q", ws, got, want)
		}
	}

	// End to end with the default: through HTTP_PROXY, with its credentials.
	serverURL, target := asExampleCom(t, srv.URL)
	o := options(t, serverURL)
	start(t, o, newHandler())
	if req := await(t, proxy.requests, "CONNECT"); req.Host != target {
		t.Errorf("CONNECT %s, want %s", req.Host, target)
	}
	if m, _ := srv.accept(t).recv(); m.Type != protocol.WSStatus {
		t.Fatalf("got %q through the proxy, want status", m.Type)
	}
}
