package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"openflare/agent/apply"
	"openflare/agent/backoff"
	"openflare/agent/controlplane"
	"openflare/agent/ipgroups"
	"openflare/agent/protocol"
	"openflare/agent/wsclient"
)

// A failed beat, or registration, is retried after 2 to 4 s, uniformly
// (retryCeil with equal jitter): never sooner than 2 s and every 3 s on
// average (the server's default beat) however long the outage lasts, and
// a server that comes back hears from each node within 4 s, well inside
// the 60 s after which it marks one offline. The jitter also breaks a
// fleet's step: nodes that lost the server at one instant drift apart by
// 0.58·√n s (the delay's deviation) after n retries, so a return meets
// about N/3 of them a second rather than all N at once.
const retryCeil = 4 * time.Second

func heartbeatRetry() *backoff.Backoff { return &backoff.Backoff{Min: retryCeil, Max: retryCeil} }

// retryLevel keeps a long outage's retries, one every 3 s, from flushing a
// router's small log ring: the first few and then one in 20 (a minute
// apart) are warnings, the others debug lines.
func retryLevel(attempt int) slog.Level {
	if attempt <= 3 || attempt%20 == 0 {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

// WebSocket reconnects back off from 1 s to 30 s with jitter, so a fleet of
// agents does not reconnect in lockstep after a server restart; a connection
// that stayed up this long resets the backoff.
const (
	wsRetryMin = time.Second
	wsRetryMax = 30 * time.Second
	wsStayedUp = 30 * time.Second
)

// A server restart drops every node's socket in the same instant: the HTTP
// beat after a drop waits a random part of dropSpread, so the fleet's beats
// reach the server as a ramp, not a burst. A publish reaches every node in
// the same instant too, and its E4 fetch (applyLoop) waits a random part of
// pushSpread: shorter, since it adds to every publish's time to serving.
const (
	dropSpread = time.Second
	pushSpread = 250 * time.Millisecond
)

// server is what the session needs of the control plane: E1, E2 and the
// token they carry. *controlplane.Client is one, the tests' fake another.
type server interface {
	Register(ctx context.Context, p *protocol.NodePayload) (protocol.RegisterReply, error)
	Heartbeat(ctx context.Context, p *protocol.NodePayload, groups func(*json.Decoder) error) (protocol.HeartbeatReply, error)
	SetToken(tok string)
}

// session keeps the node's conversation with the server, as tailscale's
// controlclient.Auto does: registration (register.go), then HTTP heartbeats,
// upgraded to the WebSocket while the server allows it. It is the
// WebSocket's handler, and an HTTP reply meets the same methods, so what
// the server says gets one set of reactions over either channel.
type session struct {
	a   *Agent
	srv server
	// webSocket holds one connection until it ends (Agent.webSocket).
	webSocket func(ctx context.Context, h wsclient.Handler, up func()) error
	// startup: no beat has succeeded yet (see activeConfig).
	startup bool

	// The WebSocket's statuses. unacked is the last status handed out and
	// not yet acknowledged.
	unacked *beat
	// landingSince is when the IP-group push being read and landed began
	// (unix ns), zero when none is: a status meanwhile would still carry
	// the old checksums, and the server would push the same groups, maybe
	// 20 MiB, once more for every one.
	landingSince atomic.Int64
	// replied: the server has answered the last status or beat (every
	// answer starts with settings); sent is when that status went out. A
	// connection follows an answered HTTP beat, so its first status never
	// waits.
	replied atomic.Bool
	sent    time.Time
}

func (a *Agent) newSession() *session {
	return &session{a: a, srv: a.cp, webSocket: a.webSocket, startup: true}
}

// run reports to the server until ctx ends: HTTP heartbeats, upgraded to
// the WebSocket after a successful beat while the server allows it. While
// the socket is up its status messages replace HTTP beats; when it drops,
// one HTTP beat goes out within a second and HTTP beats continue until the
// socket is back.
func (s *session) run(ctx context.Context) {
	a := s.a
	httpRetry := heartbeatRetry()
	wsRetry := &backoff.Backoff{Min: wsRetryMin, Max: wsRetryMax}
	var wsNext time.Time
	for ctx.Err() == nil {
		b := a.newBeat(ctx)
		groups := a.ipg.Batch()
		reply, err := s.srv.Heartbeat(ctx, b.payload, groups.Decode)
		if err != nil {
			groups.Close()
			a.beatFailed(b)
			if ctx.Err() != nil {
				return
			}
			wait := httpRetry.Next()
			a.log.Log(ctx, retryLevel(httpRetry.Attempts()), "heartbeat failed", "err", err, "attempt", httpRetry.Attempts(), "retry_in", wait.Round(time.Millisecond))
			if !backoff.Sleep(ctx, wait) {
				return
			}
			continue
		}
		httpRetry.Reset()
		a.beatDone(b, "http")
		s.reply(reply, groups)

		if a.wsAllowed.Load() && !time.Now().Before(wsNext) {
			upAt, err := s.connect(ctx)
			if ctx.Err() != nil {
				return
			}
			if !upAt.IsZero() && time.Since(upAt) >= wsStayedUp {
				wsRetry.Reset()
			}
			wait := wsRetry.Next()
			wsNext = time.Now().Add(wait)
			a.log.Warn("websocket unavailable; heartbeating over HTTP", "err", err, "retry_in", wait.Round(time.Millisecond))
			// Back to an HTTP beat within a second: the server must not
			// see a gap.
			if !backoff.Sleep(ctx, rand.N(dropSpread)) {
				return
			}
			continue
		}
		wait := a.statusInterval()
		if a.wsAllowed.Load() {
			wait = min(wait, max(time.Until(wsNext), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-a.statusNow:
		case <-t.C:
		}
		t.Stop()
	}
}

// reply meets an HTTP heartbeat reply with the reactions the WebSocket's
// messages get, in the order the server sends those: settings, IP groups,
// the version in force.
func (s *session) reply(r protocol.HeartbeatReply, groups *ipgroups.Batch) {
	s.Settings(r.AgentSettings)
	s.a.pushIPGroups(groups)
	s.activeConfig(r.ActiveConfig, false)
}

func (s *session) Settings(set protocol.AgentSettings) {
	s.replied.Store(true)
	s.a.onSettings(set)
}

func (s *session) ActiveConfig(ref protocol.ConfigRef) { s.activeConfig(&ref, true) }

func (s *session) ForceSync(ref protocol.ConfigRef) {
	s.a.log.Info("the server asked for a forced sync", "version", ref.Version)
	s.a.requestApply(&ref, apply.Force, false)
}

// activeConfig queues an apply of the version the server names; pushed
// says it came over the WebSocket (see pushSpread).
func (s *session) activeConfig(ref *protocol.ConfigRef, pushed bool) {
	mode := apply.Normal
	if s.startup {
		// The first successful beat re-applies even an up-to-date
		// version: that refreshes the agent's own files after an
		// upgrade and starts nginx if it is down (the reference agent
		// only tries after the first attempt, so a node booted while the
		// server was down stays dark).
		mode, s.startup = apply.Startup, false
	}
	s.a.requestApply(ref, mode, pushed)
}

// connect holds one WebSocket connection until it ends; it returns when
// the handshake succeeded (zero if it did not) and why the connection
// ended.
func (s *session) connect(ctx context.Context) (time.Time, error) {
	var upAt time.Time
	err := s.webSocket(ctx, s, func() {
		upAt = time.Now()
		s.a.log.Info("websocket connected; status messages replace HTTP heartbeats")
	})
	s.finish()
	if errors.Is(err, wsclient.ErrDisabled) {
		s.a.wsAllowed.Store(false)
	}
	if err == nil {
		err = errors.New("connection closed")
	}
	return upAt, err
}

// webSocket is E3 to the agent's server (session.webSocket).
func (a *Agent) webSocket(ctx context.Context, h wsclient.Handler, up func()) error {
	return wsclient.Run(ctx, wsclient.Options{
		ServerURL:    a.cfg.ServerURL,
		Token:        a.cp.Token(),
		AgentVersion: a.version,
		DialTimeout:  a.cfg.RequestTimeout,
		Interval:     a.statusInterval,
		Log:          a.log,
		Stats:        &a.wsStats,
		StatusNow:    a.statusNow,
		// As for an HTTP reply: a frame, like any value, within the value
		// budget in memory; a larger IP-group push streams to disk within
		// the reply cap.
		MaxFrame:   int(a.cp.Budgets.Value),
		MaxMessage: controlplane.CapIPGroups,
	}, h, up)
}

// maxQuiet bounds the statuses skipped while a push lands: the server
// drops a session that sent nothing for 90 s.
const maxQuiet = 30 * time.Second

func (s *session) Status(ctx context.Context) (*protocol.NodePayload, func()) {
	if since := s.landingSince.Load(); since != 0 && time.Since(time.Unix(0, since)) < maxQuiet {
		return nil, nil
	}
	if s.a.moreLogs.Load() && !s.replied.Load() && time.Since(s.sent) < s.a.heartbeatInterval() {
		// Catching up on the access log: the next batch waits for the
		// answer to the last, so what the server sends is read before
		// more lines go out, and a slow server sets the pace.
		return nil, nil
	}
	if s.unacked != nil {
		// Its write never completed: what it carried goes out again.
		s.a.beatFailed(s.unacked)
	}
	b := s.a.newBeat(ctx)
	s.unacked = b
	s.replied.Store(false)
	s.sent = time.Now()
	return b.payload, func() {
		s.unacked = nil
		s.a.beatDone(b, "websocket")
	}
}

// finish settles a status whose write never completed.
func (s *session) finish() {
	if s.unacked != nil {
		s.a.beatFailed(s.unacked)
		s.unacked = nil
	}
}

func (s *session) IPGroups(dec *json.Decoder) error {
	s.landingSince.Store(time.Now().UnixNano())
	b := s.a.ipg.Batch()
	err := b.Decode(dec)
	landed := false
	if err != nil {
		b.Close()
	} else {
		landed = s.a.pushIPGroups(b)
	}
	s.landingSince.Store(0)
	if landed {
		// The status asked for while landing was skipped.
		s.a.beatSoon()
	}
	return err
}

// The heartbeat interval a server may set, in milliseconds.
const (
	minInterval = 250
	maxInterval = 3_600_000
)

// onSettings adopts the server's settings (HTTP reply or WS push). One-shot
// actions arrive once: the server clears them after sending them.
func (a *Agent) onSettings(s protocol.AgentSettings) {
	// Settings come only with a reply to a beat the server accepted: the
	// first one confirms a freshly swapped-in binary.
	a.update.confirm()
	if s.HeartbeatInterval > 0 {
		// Bounded before the multiplication can overflow: a huge value
		// would otherwise wrap into a tight loop of beats, or stop them.
		ms := min(max(s.HeartbeatInterval, minInterval), maxInterval)
		iv := time.Duration(ms) * time.Millisecond
		if old := time.Duration(a.interval.Swap(int64(iv))); old != iv {
			a.log.Info("heartbeat interval set by the server", "interval", iv)
		}
	}
	if a.wsAllowed.Swap(s.WebsocketUpgradeEnabled) != s.WebsocketUpgradeEnabled && !s.WebsocketUpgradeEnabled {
		a.log.Info("the server turned the websocket channel off; HTTP heartbeats only")
	}
	if s.UpdateNow {
		a.log.Info("the server asked for a self-update", "channel", s.UpdateChannel, "tag", s.UpdateTag)
	}
	a.update.offer(s)
	if s.RestartOpenRestyNow {
		a.log.Info("the server asked for an nginx restart")
		a.requestRestart()
	}
}

func (a *Agent) heartbeatInterval() time.Duration { return time.Duration(a.interval.Load()) }

// catchUp is the beat period while access-log lines wait beyond the
// per-beat cap, e.g. after an outage on a busy node: at most two beats a
// second, so a fleet back from an outage hands the server its backlog at a
// pace the server can take, not as fast as each node can read its log.
const catchUp = 500 * time.Millisecond

// statusInterval is the time to the next beat.
func (a *Agent) statusInterval() time.Duration {
	iv := a.heartbeatInterval()
	if a.moreLogs.Load() {
		return min(iv, catchUp)
	}
	return iv
}
