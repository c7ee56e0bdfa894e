package agent

import (
	"context"
	"errors"
	"time"

	"github.com/openflare/openflare-agent/agent/apply"
	"github.com/openflare/openflare-agent/agent/backoff"
	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/wsclient"
)

// maxRetry caps the delay between failed heartbeats: the server marks a
// node offline after 60 s of silence, so a returning server should see the
// node again within about that long.
const maxRetry = time.Minute

// WebSocket reconnects back off from 1 s to 30 s with jitter, so a fleet of
// agents does not reconnect in lockstep after a server restart; a connection
// that stayed up this long resets the backoff.
const (
	wsRetryMin = time.Second
	wsRetryMax = 30 * time.Second
	wsStayedUp = 30 * time.Second
)

// channels reports to the server until ctx ends: HTTP heartbeats, upgraded
// to the WebSocket after a successful beat while the server allows it. While
// the socket is up its status messages replace HTTP beats; when it drops,
// one HTTP beat goes out at once and HTTP beats continue until the socket
// is back.
func (a *Agent) channels(ctx context.Context) {
	httpRetry := &backoff.Backoff{}
	wsRetry := &backoff.Backoff{Min: wsRetryMin, Max: wsRetryMax}
	var wsNext time.Time
	firstBeat := true
	for ctx.Err() == nil {
		b := a.newBeat(ctx)
		reply, err := a.cp.Heartbeat(ctx, b.payload)
		if err != nil {
			a.beatFailed(b)
			if ctx.Err() != nil {
				return
			}
			iv := a.heartbeatInterval()
			httpRetry.Min, httpRetry.Max = iv, max(maxRetry, iv)
			wait := httpRetry.Next()
			a.log.Warn("heartbeat failed", "err", err, "attempt", httpRetry.Attempts(), "retry_in", wait.Round(time.Millisecond))
			if !backoff.Sleep(ctx, wait) {
				return
			}
			continue
		}
		httpRetry.Reset()
		a.beatDone(b, "http")
		a.onSettings(reply.AgentSettings)
		a.pushIPGroups(reply.WAFIPGroups)
		mode := apply.Normal
		if firstBeat {
			// The first successful beat re-applies even an up-to-date
			// version: that refreshes the agent's own files after an
			// upgrade and starts nginx if it is down (upstream only tries
			// after the first attempt, so a node booted while the server
			// was down stays dark).
			mode, firstBeat = apply.Startup, false
		}
		a.requestApply(reply.ActiveConfig, mode)

		if a.wsAllowed.Load() && !time.Now().Before(wsNext) {
			upAt, err := a.runWebSocket(ctx)
			if ctx.Err() != nil {
				return
			}
			if !upAt.IsZero() && time.Since(upAt) >= wsStayedUp {
				wsRetry.Reset()
			}
			wait := wsRetry.Next()
			wsNext = time.Now().Add(wait)
			a.log.Warn("websocket unavailable; heartbeating over HTTP", "err", err, "retry_in", wait.Round(time.Millisecond))
			// Straight back to an HTTP beat: the server must not see a gap.
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

// runWebSocket holds one connection until it ends; it returns when the
// handshake succeeded (zero if it did not) and why the connection ended.
func (a *Agent) runWebSocket(ctx context.Context) (time.Time, error) {
	var upAt time.Time
	h := &wsHandler{a: a}
	err := wsclient.Run(ctx, wsclient.Options{
		ServerURL:    a.cfg.ServerURL,
		Token:        a.cp.Token(),
		AgentVersion: a.version,
		DialTimeout:  a.cfg.RequestTimeout,
		Interval:     a.statusInterval,
		Log:          a.log,
		Stats:        &a.wsStats,
		StatusNow:    a.statusNow,
		// A frame is held whole while it decodes (x/net/websocket reads
		// messages entire), and its entries then cost about twice their
		// text: half the entry budget. A bigger push ends the session; the
		// heartbeat that follows carries the group, judged there alone.
		MaxFrame: int(a.cp.Budgets.Entries / 2),
	}, h, func() {
		upAt = time.Now()
		a.log.Info("websocket connected; status messages replace HTTP heartbeats")
	})
	h.finish()
	if errors.Is(err, wsclient.ErrDisabled) {
		a.wsAllowed.Store(false)
	}
	if err == nil {
		err = errors.New("connection closed")
	}
	return upAt, err
}

// wsHandler serves one WebSocket connection.
type wsHandler struct {
	a       *Agent
	unacked *beat // the last status handed out and not yet acknowledged
}

func (h *wsHandler) Status(ctx context.Context) (*protocol.NodePayload, func()) {
	if h.unacked != nil {
		// Its write never completed: what it carried goes out again.
		h.a.beatFailed(h.unacked)
	}
	b := h.a.newBeat(ctx)
	h.unacked = b
	return b.payload, func() {
		h.unacked = nil
		h.a.beatDone(b, "websocket")
	}
}

// finish settles a status whose write never completed.
func (h *wsHandler) finish() {
	if h.unacked != nil {
		h.a.beatFailed(h.unacked)
		h.unacked = nil
	}
}

func (h *wsHandler) Settings(s protocol.AgentSettings) { h.a.onSettings(s) }

func (h *wsHandler) ActiveConfig(ref protocol.ConfigRef) {
	h.a.requestApply(&ref, apply.Normal)
}

func (h *wsHandler) ForceSync(ref protocol.ConfigRef) {
	h.a.log.Info("the server asked for a forced sync", "version", ref.Version)
	h.a.requestApply(&ref, apply.Force)
}

func (h *wsHandler) IPGroups(groups []protocol.WAFIPGroup) { h.a.pushIPGroups(groups) }

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
// per-beat cap, e.g. after an outage on a busy node.
const catchUp = 200 * time.Millisecond

// statusInterval is the time to the next beat.
func (a *Agent) statusInterval() time.Duration {
	iv := a.heartbeatInterval()
	if a.moreLogs.Load() {
		return min(iv, catchUp)
	}
	return iv
}
