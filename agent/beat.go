package agent

import (
	"context"
	"time"

	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/state"
)

// beat is one status report on either channel.
type beat struct {
	payload *protocol.NodePayload
}

// newBeat builds the NodePayload of a register, heartbeat or WS status:
// the same payload on every channel.
func (a *Agent) newBeat(ctx context.Context) *beat {
	return &beat{payload: a.payload(ctx)}
}

// beatDone records a beat the server accepted.
func (a *Agent) beatDone(b *beat, channel string) {
	if err := a.store.Update(func(s *state.State) { s.LastHeartbeatUnix = time.Now().Unix(); s.Channel = channel }); err != nil {
		a.log.Warn("record heartbeat", "err", err)
	}
}

// beatFailed settles a beat the server never got.
func (a *Agent) beatFailed(b *beat) {}

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

// pushIPGroups lands groups pushed by a heartbeat reply or the WebSocket.
func (a *Agent) pushIPGroups(groups []protocol.WAFIPGroup) {}
