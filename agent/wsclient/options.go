package wsclient

import (
	"crypto/tls"
	"log/slog"
	"net/url"
	"sync/atomic"
	"time"
)

// Defaults applied by Run to zero Options fields.
const (
	DefaultDialTimeout  = 10 * time.Second // request_timeout default (PROTOCOL 1.1)
	DefaultWriteTimeout = 5 * time.Second  // upstream agent write deadline (PROTOCOL 3.4)
	DefaultInterval     = 3 * time.Second  // server heartbeat_interval default (PROTOCOL 2.2)
	DefaultMaxFrame     = 1 << 20          // what a frame may cost in memory
	DefaultMaxMessage   = 32 << 20         // a waf_ip_groups push can carry ~20 MiB
	minReadDeadline     = 75 * time.Second // upstream: max(6 × request_timeout, 75 s)
)

// Options configures one connection.
type Options struct {
	ServerURL    string
	Token        string
	AgentVersion string // sent as User-Agent "openflare/<v>"

	// DialTimeout bounds the TCP/TLS dial, through the proxy if there is
	// one, plus the upgrade handshake (request_timeout). Zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// ReadDeadline: no inbound frame for this long means the connection is
	// half-open. Zero means max(6 × DialTimeout, 75 s), as upstream.
	ReadDeadline time.Duration
	// WriteTimeout bounds each frame write. Zero means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Interval is the status period, asked again before every tick because the
	// server's heartbeat_interval can change at run time. Nil or a
	// non-positive result means DefaultInterval.
	Interval func() time.Duration
	// StatusNow, when it delivers, sends a status before the interval is up
	// (e.g. right after IP groups landed, so the server learns the new
	// checksums at once). Nil means only the interval.
	StatusNow <-chan struct{}
	// MaxFrame caps an inbound frame read whole into memory, and any
	// single JSON value of a larger one. A larger waf_ip_groups push is
	// decoded as it is read (Handler.IPGroups), a larger frame of any other
	// type skipped; neither ends the session. Zero means DefaultMaxFrame.
	MaxFrame int
	// MaxMessage caps a waf_ip_groups push read as a stream: the server's
	// snapshot limit is 20 MiB. A larger one ends the session. Zero means
	// DefaultMaxMessage.
	MaxMessage int
	// Log receives connection events; nil discards them.
	Log *slog.Logger
	// TLSConfig is used for wss (and an https proxy); nil means system
	// roots. Certificate verification is always on (PROTOCOL 0 has no
	// insecure mode).
	TLSConfig *tls.Config
	// Proxy returns the proxy for a request to the given URL, as
	// http.Transport.Proxy does; it is asked about the http(s) equivalent
	// of the WebSocket URL (ws → http, wss → https), and a nil URL means a
	// direct connection. The WebSocket then goes through an HTTP CONNECT
	// tunnel (http or https proxy URL; user info becomes basic
	// Proxy-Authorization). Nil means http.ProxyFromEnvironment (HTTP_PROXY,
	// HTTPS_PROXY, NO_PROXY), as for the agent's HTTP requests.
	Proxy func(*url.URL) (*url.URL, error)
	// Stats counts ignored inbound frames; nil means they are not counted.
	Stats *Stats
}

// Stats counts inbound frames that were ignored. Share one across Run calls
// to get totals; the fields are safe for concurrent use.
type Stats struct {
	Unknown     atomic.Uint64 // valid message with a type this agent does not know
	Undecodable atomic.Uint64 // not JSON, or a payload that does not fit its type
}

func (o Options) withDefaults() Options {
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.ReadDeadline <= 0 {
		o.ReadDeadline = max(6*o.DialTimeout, minReadDeadline)
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	if o.MaxMessage <= 0 {
		o.MaxMessage = DefaultMaxMessage
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Stats == nil {
		o.Stats = new(Stats)
	}
	if o.Proxy == nil {
		o.Proxy = proxyFromEnvironment
	}
	return o
}

// interval returns the current status period.
func (o Options) interval() time.Duration {
	if o.Interval == nil {
		return DefaultInterval
	}
	if d := o.Interval(); d > 0 {
		return d
	}
	return DefaultInterval
}
