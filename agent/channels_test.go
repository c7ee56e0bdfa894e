package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/websocket"

	"openflare/agent/config"
	"openflare/agent/protocol"
	"openflare/agent/wsclient"
)

// The timing tests run the real loops in a synctest bubble: its clock is
// fake and jumps ahead whenever every goroutine of the bubble waits on it,
// so a 90 s outage takes milliseconds. The fake server is the only real
// thing: it lives outside the bubble, on loopback, and closes every
// connection after its reply (an idle kept-alive connection is a read in
// progress, during which the bubble's clock stands still).

// fakeServer is the agent API of a control plane, as much of it as the
// session and the apply queue use, with two doors: HTTP on loopback, for
// the agent's own client, and the session's server interface in memory,
// where every call happens on the bubble's clock.
type fakeServer struct {
	*httptest.Server
	down      atomic.Bool  // heartbeats get their connection closed, no reply
	websocket atomic.Bool  // replies set websocket_upgrade_enabled
	interval  atomic.Int64 // replies' heartbeat_interval in ms; zero means 3000
	attempts  atomic.Int64 // heartbeats received, answered or not
	beats     atomic.Int64 // heartbeats answered
	lines     atomic.Int64 // access-log lines the answered ones carried
	sessions  atomic.Int64 // WebSockets accepted, each closed at once
	// beatsAtSession is beats when the last WebSocket was accepted.
	beatsAtSession atomic.Int64
	fetches        atomic.Int64 // E4 requests

	mu sync.Mutex
	// active is the version the replies name.
	active *protocol.ConfigRef
	// registerReplies answer E1 calls in turn, the last one every call
	// after it; none means goodRegistration.
	registerReplies []registration
	// registered, beatAt, dials and drops are when each E1 call, each
	// heartbeat, each WebSocket and its end came, in memory only.
	registered, beatAt, dials, drops []time.Time
	// token is what SetToken set, beatToken the token the last HTTP
	// heartbeat carried.
	token, beatToken string
	// socket serves the in-memory WebSocket's connection n (from 0) until
	// it ends; nil closes each at once.
	socket func(ctx context.Context, n int, h wsclient.Handler) error
}

// registration is one answer to E1.
type registration struct {
	reply protocol.RegisterReply
	err   error
}

var goodRegistration = registration{reply: protocol.RegisterReply{NodeID: "42", AccessToken: "fedcba9876543210fedcba9876543210"}}

func newFakeServer(t *testing.T) *fakeServer {
	s := &fakeServer{}
	mux := http.NewServeMux()
	mux.HandleFunc(protocol.PathHeartbeat, func(w http.ResponseWriter, r *http.Request) {
		var p protocol.NodePayload
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.beatToken = r.Header.Get(protocol.TokenHeader)
		s.mu.Unlock()
		reply, err := s.heartbeat(&p)
		if err != nil {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		writeData(w, reply)
	})
	mux.HandleFunc(protocol.PathRegister, func(w http.ResponseWriter, r *http.Request) {
		reply, err := s.Register(r.Context(), nil)
		if err != nil {
			http.Error(w, `{"error_msg":"refused for the test","data":null}`, http.StatusInternalServerError)
			return
		}
		writeData(w, reply)
	})
	mux.Handle(protocol.PathWebSocket, websocket.Handler(func(*websocket.Conn) {
		s.beatsAtSession.Store(s.beats.Load())
		s.sessions.Add(1)
	}))
	mux.HandleFunc(protocol.PathActive, func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		http.Error(w, `{"error_msg":"down for the test","data":null}`, http.StatusInternalServerError)
	})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// No connection is kept: see the note above.
		w.Header().Set("Connection", "close")
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// writeData answers with data in the server's envelope.
func writeData(w http.ResponseWriter, data any) {
	b, _ := json.Marshal(data)
	fmt.Fprintf(w, `{"error_msg":"","data":%s}`, b)
}

var errFakeDown = errors.New("connection closed by the fake server")

// heartbeat answers one beat, at either door.
func (s *fakeServer) heartbeat(p *protocol.NodePayload) (protocol.HeartbeatReply, error) {
	s.attempts.Add(1)
	s.mu.Lock()
	s.beatAt = append(s.beatAt, time.Now())
	active := s.active
	s.mu.Unlock()
	if s.down.Load() {
		return protocol.HeartbeatReply{}, errFakeDown
	}
	s.lines.Add(int64(len(p.AccessLogs)))
	s.beats.Add(1)
	iv := s.interval.Load()
	if iv == 0 {
		iv = 3000
	}
	return protocol.HeartbeatReply{
		AgentSettings: protocol.AgentSettings{HeartbeatInterval: int(iv), WebsocketUpgradeEnabled: s.websocket.Load()},
		ActiveConfig:  active,
	}, nil
}

func (s *fakeServer) Heartbeat(_ context.Context, p *protocol.NodePayload, _ func(*json.Decoder) error) (protocol.HeartbeatReply, error) {
	return s.heartbeat(p)
}

func (s *fakeServer) Register(context.Context, *protocol.NodePayload) (protocol.RegisterReply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.registered = append(s.registered, time.Now())
	r := goodRegistration
	if n := len(s.registerReplies); n > 0 {
		r = s.registerReplies[0]
		if n > 1 {
			s.registerReplies = s.registerReplies[1:]
		}
	}
	return r.reply, r.err
}

func (s *fakeServer) SetToken(tok string) {
	s.mu.Lock()
	s.token = tok
	s.mu.Unlock()
}

// usedToken is the token SetToken set.
func (s *fakeServer) usedToken() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token
}

// webSocket is the in-memory door's E3.
func (s *fakeServer) webSocket(ctx context.Context, h wsclient.Handler, up func()) error {
	s.mu.Lock()
	n := len(s.dials)
	s.dials = append(s.dials, time.Now())
	serve := s.socket
	s.mu.Unlock()
	s.beatsAtSession.Store(s.beats.Load())
	s.sessions.Add(1)
	up()
	err := errFakeDown
	if serve != nil {
		err = serve(ctx, n, h)
	}
	s.mu.Lock()
	s.drops = append(s.drops, time.Now())
	s.mu.Unlock()
	return err
}

// session is a's session with the in-memory door.
func (s *fakeServer) session(a *Agent) *session {
	return &session{a: a, srv: s, webSocket: s.webSocket, startup: true}
}

// times returns a copy of one of the recorded lists.
func (s *fakeServer) times(list *[]time.Time) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(*list)
}

// bubbleAgent is an agent of srv without nginx (the binary is missing), to
// be made inside the bubble: its channels belong to the bubble then.
// keyValues override agent.json's keys.
func bubbleAgent(t *testing.T, srv *fakeServer, keyValues ...any) *Agent {
	t.Helper()
	dir := t.TempDir()
	keys := map[string]any{
		"server_url": srv.URL, "agent_token": "0123456789abcdef0123456789abcdef",
		"node_ip": "198.51.100.10", "data_dir": filepath.Join(dir, "data"),
		"openresty_path":    filepath.Join(dir, "no-nginx"),
		"mmdb_download_url": "off", "city_mmdb_download_url": "off", "update_repo": "off",
	}
	for i := 0; i+1 < len(keyValues); i += 2 {
		keys[keyValues[i].(string)] = keyValues[i+1]
	}
	a, _ := agentFrom(t, dir, keys)
	return a
}

// agentFrom writes keys as dir/agent.json and makes the agent it
// configures, as main does.
func agentFrom(t *testing.T, dir string, keys map[string]any) (*Agent, *config.Config) {
	t.Helper()
	conf, _ := json.Marshal(keys)
	path := filepath.Join(dir, "agent.json")
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Load(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(t.Context(), Options{Config: cfg, Version: "test", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cp.CloseIdle(); a.obs.Close() })
	return a, cfg
}

// run starts loop on its own goroutine and returns the function that stops
// it and waits for it.
func run(loop func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		loop(ctx)
		close(done)
	}()
	return func() {
		cancel()
		<-done
	}
}

// tick is how finely the tests watch the server's counters.
const tick = 10 * time.Millisecond

// waitCount steps the clock until counter passes n, for at most limit,
// and returns how long that took: zero when it already had.
func waitCount(t *testing.T, counter *atomic.Int64, n int64, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for counter.Load() <= n {
		if time.Since(start) > limit {
			t.Fatalf("counter stayed at %d for %v", n, limit)
		}
		time.Sleep(tick)
	}
	return time.Since(start)
}

// Over a 90 s outage one node tries every 2 to 4 s, never faster, about 30
// times (what a node beating every 3 s sends anyway), and the server hears
// from it within 4 s of its return.
func TestHeartbeatRetryPaceAndReturn(t *testing.T) {
	srv := newFakeServer(t)
	synctest.Test(t, func(t *testing.T) {
		a := bubbleAgent(t, srv)
		stop := run(a.newSession().run)
		defer stop()
		waitCount(t, &srv.beats, 0, time.Minute)

		srv.down.Store(true)
		outage := time.Now()
		var gaps []time.Duration
		for time.Since(outage) < 90*time.Second {
			n := srv.attempts.Load()
			gaps = append(gaps, waitCount(t, &srv.attempts, n, time.Minute))
		}
		// The first gap runs from the outage's start to the next beat.
		retries := gaps[1:]
		for i, g := range retries {
			if g < 2*time.Second-tick || g > 4*time.Second+tick {
				t.Fatalf("retry %d came %v after the one before; want 2 to 4 s: %v", i+1, g, retries)
			}
		}
		if n := len(gaps); n > 36 || n < 25 {
			t.Errorf("%d attempts in a 90 s outage; want about 30 (one per 3 s)", n)
		}
		if slices.Min(retries) == slices.Max(retries) {
			t.Errorf("retries not jittered: %v", retries)
		}

		beats := srv.beats.Load()
		srv.down.Store(false)
		if back := waitCount(t, &srv.beats, beats, time.Minute); back > 4*time.Second+tick {
			t.Fatalf("first beat %v after the server returned; want within 4 s", back)
		}
	})
}

// A fleet that loses the server in one instant: every node retries at the
// same pace, their retries drift apart, and the server's return meets a
// ramp, not a burst: each node within 4 s, no second of it taking more than
// half the fleet. The delays are the loop's own (heartbeatRetry), the
// clock the sum of them.
func TestFleetRetriesSpreadOverAnOutage(t *testing.T) {
	const nodes = 200
	for _, outage := range []time.Duration{20 * time.Second, 90 * time.Second} {
		var attempts int
		perSecond := map[int]int{}
		for range nodes {
			r := heartbeatRetry()
			at := time.Duration(0) // the beat that found the server gone
			for attempts++; at < outage; attempts++ {
				at += r.Next()
			}
			if back := at - outage; back > 4*time.Second {
				t.Fatalf("%v outage: a node came back %v after the server", outage, back)
			}
			perSecond[int((at-outage)/time.Second)]++
		}
		// The last attempt of each node is its first after the return.
		if mean := float64(attempts-nodes) / nodes; mean > outage.Seconds()/3+1 {
			t.Errorf("%v outage: %.1f attempts per node; want one per 3 s", outage, mean)
		}
		for s, n := range perSecond {
			if n > nodes/2 {
				t.Errorf("%v outage: %d of %d nodes came back in second %d: %v", outage, n, nodes, s, perSecond)
			}
		}
	}
}

// A dropped WebSocket is followed by an HTTP beat within a second, not at
// once: a server restart drops every node's socket in the same instant.
func TestHTTPBeatAfterDropSpread(t *testing.T) {
	srv := newFakeServer(t)
	srv.websocket.Store(true)
	synctest.Test(t, func(t *testing.T) {
		a := bubbleAgent(t, srv)
		stop := run(a.newSession().run)
		defer stop()
		var gaps []time.Duration
		for range 5 {
			waitCount(t, &srv.sessions, srv.sessions.Load(), time.Minute)
			gaps = append(gaps, waitCount(t, &srv.beats, srv.beatsAtSession.Load(), time.Minute))
		}
		checkSpread(t, "HTTP beats after a drop", gaps, dropSpread)
	})
}

// checkSpread fails unless every delay is within bound and they differ:
// a fleet's requests then come as a ramp, not a burst.
func checkSpread(t *testing.T, what string, delays []time.Duration, bound time.Duration) {
	t.Helper()
	if slices.Max(delays) > bound+tick {
		t.Fatalf("%s: %v; want each within %v", what, delays, bound)
	}
	if slices.Min(delays) == slices.Max(delays) {
		t.Errorf("%s are not spread: %v", what, delays)
	}
}

// A version the server pushes is fetched within pushSpread, not at once:
// the server pushes a publish to every node in the same instant.
func TestPushedApplySpread(t *testing.T) {
	srv := newFakeServer(t)
	synctest.Test(t, func(t *testing.T) {
		a := bubbleAgent(t, srv)
		stop := run(a.applyLoop)
		defer stop()
		h := a.newSession()
		var waits []time.Duration
		for i := range 5 {
			// A new version each time: the engine holds one this node
			// cannot run.
			h.ActiveConfig(protocol.ConfigRef{Version: fmt.Sprintf("20260101-%03d", i+1), Checksum: strings.Repeat("a", 64)})
			waits = append(waits, waitCount(t, &srv.fetches, srv.fetches.Load(), time.Minute))
			synctest.Wait()
		}
		checkSpread(t, "E4 fetches after a push", waits, pushSpread)
	})
}

// A backlog of access-log lines goes out in batches at most two a second,
// every line once.
func TestCatchUpPaced(t *testing.T) {
	srv := newFakeServer(t)
	synctest.Test(t, func(t *testing.T) {
		a := bubbleAgent(t, srv)
		const backlog = 7000 // the cap is 2000 lines a beat
		var sb strings.Builder
		for i := range backlog {
			fmt.Fprintf(&sb, `{"ts":"2026-07-18T10:00:00+08:00","host":"h","path":"/n/%d","remote_addr":"203.0.113.9","status":200,"request_time":0.001,"bytes_sent":1,"request_length":1,"user_agent":"ua","cache_status":"-"}`+"\n", i)
		}
		if err := os.MkdirAll(filepath.Dir(a.cfg.AccessLogPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(a.cfg.AccessLogPath, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		stop := run(a.newSession().run)
		defer stop()
		var gaps []time.Duration
		for srv.lines.Load() < backlog {
			gaps = append(gaps, waitCount(t, &srv.beats, srv.beats.Load(), time.Minute))
		}
		for _, g := range gaps[1:] {
			if g < time.Second/2-tick {
				t.Fatalf("beats %v apart while catching up; want at most two a second: %v", g, gaps)
			}
		}
		if len(gaps) < 4 {
			t.Fatalf("%d beats carried %d lines; the per-beat cap did not apply", len(gaps), backlog)
		}
		if n := srv.lines.Load(); n != backlog {
			t.Fatalf("%d lines arrived, want %d", n, backlog)
		}
	})
}

// Over the WebSocket a catch-up status waits for the answer to the last
// one, so the server's frames are read before more lines go out; a status
// the server never answers holds the next one back for one interval at
// most, and ordinary statuses never wait.
func TestCatchUpStatusWaitsForTheReply(t *testing.T) {
	srv := newFakeServer(t)
	synctest.Test(t, func(t *testing.T) {
		a := bubbleAgent(t, srv)
		h := a.newSession()
		send := func(catchingUp bool) bool {
			p, commit := h.Status(t.Context())
			if p != nil {
				commit()
			}
			a.moreLogs.Store(catchingUp)
			return p != nil
		}
		if !send(true) {
			t.Fatal("the first status was held back")
		}
		if send(true) {
			t.Fatal("a catch-up status went out before the answer to the last")
		}
		h.Settings(protocol.AgentSettings{HeartbeatInterval: 3000})
		if !send(true) {
			t.Fatal("a catch-up status was held back after the answer")
		}
		time.Sleep(a.heartbeatInterval())
		if !send(false) {
			t.Fatal("an unanswered status held the next one back beyond the interval")
		}
		if !send(false) {
			t.Fatal("a status without a backlog waited for an answer")
		}
	})
}
