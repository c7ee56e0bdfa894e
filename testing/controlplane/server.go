// Package controlplane is a test control plane: an HTTP server that speaks the
// OpenFlare agent protocol (shared/PROTOCOL.md) the way the real, unmodified
// OpenFlare Server does, with in-memory state, a Go API for tests, an admin
// HTTP API for the of-controlplane CLI, and fault injection.
//
// A test starts one with New and Start, points an agent at URL with
// DiscoveryToken or a token from AddNode, publishes versions built with
// Source, and waits for the agent's reports with WaitHeartbeat and
// WaitApplyLog. Publish renders with agent/render to compute checksums, as
// the real server does at publish time.
package controlplane

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"openflare/agent/protocol"
)

// Error texts of the real server (PROTOCOL 0, 1.2, 2.3, 4, 8.3).
const (
	msgBadAgentToken    = "无权进行此操作，Agent Token 无效"
	msgBadRegisterToken = "无权进行此操作，注册 Token 无效"
	msgBind             = "参数错误"
	msgInternal         = "内部系统错误"
	msgVersionRequired  = "version 不能为空"
	msgBadResult        = "result 仅支持 success、warning 或 failed"
	msgNoActiveVersion  = "当前没有激活版本"
	msgIPRequired       = "ip 不能为空"
	msgIPInvalid        = "ip 格式无效"
	notFoundBody        = "404 page not found"
)

// Default WebSocket timers of the real server (PROTOCOL 3.4).
const (
	DefaultWSPingInterval = 30 * time.Second
	DefaultWSReadDeadline = 90 * time.Second
	wsWriteDeadline       = 10 * time.Second
	wsQueueSize           = 16
)

// Server is an in-memory OpenFlare control plane. Create it with New, set the
// exported fields, then Start it. All methods are safe for concurrent use.
type Server struct {
	// WSPingInterval is how often the server sends a JSON ping on each
	// WebSocket (30 s; 0 also means 30 s). Set it before Start.
	WSPingInterval time.Duration
	// WSReadDeadline closes a WebSocket that sent no data message for this
	// long (90 s; 0 also means 90 s). Set it before Start.
	WSReadDeadline time.Duration
	// Logger receives one line per request and WebSocket events; nil
	// discards them. Tokens are never logged. Set it before Start.
	Logger *slog.Logger

	mu     sync.Mutex
	notify chan struct{} // closed and replaced on every state change

	discoveryToken string
	adminToken     string
	oldServer      bool

	nodes      []*node
	byToken    map[string]*node
	byNodeID   map[string]*node
	nextNodeID uint64
	beats      []Beat
	global     protocol.AgentSettings

	versions   []*version
	byVersion  map[string]*version
	active     *version
	dayCounter map[string]int

	logs      []protocol.ApplyLogRecord
	nextLogID int64

	groups            map[uint64]*ipGroup
	checksumOverrides map[uint64]string

	pages map[uint64]*pagesProject

	faults   []*Fault
	requests map[string]int
	ws       map[string]*wsConn

	addr     string
	live     *listener
	closed   bool
	inflight sync.WaitGroup
}

// listener is one period of listening: SetDown ends it, SetDown(false)
// starts another on the same address.
type listener struct {
	srv  *http.Server
	done chan struct{} // closed when this period ends; aborts Delay faults
}

// New returns a server with fresh state: a random discovery token and admin
// token, no nodes, no versions, the server's default agent settings.
func New() *Server {
	return &Server{
		WSPingInterval: DefaultWSPingInterval,
		WSReadDeadline: DefaultWSReadDeadline,
		notify:         make(chan struct{}),
		discoveryToken: randomHex(16),
		adminToken:     randomHex(16),
		byToken:        map[string]*node{},
		byNodeID:       map[string]*node{},
		global: protocol.AgentSettings{
			HeartbeatInterval:       3000,
			WebsocketUpgradeEnabled: true,
			UpdateRepo:              "Rain-kl/OpenFlare",
			UpdateChannel:           "stable",
		},
		byVersion:         map[string]*version{},
		dayCounter:        map[string]int{},
		groups:            map[uint64]*ipGroup{},
		checksumOverrides: map[uint64]string{},
		requests:          map[string]int{},
		ws:                map[string]*wsConn{},
	}
}

// Start listens on 127.0.0.1 on a free port and serves in the background.
func (s *Server) Start() error { return s.StartAt("127.0.0.1:0") }

// StartAt listens on addr and serves in the background.
func (s *Server) StartAt(addr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("controlplane: start: server closed")
	}
	if s.live != nil {
		return errors.New("controlplane: start: already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("controlplane: listen on %s: %w", addr, err)
	}
	s.addr = ln.Addr().String()
	s.serveLocked(ln)
	return nil
}

func (s *Server) serveLocked(ln net.Listener) {
	l := &listener{done: make(chan struct{})}
	l.srv = &http.Server{
		Handler:           s.handler(l.done),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log().Handler(), slog.LevelDebug),
	}
	s.live = l
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		if err := l.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log().Error("serve", "err", err)
		}
	}()
}

// URL is the base URL agents use: "http://127.0.0.1:<port>".
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "http://" + s.addr
}

// SetDown(true) stops listening and drops every connection (WebSockets
// included) while keeping all state; SetDown(false) listens again on the
// same address, so agents see the server go away and come back.
func (s *Server) SetDown(down bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("controlplane: set down: server closed")
	}
	if !down {
		defer s.mu.Unlock()
		if s.live != nil {
			return nil
		}
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			return fmt.Errorf("controlplane: listen again on %s: %w", s.addr, err)
		}
		s.serveLocked(ln)
		return nil
	}
	l, conns := s.stopLocked()
	s.mu.Unlock()
	stop(l, conns)
	return nil
}

// Close stops listening, closes every connection (WebSockets included) and
// waits for all handlers to return.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	l, conns := s.stopLocked()
	s.mu.Unlock()
	stop(l, conns)
	s.inflight.Wait()
}

func (s *Server) stopLocked() (*listener, []*wsConn) {
	l := s.live
	s.live = nil
	conns := make([]*wsConn, 0, len(s.ws))
	for _, c := range s.ws {
		conns = append(conns, c)
	}
	return l, conns
}

func stop(l *listener, conns []*wsConn) {
	if l != nil {
		// Close reports only the listener's close error, which cannot
		// matter here: the listener is gone either way.
		_ = l.srv.Close()
		close(l.done)
	}
	for _, c := range conns {
		c.close()
	}
}

// DiscoveryToken is the global auto-registration token.
func (s *Server) DiscoveryToken() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.discoveryToken
}

// SetDiscoveryToken replaces the discovery token ("" disables discovery).
func (s *Server) SetDiscoveryToken(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.discoveryToken = strings.TrimSpace(tok)
}

// AdminToken is the X-Admin-Token value the admin API requires.
func (s *Server) AdminToken() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.adminToken
}

// SetAdminToken replaces the admin token.
func (s *Server) SetAdminToken(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.adminToken = tok
}

// SetOldServer makes register reply with agent_token instead of access_token,
// like older servers.
func (s *Server) SetOldServer(old bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.oldServer = old
}

// Requests is how many requests hit path (e.g. protocol.PathActive) so far,
// faulted ones included.
func (s *Server) Requests(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[path]
}

func (s *Server) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// notifyLocked wakes every waiter.
func (s *Server) notifyLocked() {
	close(s.notify)
	s.notify = make(chan struct{})
}

// waitFor blocks until check (called with s.mu held) returns true, re-checking
// on every state change, or until ctx ends.
func (s *Server) waitFor(ctx context.Context, check func() bool) error {
	for {
		s.mu.Lock()
		ok := check()
		ch := s.notify
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitScan returns the first element, already in the list or appended
// later, for which match returns true; or ctx's error. list is called with
// s.mu held and must return a slice whose elements are never modified;
// match runs without the lock, so it may call the Server.
func waitScan[T any](ctx context.Context, s *Server, list func() []T, match func(T) bool) (T, error) {
	next := 0
	for {
		s.mu.Lock()
		all := list()
		ch := s.notify
		s.mu.Unlock()
		for ; next < len(all); next++ {
			if match(all[next]) {
				return all[next], nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
}

// route is one agent endpoint.
type route struct {
	method  string
	handler http.HandlerFunc
}

// handler serves one listening period: request log, counting, faults, then
// the gin-like router (exact method and path, else a plain-text 404).
func (s *Server) handler(done <-chan struct{}) http.Handler {
	routes := map[string]route{
		protocol.PathRegister:    {http.MethodPost, s.handleRegister},
		protocol.PathHeartbeat:   {http.MethodPost, s.handleHeartbeat},
		protocol.PathWebSocket:   {http.MethodGet, s.handleWS},
		protocol.PathActive:      {http.MethodGet, s.handleActive},
		protocol.PathApplyLogs:   {http.MethodPost, s.handleApplyLog},
		protocol.PathIPGroupSync: {http.MethodPost, s.handleIPGroupSync},
	}
	admin := s.adminRoutes()
	mux := func(w http.ResponseWriter, r *http.Request) {
		if rt, ok := routes[r.URL.Path]; ok && rt.method == r.Method {
			rt.handler(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, protocol.PathPagesPrefix) && r.Method == http.MethodGet {
			s.handlePages(w, r)
			return
		}
		if rt, ok := admin[r.URL.Path]; ok && rt.method == r.Method {
			s.requireAdmin(rt.handler)(w, r)
			return
		}
		// gin's RedirectTrailingSlash: 301 for GET, 307 otherwise.
		if trimmed := strings.TrimSuffix(r.URL.Path, "/"); trimmed != r.URL.Path {
			if rt, ok := routes[trimmed]; ok && rt.method == r.Method {
				code := http.StatusTemporaryRedirect
				if r.Method == http.MethodGet {
					code = http.StatusMovedPermanently
				}
				http.Redirect(w, r, trimmed, code)
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, notFoundBody)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.enter() {
			return
		}
		defer s.inflight.Done()
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		defer func() {
			s.log().Info("request", "method", r.Method, "path", r.URL.Path, "status", rec.status,
				"bytes", rec.bytes, "hijacked", rec.hijacked, "remote", r.RemoteAddr, "duration", time.Since(start))
		}()
		s.mu.Lock()
		s.requests[r.URL.Path]++
		s.notifyLocked()
		f := s.takeFaultLocked(r.URL.Path)
		s.mu.Unlock()
		if f != nil && s.applyFault(rec, r, f, done, mux) {
			return
		}
		mux(rec, r)
	})
}

// enter registers an in-flight handler unless the server is closed.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.inflight.Add(1)
	return true
}

// statusRecorder remembers the status for the request log and passes
// Hijack through (WebSockets and faults need it).
type statusRecorder struct {
	http.ResponseWriter
	status   int
	bytes    int64
	hijacked bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err == nil {
		r.hijacked = true
	}
	return conn, brw, err
}

// envelope is the reply wrapper (PROTOCOL 0), written the way gin's c.JSON
// writes it: compact, HTML-escaped, no trailing newline.
type envelope struct {
	ErrorMsg string `json:"error_msg"`
	Data     any    `json:"data"`
}

func writeJSON(w http.ResponseWriter, status int, errMsg string, data any) {
	body, err := json.Marshal(envelope{ErrorMsg: errMsg, Data: data})
	if err != nil {
		status = http.StatusInternalServerError
		body, _ = json.Marshal(envelope{ErrorMsg: msgInternal})
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(body)
}

func writeOK(w http.ResponseWriter, data any) { writeJSON(w, http.StatusOK, "", data) }

func writeError(w http.ResponseWriter, status int, msg string) { writeJSON(w, status, msg, nil) }

// apiError is a business error with its HTTP status.
type apiError struct {
	status int
	msg    string
}

func badRequest(msg string) *apiError { return &apiError{http.StatusBadRequest, msg} }

// bindJSON decodes the body like gin's ShouldBindJSON (first JSON value,
// unknown fields ignored); on failure it answers 400 参数错误.
func bindJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, msgBind)
		return false
	}
	return true
}

// nodeIDForToken returns the node a request's X-Agent-Token selects, or
// answers 401 and returns "".
func (s *Server) nodeIDForToken(w http.ResponseWriter, r *http.Request) string {
	tok := strings.TrimSpace(r.Header.Get(protocol.TokenHeader))
	s.mu.Lock()
	n := s.byToken[tok]
	s.mu.Unlock()
	if tok == "" || n == nil {
		writeError(w, http.StatusUnauthorized, msgBadAgentToken)
		return ""
	}
	return n.NodeID
}

func randomHex(nbytes int) string {
	b := make([]byte, nbytes)
	rand.Read(b)
	return hex.EncodeToString(b)
}
