package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"openflare/agent/apply"
	"openflare/agent/config"
	"openflare/agent/controlplane"
	"openflare/agent/protocol"
	"openflare/agent/wsclient"
	"openflare/testing/testsupport"
)

// The session's tests talk to the fake server's in-memory door: every
// call is instantaneous on the bubble's clock, so the delays measured are
// the session's own.

var testVersion = protocol.ConfigRef{Version: "20260101-001", Checksum: strings.Repeat("a", 64)}

// settled lets the session finish reacting to what it was answered.
func settled() { synctest.Wait() }

// The first successful beat asks for a startup apply, which re-applies
// even an up-to-date version; failed beats before it ask for nothing, and
// the beats after it for normal applies of the version the server names.
func TestStartupApplyOnFirstBeat(t *testing.T) {
	srv := newFakeServer(t)
	srv.down.Store(true)
	srv.active = &testVersion
	synctest.Test(t, func(t *testing.T) {
		a := bubbleAgent(t, srv)
		stop := run(srv.session(a).run)
		defer stop()
		waitCount(t, &srv.attempts, 1, time.Minute)
		settled()
		if w := a.work.take(); w.apply {
			t.Fatalf("failed beats asked for an apply: %+v", w)
		}
		srv.down.Store(false)
		waitCount(t, &srv.beats, 0, time.Minute)
		settled()
		if w := a.work.take(); !w.apply || w.mode != apply.Startup || w.target == nil || *w.target != testVersion || w.pushed {
			t.Fatalf("after the first successful beat: %+v, want a startup apply of %v", w, testVersion)
		}
		waitCount(t, &srv.beats, 1, time.Minute)
		settled()
		if w := a.work.take(); !w.apply || w.mode != apply.Normal || *w.target != testVersion {
			t.Fatalf("after the second beat: %+v, want a normal apply", w)
		}
	})
}

// The server's heartbeat_interval paces the beats, kept within 250 ms and
// an hour: a tiny value cannot flood the server, a huge one cannot wrap
// into a tight loop.
func TestHeartbeatIntervalClampPacesBeats(t *testing.T) {
	srv := newFakeServer(t)
	srv.interval.Store(1)
	synctest.Test(t, func(t *testing.T) {
		a := bubbleAgent(t, srv)
		stop := run(srv.session(a).run)
		defer stop()
		waitCount(t, &srv.beats, 4, time.Minute)
		at := srv.times(&srv.beatAt)
		for i := 1; i < len(at); i++ {
			if gap := at[i].Sub(at[i-1]); gap != 250*time.Millisecond {
				t.Fatalf("beats %v apart at heartbeat_interval 1 ms; want 250 ms: %v", gap, at)
			}
		}
		srv.interval.Store(9223372036855)
		n := srv.beats.Load()
		waitCount(t, &srv.beats, n, time.Minute) // the beat that sets it
		time.Sleep(59 * time.Minute)
		if got := srv.beats.Load(); got != n+1 {
			t.Fatalf("%d beats within an hour of a huge heartbeat_interval; want none", got-n-1)
		}
		waitCount(t, &srv.beats, n+1, 2*time.Minute)
		at = srv.times(&srv.beatAt)
		if gap := at[n+1].Sub(at[n]); gap != time.Hour {
			t.Fatalf("the beat after a huge heartbeat_interval came %v later; want an hour", gap)
		}
	})
}

// A WebSocket that drops at once is dialled again after a growing
// backoff (1, 2, 4 s ceilings); one that stayed up 30 s resets it, so the
// next dial comes within a second, and one that stayed up less does not.
func TestWebSocketBackoffResetsAfterStayingUp(t *testing.T) {
	for _, c := range []struct {
		up       time.Duration
		min, max time.Duration // the dial after it
	}{
		{31 * time.Second, 500 * time.Millisecond, time.Second},
		{29 * time.Second, 4 * time.Second, 8 * time.Second},
	} {
		t.Run(c.up.String(), func(t *testing.T) {
			srv := newFakeServer(t)
			srv.websocket.Store(true)
			srv.socket = func(ctx context.Context, n int, _ wsclient.Handler) error {
				if n == 3 {
					stayUp(ctx, c.up)
				}
				return errFakeDown
			}
			synctest.Test(t, func(t *testing.T) {
				a := bubbleAgent(t, srv)
				stop := run(srv.session(a).run)
				defer stop()
				waitCount(t, &srv.sessions, 4, 5*time.Minute)
				stop()
				dials, drops := srv.times(&srv.dials), srv.times(&srv.drops)
				// The HTTP beat after a drop waits up to a second: a
				// shorter backoff is then up before the beat is.
				for i, want := range [][2]time.Duration{{time.Second / 2, time.Second}, {time.Second, 2 * time.Second}, {2 * time.Second, 4 * time.Second}, {c.min, c.max}} {
					if gap := dials[i+1].Sub(drops[i]); gap < want[0] || gap > max(want[1], time.Second)+tick {
						t.Errorf("dial %d came %v after drop %d; want %v to %v", i+1, gap, i, want[0], want[1])
					}
				}
			})
		})
	}
}

// stayUp holds a connection d or until ctx ends.
func stayUp(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// What the server pushes over the WebSocket meets the reactions an HTTP
// reply gets: settings are adopted (interval, a restart), a pushed version
// queues an apply that waits its spread, a forced sync a force apply, an
// IP-group push is read; the statuses sent are acknowledged as the
// WebSocket's.
func TestWebSocketPushesMeetTheReactions(t *testing.T) {
	srv := newFakeServer(t)
	srv.websocket.Store(true)
	forced := protocol.ConfigRef{Version: "20260101-002", Checksum: strings.Repeat("b", 64)}
	synctest.Test(t, func(t *testing.T) {
		a := bubbleAgent(t, srv)
		queued := make(chan work, 1)
		srv.socket = func(ctx context.Context, n int, h wsclient.Handler) error {
			if n == 0 {
				h.Settings(protocol.AgentSettings{HeartbeatInterval: 1500, WebsocketUpgradeEnabled: true, RestartOpenRestyNow: true})
				if p, commit := h.Status(ctx); p != nil {
					commit()
				}
				h.ActiveConfig(testVersion)
				queued <- a.work.take()
				h.ForceSync(forced)
				if err := h.IPGroups(json.NewDecoder(strings.NewReader(`[]`))); err != nil {
					t.Errorf("an empty IP-group push: %v", err)
				}
			}
			<-ctx.Done()
			return nil
		}
		stop := run(srv.session(a).run)
		defer stop()
		pushed := <-queued
		settled()
		if !pushed.apply || !pushed.pushed || *pushed.target != testVersion || pushed.mode != apply.Startup || !pushed.restart {
			t.Errorf("after the push: %+v, want the pushed version with its spread, the first beat's startup mode, the restart", pushed)
		}
		w := a.work.take()
		if !w.apply || *w.target != forced || w.mode != apply.Force || w.pushed {
			t.Errorf("after the forced sync: %+v, want a force apply of %v", w, forced)
		}
		if iv := a.heartbeatInterval(); iv != 1500*time.Millisecond {
			t.Errorf("interval %v after the pushed settings, want 1.5 s", iv)
		}
		if ch := a.store.Get().Channel; ch != "websocket" {
			t.Errorf("the status sent was recorded over %q, want websocket", ch)
		}
	})
}

// Registration retries as its failure deserves: 2 to 4 s after the server
// could not be reached, a backoff from 1 s after a rejected token, ten
// minutes after a reply without a usable node id or token (every call
// creates a node on the server). The token that finally comes is saved to
// agent.json, in use, and the node id recorded.
func TestRegisterRetries(t *testing.T) {
	srv := newFakeServer(t)
	unauthorized := &controlplane.Error{Endpoint: "register", Status: http.StatusUnauthorized}
	good := goodRegistration.reply
	srv.registerReplies = []registration{
		{err: errFakeDown},
		{err: unauthorized},
		{err: unauthorized},
		{reply: protocol.RegisterReply{NodeID: "42"}},
		{reply: protocol.RegisterReply{NodeID: "42", AccessToken: "tok\r\nX-Evil: 1"}},
		{reply: protocol.RegisterReply{NodeID: strings.Repeat("9", 129), AccessToken: good.AccessToken}},
		{reply: good},
	}
	want := [][2]time.Duration{
		{2 * time.Second, 4 * time.Second},
		{time.Second / 2, time.Second},
		{time.Second, 2 * time.Second},
		{malformedRetry, malformedRetry},
		{malformedRetry, malformedRetry},
		{malformedRetry, malformedRetry},
	}
	synctest.Test(t, func(t *testing.T) {
		a := bubbleAgent(t, srv, "agent_token", "", "discovery_token", "discovery-0123456789")
		srv.session(a).register(t.Context())
		at := srv.times(&srv.registered)
		if len(at) != len(want)+1 {
			t.Fatalf("%d register calls, want %d", len(at), len(want)+1)
		}
		for i, w := range want {
			if gap := at[i+1].Sub(at[i]); gap < w[0] || gap > w[1] {
				t.Errorf("register call %d came %v after the one before; want %v to %v", i+1, gap, w[0], w[1])
			}
		}
		cfg, _, err := config.Load(a.cfg.Path, func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		if cfg.AgentToken != good.AccessToken || cfg.DiscoveryToken != "" {
			t.Errorf("agent.json has agent_token %q, discovery_token %q", cfg.AgentToken, cfg.DiscoveryToken)
		}
		if tok := srv.usedToken(); tok != good.AccessToken || a.cfg.AgentToken != good.AccessToken {
			t.Errorf("token in use %q (config %q), want the registered one", tok, a.cfg.AgentToken)
		}
		if id := a.store.Get().NodeID; id != good.NodeID {
			t.Errorf("node id %q, want %q", id, good.NodeID)
		}
	})
}

// A token that cannot be saved to agent.json is retried, from a second
// on, before anything else happens: going on without it would register a
// second node after the next restart.
func TestRegisterSavesTheTokenFirst(t *testing.T) {
	srv := newFakeServer(t)
	synctest.Test(t, func(t *testing.T) {
		a := bubbleAgent(t, srv, "agent_token", "", "discovery_token", "discovery-0123456789")
		good, err := os.ReadFile(a.cfg.Path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(a.cfg.Path, []byte("not json"), 0o600); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			srv.session(a).register(t.Context())
			close(done)
		}()
		settled()
		select {
		case <-done:
			t.Fatal("registration finished without saving the token")
		default:
		}
		if tok := srv.usedToken(); tok != "" {
			t.Fatal("the token was used before it was saved")
		}
		if err := os.WriteFile(a.cfg.Path, good, 0o600); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		<-done
		if took := time.Since(start); took > time.Second {
			t.Errorf("saved %v after agent.json was fixed; want within the first retry's second", took)
		}
		if n := len(srv.times(&srv.registered)); n != 1 {
			t.Errorf("%d register calls, want 1", n)
		}
		cfg, _, err := config.Load(a.cfg.Path, func(string) string { return "" })
		if err != nil || cfg.AgentToken != goodRegistration.reply.AccessToken {
			t.Fatalf("agent.json after the retry: %+v, %v", cfg, err)
		}
	})
}

// Run registers before any other call to the server, beats with the node
// token it got, and returns once its context ends, every loop stopped.
func TestRunRegistersThenBeats(t *testing.T) {
	srv := newFakeServer(t)
	synctest.Test(t, func(t *testing.T) {
		a := bubbleAgent(t, srv, "agent_token", "", "discovery_token", "discovery-0123456789")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- a.Run(ctx) }()
		waitCount(t, &srv.beats, 0, time.Minute)
		if n := len(srv.times(&srv.registered)); n != 1 {
			t.Fatalf("%d registrations before the first beat, want 1", n)
		}
		srv.mu.Lock()
		tok := srv.beatToken
		srv.mu.Unlock()
		if tok != goodRegistration.reply.AccessToken {
			t.Fatalf("the beat carried token %q, want the node token", tok)
		}
		waitCount(t, &srv.fetches, 0, time.Minute) // the startup apply
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// Each kind of queued work runs: a restart that fails is recorded for the
// beats (nginx is missing here), and an nginx found down is started from
// the landed config, its failure logged.
func TestApplyLoopRunsEachKind(t *testing.T) {
	srv := newFakeServer(t)
	synctest.Test(t, func(t *testing.T) {
		a := bubbleAgent(t, srv)
		var out testsupport.Buffer
		a.log = slog.New(slog.NewTextHandler(&out, nil))
		stop := run(a.applyLoop)
		defer stop()
		a.requestRestart()
		settled()
		if e := a.store.Get().RestartError; e == "" {
			t.Error("the failed restart was not recorded")
		}
		a.requestEnsure()
		a.requestReconcile()
		settled()
		if !strings.Contains(out.String(), "start nginx from the landed config") {
			t.Errorf("the ensure did not run:\n%s", out.String())
		}
	})
}

// The Pages loop deploys the projects of the version in force as soon as
// an apply names them, records a failure for the beats and asks for one,
// and clears it once no project is left; a restart takes the projects
// from state and deploys them without waiting for an apply.
func TestPagesLoopRecordsAndClears(t *testing.T) {
	srv := newFakeServer(t)
	synctest.Test(t, func(t *testing.T) {
		a := bubbleAgent(t, srv)
		stop := run(a.pagesLoop)
		a.setPages(t.Context(), []uint64{7})
		testsupport.WaitFor(t, time.Second, "the deployment's failure", func() bool { return a.store.Get().PagesError != "" })
		if e := a.store.Get().PagesError; !strings.Contains(e, "pages project 7") {
			t.Errorf("pages error %q, want one naming project 7", e)
		}
		settled()
		if len(a.statusNow) != 1 {
			t.Error("no beat was asked for after the failure")
		}
		<-a.statusNow
		stop()

		a.pagesWork.ids = nil
		a.restorePages()
		stop = run(a.pagesLoop)
		defer stop()
		settled()
		var ids []uint64
		a.pagesWork.box.Do(func() { ids = a.pagesWork.ids })
		if len(ids) != 1 || ids[0] != 7 || a.store.Get().PagesError == "" {
			t.Fatalf("projects %v from state, pages error %q", ids, a.store.Get().PagesError)
		}
		a.setPages(t.Context(), nil)
		testsupport.WaitFor(t, time.Second, "the cleared pages error", func() bool { return a.store.Get().PagesError == "" })
		if p := a.store.Get().PagesProjects; p != "" {
			t.Errorf("state keeps projects %q", p)
		}
	})
}
