package wsclient

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/websocket"

	"openflare/agent/protocol"
)

// dial opens the socket (through the proxy Options.Proxy names, if any) and
// performs the upgrade handshake, all within o.DialTimeout. The dial is done
// here rather than by websocket.DialConfig so that the handshake's status
// line can be read (see statusRecorder).
func dial(ctx context.Context, o Options, wsURL, origin string) (*websocket.Conn, error) {
	cfg, err := websocket.NewConfig(wsURL, origin)
	if err != nil {
		return nil, fmt.Errorf("websocket config for %s: %w", wsURL, err)
	}
	cfg.Header.Set(protocol.TokenHeader, o.Token)
	cfg.Header.Set("User-Agent", "openflare/"+o.AgentVersion)

	dctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	raw, err := dialTransport(dctx, cfg.Location, o)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", wsURL, err)
	}
	rec := &statusRecorder{Conn: raw}
	// websocket.NewClient has no timeout of its own: when the dial budget or
	// the caller's ctx runs out, expiring the socket deadline unblocks it.
	stop := context.AfterFunc(dctx, func() { _ = raw.SetDeadline(time.Now()) })
	ws, err := websocket.NewClient(cfg, rec)
	if !stop() {
		// The deadline was set (or is being set): the socket is unusable
		// whatever NewClient returned.
		_ = raw.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("websocket handshake with %s: %w", wsURL, ctx.Err())
		}
		return nil, fmt.Errorf("websocket handshake with %s: no answer within %s: %w", wsURL, o.DialTimeout, dctx.Err())
	}
	if err != nil {
		_ = raw.Close()
		return nil, handshakeError(wsURL, rec, err)
	}
	ws.MaxPayloadBytes = o.MaxFrame
	return ws, nil
}

// dialTransport opens the TCP connection, directly or as a CONNECT tunnel
// through the proxy o.Proxy names, and for wss runs TLS over it.
func dialTransport(ctx context.Context, u *url.URL, o Options) (net.Conn, error) {
	addr := net.JoinHostPort(u.Hostname(), portOr(u, "80", "443", "wss"))
	proxyURL, err := proxyFor(o, u)
	if err != nil {
		return nil, err
	}
	nd := &net.Dialer{}
	var conn net.Conn
	if proxyURL == nil {
		conn, err = nd.DialContext(ctx, "tcp", addr)
	} else {
		o.Log.Debug("websocket dial through proxy", "proxy", proxyName(proxyURL))
		conn, err = dialProxy(ctx, nd, proxyURL, addr, o.TLSConfig)
	}
	if err != nil || u.Scheme != "wss" {
		return conn, err
	}
	tc := tls.Client(conn, tlsConfig(o.TLSConfig, u.Hostname()))
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return tc, nil
}

// tlsConfig is the client configuration for serverName: PROTOCOL 0 wants full
// verification and has no insecure mode, and the upgrade (or a CONNECT) is
// an HTTP/1.1 request, so no other protocol may be negotiated.
func tlsConfig(base *tls.Config, serverName string) *tls.Config {
	conf := new(tls.Config)
	if base != nil {
		conf = base.Clone()
	}
	conf.InsecureSkipVerify = false
	conf.NextProtos = nil
	if conf.ServerName == "" {
		conf.ServerName = serverName
	}
	return conf
}

// portOr returns u's port, or the default for its scheme: secure when the
// scheme is secureScheme.
func portOr(u *url.URL, plain, secure, secureScheme string) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == secureScheme {
		return secure
	}
	return plain
}

// proxyFromEnvironment is the default Options.Proxy: what the agent's HTTP
// client uses (HTTP_PROXY, HTTPS_PROXY, NO_PROXY, read once per process).
func proxyFromEnvironment(u *url.URL) (*url.URL, error) {
	return http.ProxyFromEnvironment(&http.Request{URL: u})
}

// proxyFor asks o.Proxy about the http(s) equivalent of the WebSocket URL
// u (ws → http, wss → https), so the proxy settings and NO_PROXY apply as
// they do to the agent's HTTP requests. Nil means a direct connection.
func proxyFor(o Options, u *url.URL) (*url.URL, error) {
	if o.Proxy == nil {
		return nil, nil
	}
	target := &url.URL{Scheme: "http", Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	if u.Scheme == "wss" {
		target.Scheme = "https"
	}
	p, err := o.Proxy(target)
	if err != nil {
		// The error text may quote the proxy setting, credentials and all.
		return nil, errors.New("the proxy setting (HTTPS_PROXY, HTTP_PROXY) is not a valid URL")
	}
	if p == nil {
		return nil, nil
	}
	switch p.Scheme {
	case "http", "https":
	default:
		return nil, fmt.Errorf("proxy scheme %q is not supported for the WebSocket (want http or https)", p.Scheme)
	}
	if p.Hostname() == "" {
		return nil, errors.New("the proxy setting has no host")
	}
	return p, nil
}

// proxyName is a proxy URL for messages: scheme and host, never user info.
func proxyName(p *url.URL) string { return p.Scheme + "://" + p.Host }

// dialProxy opens a tunnel to addr through the HTTP proxy p with CONNECT (a
// TLS connection to the proxy first when p is https). ctx bounds it all.
// Errors name the proxy by scheme and host only: its credentials never
// appear.
func dialProxy(ctx context.Context, nd *net.Dialer, p *url.URL, addr string, tlsConf *tls.Config) (net.Conn, error) {
	name := proxyName(p)
	password, _ := p.User.Password()
	fail := func(err error) error {
		return redact(fmt.Errorf("via proxy %s: %w", name, err), password)
	}
	conn, err := nd.DialContext(ctx, "tcp", net.JoinHostPort(p.Hostname(), portOr(p, "80", "443", "https")))
	if err != nil {
		return nil, fail(err)
	}
	if p.Scheme == "https" {
		conf := tlsConfig(tlsConf, p.Hostname())
		conf.ServerName = p.Hostname() // the proxy's name, not the server's
		tc := tls.Client(conn, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, fail(err)
		}
		conn = tc
	}
	// Writing the request and reading the answer have no timeout of their
	// own: expiring the deadline unblocks them when ctx ends.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	tunnel, err := connect(conn, p, addr)
	if !stop() {
		_ = conn.Close()
		return nil, fail(fmt.Errorf("CONNECT %s: %w", addr, context.Cause(ctx)))
	}
	if err != nil {
		_ = conn.Close()
		return nil, fail(err)
	}
	return tunnel, nil
}

// connect sends CONNECT addr on conn, with basic credentials when p has
// user info, and reads the proxy's answer.
func connect(conn net.Conn, p *url.URL, addr string) (net.Conn, error) {
	req := &http.Request{
		Method: http.MethodConnect,
		URL:    &url.URL{Opaque: addr},
		Host:   addr,
		Header: make(http.Header),
	}
	if p.User != nil {
		password, _ := p.User.Password()
		cred := base64.StdEncoding.EncodeToString([]byte(p.User.Username() + ":" + password))
		req.Header.Set("Proxy-Authorization", "Basic "+cred)
	}
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("CONNECT %s: %w", addr, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("CONNECT %s: reading the proxy's answer: %w", addr, err)
	}
	// Nothing of a refusal's body is needed; the connection is dropped.
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusProxyAuthRequired && p.User == nil:
		return nil, fmt.Errorf("CONNECT %s: the proxy wants credentials (%s): put user:password in the proxy URL", addr, resp.Status)
	case resp.StatusCode == http.StatusProxyAuthRequired:
		return nil, fmt.Errorf("CONNECT %s: the proxy rejected the credentials in the proxy URL (%s)", addr, resp.Status)
	case resp.StatusCode/100 != 2:
		return nil, fmt.Errorf("CONNECT %s: the proxy answered %q instead of 200", addr, resp.Status)
	}
	if br.Buffered() > 0 {
		// Bytes past the proxy's answer already belong to the tunnel.
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

// bufferedConn reads what the bufio.Reader holds before the connection.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// handshakeError turns websocket's bare "bad status" into something an
// operator can act on: a 401 means the node token was rejected.
func handshakeError(wsURL string, rec *statusRecorder, err error) error {
	if !errors.Is(err, websocket.ErrBadStatus) {
		return fmt.Errorf("websocket handshake with %s: %w", wsURL, err)
	}
	code, line := rec.status()
	if code == http.StatusUnauthorized {
		return fmt.Errorf("websocket handshake with %s: %w", wsURL, ErrTokenRejected)
	}
	return fmt.Errorf("websocket handshake with %s: server answered %q instead of 101 Switching Protocols: %w", wsURL, line, err)
}

// maxStatusLine bounds what statusRecorder keeps of a misbehaving server.
const maxStatusLine = 200

// statusRecorder keeps the first line the server sends. x/net/websocket
// reports every non-101 answer as ErrBadStatus and discards the response, yet
// a rejected token (401) must be told apart from other failures.
type statusRecorder struct {
	net.Conn
	line []byte
	done bool
}

func (r *statusRecorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	if !r.done {
		r.line = append(r.line, p[:n]...)
		if i := bytes.IndexByte(r.line, '\n'); i >= 0 {
			r.line, r.done = r.line[:i], true
		} else if len(r.line) >= maxStatusLine {
			r.line, r.done = r.line[:maxStatusLine], true
		}
	}
	return n, err
}

// status parses the recorded "HTTP/1.1 401 Unauthorized" line; code is 0 when
// it is not a status line.
func (r *statusRecorder) status() (code int, line string) {
	line = strings.TrimSpace(string(r.line))
	f := strings.Fields(line)
	if len(f) >= 2 && strings.HasPrefix(f[0], "HTTP/") {
		code, _ = strconv.Atoi(f[1])
	}
	return code, line
}
