package wsclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/websocket"

	"github.com/openflare/openflare-agent/agent/protocol"
)

// dial opens the socket and performs the upgrade handshake, both within
// o.DialTimeout. The dial is done here rather than by websocket.DialConfig so
// that the handshake's status line can be read (see statusRecorder).
func dial(ctx context.Context, o Options, wsURL, origin string) (*websocket.Conn, error) {
	cfg, err := websocket.NewConfig(wsURL, origin)
	if err != nil {
		return nil, fmt.Errorf("websocket config for %s: %w", wsURL, err)
	}
	cfg.Header.Set(protocol.TokenHeader, o.Token)
	cfg.Header.Set("User-Agent", "openflare-agent/"+o.AgentVersion)

	dctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	raw, err := dialTransport(dctx, cfg.Location, o.TLSConfig)
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

// dialTransport opens the TCP (ws) or TLS (wss) connection.
func dialTransport(ctx context.Context, u *url.URL, tlsConf *tls.Config) (net.Conn, error) {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "wss" {
			port = "443"
		}
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	nd := &net.Dialer{}
	if u.Scheme != "wss" {
		return nd.DialContext(ctx, "tcp", addr)
	}
	conf := new(tls.Config)
	if tlsConf != nil {
		conf = tlsConf.Clone()
	}
	// PROTOCOL 0: full verification, no insecure mode. The upgrade is an
	// HTTP/1.1 request, so no other protocol may be negotiated.
	conf.InsecureSkipVerify = false
	conf.NextProtos = nil
	td := &tls.Dialer{NetDialer: nd, Config: conf}
	return td.DialContext(ctx, "tcp", addr)
}

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
