package agent

import (
	"context"
	"time"

	"github.com/openflare/openflare-agent/agent/backoff"
	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/sync"
)

// maxRetry caps the delay between failed heartbeats: the server marks a
// node offline after 60 s of silence, so a returning server should see the
// node again within about that long.
const maxRetry = time.Minute

// heartbeatLoop beats over HTTP forever: the interval after a success,
// growing jittered delays after failures.
func (a *Agent) heartbeatLoop(ctx context.Context) {
	bo := &backoff.Backoff{}
	startupPending := true
	for ctx.Err() == nil {
		reply, err := a.cp.Heartbeat(ctx, a.payload(ctx))
		var wait time.Duration
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			iv := a.heartbeatInterval()
			bo.Min, bo.Max = iv, max(maxRetry, iv)
			wait = bo.Next()
			a.log.Warn("heartbeat failed", "err", err, "attempt", bo.Attempts(), "retry_in", wait.Round(time.Millisecond))
		} else {
			bo.Reset()
			a.onBeat(reply, startupPending)
			startupPending = false
			wait = a.heartbeatInterval()
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}

// onBeat handles a heartbeat reply (the same settings and target arrive over
// the WebSocket later).
func (a *Agent) onBeat(r protocol.HeartbeatReply, startup bool) {
	if err := a.store.Update(func(s *stateT) { s.LastHeartbeatUnix = time.Now().Unix(); s.Channel = "http" }); err != nil {
		a.log.Warn("record heartbeat", "err", err)
	}
	a.applySettings(r.AgentSettings)
	mode := sync.Normal
	if startup {
		// The first successful beat re-applies even an up-to-date version:
		// that refreshes the agent's own files after an upgrade and starts
		// nginx if it is down (upstream only tries after the first attempt,
		// so a node booted while the server was down stays dark).
		mode = sync.Startup
	}
	a.requestSync(r.ActiveConfig, mode)
}

// applySettings adopts the server's settings. One-shot actions arrive once:
// the server clears them after replying.
func (a *Agent) applySettings(s protocol.AgentSettings) {
	if s.HeartbeatInterval > 0 {
		iv := time.Duration(s.HeartbeatInterval) * time.Millisecond
		if old := time.Duration(a.interval.Swap(int64(iv))); old != iv {
			a.log.Info("heartbeat interval set by the server", "interval", iv)
		}
	}
	if s.UpdateNow {
		a.log.Warn("the server asked for a self-update; this agent does not update itself yet", "channel", s.UpdateChannel, "tag", s.UpdateTag)
	}
	if s.RestartOpenRestyNow {
		a.log.Info("the server asked for an nginx restart")
		a.requestRestart()
	}
}

// payload is the NodePayload of a register, heartbeat or WS status.
func (a *Agent) payload(ctx context.Context) *protocol.NodePayload {
	st := a.store.Get()
	ip := a.cfg.NodeIP
	if ip == "" {
		ip = a.ip.Detect(ctx)
	}
	ext := ""
	if a.caps != nil {
		ext = a.caps.Version
	}
	status, msg := st.OpenRestyStatus, st.OpenRestyMessage
	if a.caps == nil {
		status, msg = protocol.StatusUnhealthy, "nginx binary not usable: "+a.syncer.ProbeErr
	}
	if status == "" {
		status = protocol.StatusUnknown
	}
	now := time.Now().Unix()
	events := []protocol.HealthEvent{}
	if status == protocol.StatusUnhealthy {
		events = append(events, protocol.HealthEvent{EventType: "openresty_unhealthy", Severity: "critical", Message: msg, TriggeredAtUnix: now})
	}
	if st.LastError != "" {
		events = append(events, protocol.HealthEvent{EventType: "sync_error", Severity: "warning", Message: st.LastError, TriggeredAtUnix: now})
	}
	return &protocol.NodePayload{
		SchemaVersion:    protocol.SchemaVersion,
		NodeID:           st.NodeID,
		Name:             a.cfg.NodeName,
		IP:               ip,
		Version:          a.version,
		ExtVersion:       ext,
		CurrentVersion:   st.CurrentVersion,
		LastError:        st.LastError,
		OpenRestyStatus:  status,
		OpenRestyMessage: msg,
		HealthEvents:     events,
	}
}

func (a *Agent) heartbeatInterval() time.Duration { return time.Duration(a.interval.Load()) }
