package agent

import (
	"context"
	"strconv"
	"strings"
	"time"

	"openflare/agent/ipgroups"
	"openflare/agent/observability"
	"openflare/agent/protocol"
	"openflare/agent/state"
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
	p := a.payload(ctx, r.Events...)
	p.Profile = r.Profile
	p.HostMetrics = r.HostMetrics
	p.EdgeHealth = r.EdgeHealth
	p.AccessLogs = r.AccessLogs
	p.Buffered = r.Buffered
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
// sends, and the base of every beat; more are events of the beat's own.
func (a *Agent) payload(ctx context.Context, more ...protocol.HealthEvent) *protocol.NodePayload {
	st := a.store.Get()
	ip := a.cfg.NodeIP
	if ip == "" {
		ip = a.ip.Detect(ctx)
	}
	now := time.Now().Unix()
	events := unenforced(st, a.engine.Nginx.Usable(), a.ipg.Failures(), a.geoip.unavailable(), now)
	status, msg, lastError := st.OpenRestyStatus, st.OpenRestyMessage, ""
	if len(events) > 0 {
		status, msg = protocol.StatusUnhealthy, events[0].Message
		lastError = protocol.Bound(msg, protocol.MaxText)
	}
	if status == "" {
		status = protocol.StatusUnknown
	}
	events = append(events, a.update.events(now)...)
	return &protocol.NodePayload{
		SchemaVersion:       protocol.SchemaVersion,
		NodeID:              st.NodeID,
		Name:                a.cfg.NodeName,
		IP:                  ip,
		Version:             a.version,
		ExtVersion:          a.extVersion,
		CurrentVersion:      st.Current.Version,
		LastError:           lastError,
		OpenRestyStatus:     status,
		OpenRestyMessage:    protocol.Bound(msg, protocol.MaxText),
		HealthEvents:        oneEach(append(events, more...)),
		WAFIPGroupChecksums: a.ipg.Checksums(),
	}
}

// unenforced lists, worst first, what the server asked this node to
// enforce and it does not (PROTOCOL 2.4), one health event each:
//
//  1. nginx does not serve as it should: no usable binary, a failed
//     self-test, a failed restart_openresty_now, or a health check or
//     apply that left it unhealthy;
//  2. the server's version is not applied (a fetch, render or apply
//     error);
//  3. IP groups not held as the server has them;
//  4. geo_match rules without the database they need;
//  5. Pages projects not deployed.
//
// The first is the beat's last_error and openresty_message, and any makes
// the node unhealthy: it never reports healthy while one is open. Each
// clears only with its cause, so last_error then names the next.
func unenforced(st state.State, usable error, groups []ipgroups.Rejection, geo string, now int64) []protocol.HealthEvent {
	down := ""
	switch {
	case usable != nil:
		down = usable.Error()
	case st.SelfTestError != "":
		// nginx answering stub_status is not a site serving: the
		// self-test's failure outranks the health check.
		down = st.SelfTestError
	case st.RestartError != "":
		down = st.RestartError
	case st.OpenRestyStatus == protocol.StatusUnhealthy:
		down = st.OpenRestyMessage
	}
	notHeld := ""
	for _, g := range groups {
		notHeld += "; IP group " + strconv.FormatUint(g.ID, 10) + " not enforced: " + g.Reason
	}
	var out []protocol.HealthEvent
	for _, p := range [...]struct{ typ, severity, msg string }{
		{protocol.EventOpenRestyUnhealthy, protocol.SeverityCritical, down},
		{protocol.EventSyncError, protocol.SeverityWarning, st.LastError},
		{protocol.EventIPGroupSyncError, protocol.SeverityWarning, strings.TrimPrefix(notHeld, "; ")},
		{protocol.EventGeoIPUnavailable, protocol.SeverityWarning, geo},
		{protocol.EventPagesSyncError, protocol.SeverityWarning, st.PagesError},
	} {
		if p.msg != "" {
			out = append(out, protocol.HealthEvent{EventType: p.typ, Severity: p.severity, Message: p.msg, TriggeredAtUnix: now})
		}
	}
	return out
}

// oneEach merges events of one type into one, in the first's place, each
// message bounded: the server keeps one active event per type, and of
// several it would keep one message. The merged event has every message,
// the worst severity and the first's metadata.
func oneEach(events []protocol.HealthEvent) []protocol.HealthEvent {
	out := []protocol.HealthEvent{}
next:
	for _, e := range events {
		e.Message = protocol.Bound(e.Message, protocol.MaxText)
		for i := range out {
			if m := &out[i]; m.EventType == e.EventType {
				m.Message = protocol.Bound(m.Message+"; "+e.Message, protocol.MaxText)
				// The worse of the two: info < warning (or unknown) < critical.
				if m.Severity != protocol.SeverityCritical && e.Severity != protocol.SeverityInfo {
					m.Severity = e.Severity
				}
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

// beatSoon asks for the next beat now rather than at the interval.
func (a *Agent) beatSoon() { a.statusNow.Notify() }
