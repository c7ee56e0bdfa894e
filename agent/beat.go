package agent

import (
	"context"
	"time"

	"github.com/openflare/openflare-agent/agent/ipgroups"
	"github.com/openflare/openflare-agent/agent/observability"
	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/state"
)

// beat is one status report on either channel: the payload, and the
// observability data it carries, which is only acknowledged once the
// server took the beat.
type beat struct {
	payload *protocol.NodePayload
	report  *observability.Report
}

// newBeat probes nginx, collects host facts and new access-log lines, and
// builds the NodePayload: the same on every channel.
func (a *Agent) newBeat(ctx context.Context) *beat {
	r := a.obs.Collect(ctx)
	if r.Status != "" {
		a.recordHealth(r.Status, r.Message)
	}
	if r.Status == protocol.StatusUnhealthy && a.engine.Down() {
		// nginx died (crash, OOM kill, someone stopped it): the node
		// serves its landed config again without waiting for the server.
		a.requestEnsure()
	}
	p := a.payload(ctx)
	p.Profile = r.Profile
	p.HostMetrics = r.HostMetrics
	p.EdgeHealth = r.EdgeHealth
	p.AccessLogs = r.AccessLogs
	p.Buffered = r.Buffered
	p.HealthEvents = append(p.HealthEvents, r.Events...)
	return &beat{payload: p, report: r}
}

// recordHealth applies a probe result. A healthy probe clears the message;
// an unhealthy one only sets it when none is there (PROTOCOL 12.3), so the
// reason an apply gave is not overwritten by "unreachable".
func (a *Agent) recordHealth(status, msg string) {
	err := a.store.Update(func(s *state.State) {
		s.OpenRestyStatus = status
		switch {
		case status == protocol.StatusHealthy:
			s.OpenRestyMessage = ""
		case s.OpenRestyMessage == "":
			s.OpenRestyMessage = msg
		}
	})
	if err != nil {
		a.log.Warn("record nginx health", "err", err)
	}
}

// beatDone acknowledges a beat the server accepted.
func (a *Agent) beatDone(b *beat, channel string) {
	a.obs.Ack(b.report)
	a.moreLogs.Store(b.report.More)
	if a.ipg.RetryDue(time.Now()) {
		a.requestReconcile()
	}
	// Recorded for `status`, but written at most once a minute (or when
	// the channel changes): an fsync'd write every beat would wear a
	// router's flash for a timestamp.
	now := time.Now().Unix()
	st := a.store.Get()
	if st.Channel == channel && now-st.LastHeartbeatUnix < 60 {
		return
	}
	if err := a.store.Update(func(s *state.State) { s.LastHeartbeatUnix = now; s.Channel = channel }); err != nil {
		a.log.Warn("record heartbeat", "err", err)
	}
}

// beatFailed keeps what a beat carried for the next one.
func (a *Agent) beatFailed(b *beat) { a.obs.Nack(b.report) }

// payload is the NodePayload without observability: what a register call
// sends, and the base of every beat.
func (a *Agent) payload(ctx context.Context) *protocol.NodePayload {
	st := a.store.Get()
	ip := a.cfg.NodeIP
	if ip == "" {
		ip = a.ip.Detect(ctx)
	}
	status, msg := st.OpenRestyStatus, st.OpenRestyMessage
	switch err := a.engine.Nginx.Usable(); {
	case err != nil:
		status, msg = protocol.StatusUnhealthy, err.Error()
	case st.ProbeError != "":
		// nginx answering stub_status is not a site serving: the self-probe
		// failure outranks the health check until a probe passes.
		status, msg = protocol.StatusUnhealthy, st.ProbeError
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
	if st.PagesError != "" {
		events = append(events, protocol.HealthEvent{EventType: "pages_sync_error", Severity: "warning", Message: st.PagesError, TriggeredAtUnix: now})
	}
	events = append(events, a.geoip.events(now)...)
	events = append(events, a.update.events(now)...)
	return &protocol.NodePayload{
		SchemaVersion:       protocol.SchemaVersion,
		NodeID:              st.NodeID,
		Name:                a.cfg.NodeName,
		IP:                  ip,
		Version:             a.version,
		ExtVersion:          a.extVersion,
		CurrentVersion:      st.Current.Version,
		LastError:           st.LastError,
		OpenRestyStatus:     status,
		OpenRestyMessage:    msg,
		HealthEvents:        events,
		WAFIPGroupChecksums: a.ipg.Checksums(),
	}
}

// pushIPGroups lands groups pushed by a heartbeat reply or the WebSocket:
// only groups already in the snapshot, each verified, no nginx reload.
func (a *Agent) pushIPGroups(groups []protocol.WAFIPGroup) {
	if len(groups) == 0 {
		return
	}
	before := allocated()
	res, err := a.ipg.Push(groups)
	a.logIPGroups("pushed", res.Landed, res.Rejected, err)
	if len(res.Landed) > 0 {
		a.beatSoon()
		releaseMemory(before)
	}
}

// beatSoon asks for the next beat now rather than at the interval.
func (a *Agent) beatSoon() {
	select {
	case a.statusNow <- struct{}{}:
	default:
	}
}

// reconcileIPGroups replaces the snapshot with exactly the groups the new
// version references (PROTOCOL 7.2), after a success or warning apply. A
// failure is retried by the store's own schedule (beatDone).
func (a *Agent) reconcileIPGroups(ctx context.Context, ids []uint64) {
	res, err := a.ipg.Reconcile(ctx, ids, a.cp.SyncIPGroups)
	a.logIPGroups("reconciled", res.Landed, res.Rejected, err)
	if len(res.Landed) > 0 || len(res.Dropped) > 0 {
		a.beatSoon()
	}
}

func (a *Agent) logIPGroups(how string, landed []uint64, rejected []ipgroups.Rejection, err error) {
	for _, r := range rejected {
		a.log.Warn("IP group rejected", "id", r.ID, "reason", r.Reason)
	}
	if err != nil {
		a.log.Error("IP groups "+how, "err", err)
	} else if len(landed) > 0 {
		a.log.Info("IP groups "+how, "landed", landed)
	}
}
