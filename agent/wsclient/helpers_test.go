package wsclient

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"openflare/agent/protocol"
	"openflare/testing/testsupport"
)

const (
	testToken = "tok-5ecret-0123456789abcdef"
	waitLimit = 5 * time.Second // upper bound for conditions that are awaited
)

// peer is the server side of one accepted connection.
type peer struct {
	t    *testing.T
	ws   *websocket.Conn
	req  *http.Request
	done chan struct{} // closing it returns the handler, which closes the socket
	once sync.Once
}

// hangUp makes the server close the connection.
func (p *peer) hangUp() { p.once.Do(func() { close(p.done) }) }

// recv reads one frame and decodes it, failing the test on error.
func (p *peer) recv() (protocol.WSMessage, string) {
	p.t.Helper()
	_ = p.ws.SetReadDeadline(time.Now().Add(waitLimit))
	var raw string
	if err := websocket.Message.Receive(p.ws, &raw); err != nil {
		p.t.Fatalf("server receive: %v", err)
	}
	var m protocol.WSMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		p.t.Fatalf("server got non-JSON frame %q: %v", raw, err)
	}
	return m, raw
}

// recvType skips frames (periodic statuses) until one of type typ arrives.
func (p *peer) recvType(typ string) (protocol.WSMessage, string) {
	p.t.Helper()
	for {
		m, raw := p.recv()
		if m.Type == typ {
			return m, raw
		}
	}
}

func (p *peer) sendRaw(frame string) {
	p.t.Helper()
	if err := websocket.Message.Send(p.ws, frame); err != nil {
		p.t.Fatalf("server send: %v", err)
	}
}

func (p *peer) send(typ string, payload any) {
	p.t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		p.t.Fatal(err)
	}
	frame, err := json.Marshal(protocol.WSMessage{Type: typ, Payload: b})
	if err != nil {
		p.t.Fatal(err)
	}
	p.sendRaw(string(frame))
}

// server is a control plane stand-in: 401 for a wrong token, otherwise a
// WebSocket whose server side the test drives through a peer.
type server struct {
	*httptest.Server
	peers chan *peer
}

func newServer(t *testing.T, useTLS bool) *server {
	t.Helper()
	s := &server{peers: make(chan *peer, 4)}
	var mu sync.Mutex
	var all []*peer
	ws := websocket.Server{
		// Accept any Origin, as the real server does.
		Handshake: func(*websocket.Config, *http.Request) error { return nil },
		Handler: func(c *websocket.Conn) {
			p := &peer{t: t, ws: c, req: c.Request(), done: make(chan struct{})}
			mu.Lock()
			all = append(all, p)
			mu.Unlock()
			s.peers <- p
			<-p.done
		},
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != protocol.PathWebSocket && r.URL.Path != "/of"+protocol.PathWebSocket {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get(protocol.TokenHeader) != testToken {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error_msg":"无权进行此操作，Agent Token 无效","data":null}`)
			return
		}
		ws.ServeHTTP(w, r)
	})
	s.Server = httptest.NewUnstartedServer(h)
	s.Listener = smallBufferListener{s.Listener}
	if useTLS {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(func() {
		mu.Lock()
		for _, p := range all {
			p.hangUp()
		}
		mu.Unlock()
		s.Close()
	})
	return s
}

// smallBufferListener shrinks the receive buffer of accepted connections so
// that a server which stops reading backs the client's writes up after a few
// hundred kilobytes instead of tens of megabytes.
type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(16 << 10)
	}
	return c, err
}

// accept waits for the next connection.
func (s *server) accept(t *testing.T) *peer {
	t.Helper()
	select {
	case p := <-s.peers:
		return p
	case <-time.After(waitLimit):
		t.Fatal("no connection reached the server")
		return nil
	}
}

// handler records every callback; the channels are buffered so the client's
// reader never blocks on the test.
type handler struct {
	status   func(ctx context.Context) (*protocol.NodePayload, func())
	settings chan protocol.AgentSettings
	active   chan protocol.ConfigRef
	force    chan protocol.ConfigRef
	groups   chan []protocol.WAFIPGroup
}

func newHandler() *handler {
	return &handler{
		status: func(context.Context) (*protocol.NodePayload, func()) {
			return &protocol.NodePayload{Version: "v-test"}, nil
		},
		settings: make(chan protocol.AgentSettings, 16),
		active:   make(chan protocol.ConfigRef, 16),
		force:    make(chan protocol.ConfigRef, 16),
		groups:   make(chan []protocol.WAFIPGroup, 16),
	}
}

func (h *handler) Status(ctx context.Context) (*protocol.NodePayload, func()) { return h.status(ctx) }
func (h *handler) Settings(s protocol.AgentSettings)                          { h.settings <- s }
func (h *handler) ActiveConfig(r protocol.ConfigRef)                          { h.active <- r }
func (h *handler) ForceSync(r protocol.ConfigRef)                             { h.force <- r }

// IPGroups decodes the payload whole: the tests' pushes are small, and the
// streamed ones are read by a handler of their own.
func (h *handler) IPGroups(dec *json.Decoder) error {
	var g []protocol.WAFIPGroup
	if err := dec.Decode(&g); err != nil {
		return err
	}
	h.groups <- g
	return nil
}

// await returns the next value of c or fails the test.
func await[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// options returns test options for srv (long interval: tests that need
// periodic statuses shorten it). After the test the log must not contain the
// token.
func options(t *testing.T, serverURL string) Options {
	t.Helper()
	logs := &testsupport.Buffer{}
	t.Cleanup(func() {
		if strings.Contains(logs.String(), testToken) {
			t.Errorf("token appears in the log:\n%s", logs.String())
		}
	})
	return Options{
		ServerURL:    serverURL,
		Token:        testToken,
		AgentVersion: "1.2.3",
		DialTimeout:  waitLimit,
		Interval:     func() time.Duration { return time.Hour },
		Log:          slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Stats:        new(Stats),
	}
}

// running is one Run call in the background.
type running struct {
	cancel context.CancelFunc
	up     chan struct{}
	done   chan struct{}
	err    error
}

// start runs Run and, at cleanup, cancels it and checks nothing leaked.
func start(t *testing.T, o Options, h Handler) *running {
	t.Helper()
	checkNoLeaks(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, up: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = Run(ctx, o, h, func() { close(r.up) })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(waitLimit):
			t.Error("Run did not return after cancel")
		}
	})
	return r
}

// wait returns Run's result, failing the test if it takes longer than limit.
func (r *running) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(limit):
		t.Fatalf("Run still running after %s", limit)
		return nil
	}
}

// stillRunning fails the test if Run has returned.
func (r *running) stillRunning(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
		t.Fatalf("Run returned early: %v", r.err)
	default:
	}
}

// checkNoLeaks registers a cleanup (run after every later cleanup) that fails
// the test if a goroutine of this package's non-test code is still alive.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		deadline := time.Now().Add(waitLimit)
		for {
			leaked := packageGoroutines()
			if len(leaked) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("leaked goroutines:\n%s", strings.Join(leaked, "\n\n"))
				return
			}
			runtime.Gosched()
			time.Sleep(time.Millisecond)
		}
	})
}

// packageGoroutines lists the stacks running code of this package other than
// tests and their helpers.
func packageGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, fn := range []string{"wsclient.Run(", "wsclient.run(", "wsclient.dial(", "wsclient.(*session)"} {
			if strings.Contains(g, fn) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}
