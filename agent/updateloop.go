package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"openflare/agent/config"
	"openflare/agent/protocol"
	"openflare/agent/updater"
	"openflare/internal/mailbox"
)

// selfUpdate runs the updater on its own goroutine: a release download
// must hold up neither beats nor applies. Settings hand it triggers
// without blocking; the newest wins, and an update_now is never replaced
// by an auto_update.
type selfUpdate struct {
	u   *updater.Updater
	log *slog.Logger
	// off: agent.json's update_repo "off" stops checks, but a version
	// already swapped in is still confirmed or rolled back.
	off bool
	// repo is agent.json's update_repo, the only one releases come from.
	repo string

	// box guards next and ignored and wakes the loop.
	box  *mailbox.Box
	next *updater.Trigger
	// ignored is the server's update_repo once its settings asked for an
	// update from it and it is not repo; cleared when they name another.
	ignored string
}

// newSelfUpdate wraps the updater main started (updater.Start) and
// configured; it is nil when the binary could not be found.
func newSelfUpdate(cfg *config.Config, u *updater.Updater, log *slog.Logger) *selfUpdate {
	if u == nil {
		return nil
	}
	off := cfg.UpdateRepo == "off"
	if off {
		log.Info("self-update is off (update_repo \"off\")")
	}
	return &selfUpdate{u: u, log: log, off: off, box: mailbox.New(), repo: cfg.UpdateRepo}
}

// offer passes a settings payload's trigger, if it has one, to the loop.
func (s *selfUpdate) offer(set protocol.AgentSettings) {
	if s == nil || s.off {
		return
	}
	t, ok := updater.TriggerFor(set)
	var was, ignored string
	s.box.Do(func() {
		was = s.ignored
		switch repo := strings.TrimSpace(set.UpdateRepo); {
		case ok && !strings.EqualFold(repo, s.repo):
			s.ignored = repo
		case repo != s.ignored:
			// Kept while the server still names the refused repository:
			// an update_now is one-shot, and its refusal must outlast the
			// beat that follows it.
			s.ignored = ""
		}
		ignored = s.ignored
		if ok && (s.next == nil || t.Force || !s.next.Force) {
			s.next = &t
		}
	})
	if ignored != "" && ignored != was {
		s.log.Warn("the server names another update_repo; releases come from agent.json's", "server_repo", ignored, "update_repo", s.repo)
	}
	if ok {
		s.box.Wake.Notify()
	}
}

// confirm follows every successful heartbeat.
func (s *selfUpdate) confirm() {
	if s != nil {
		s.u.Confirm()
	}
}

// loop checks for updates as triggers arrive, until ctx ends (started by
// Agent.Run). The confirm deadline is not its business: it runs from the
// start (updater.Configure), before the agent gets this far.
func (s *selfUpdate) loop(ctx context.Context) {
	if s == nil || s.off {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.box.Wake:
			var t *updater.Trigger
			s.box.Do(func() { t, s.next = s.next, nil })
			if t == nil {
				continue
			}
			if !s.u.Due(*t, time.Now()) {
				if t.Force {
					s.log.Info("self-update: update_now ignored while the new version waits for its first successful heartbeat")
				}
				continue
			}
			err := s.u.Check(ctx, *t)
			switch {
			case err == nil || ctx.Err() != nil:
			case errors.Is(err, updater.ErrRefused):
				s.log.Warn("self-update refused", "err", err)
			default:
				s.log.Error("self-update check failed", "err", err)
			}
		}
	}
}

// events are the self-update conditions for a beat: a new version that
// failed its trial or was rolled back, reported for a day by the version
// that stayed; and the server's update_repo, refused since it asked for an
// update from it and not agent.json's.
func (s *selfUpdate) events(now int64) []protocol.HealthEvent {
	if s == nil {
		return nil
	}
	var out []protocol.HealthEvent
	if f, ok := s.u.LastFailure(time.Unix(now, 0)); ok {
		out = append(out, protocol.HealthEvent{
			EventType:       protocol.EventAgentUpdateFailed,
			Severity:        protocol.SeverityWarning,
			Message:         "self-update to " + f.Version + " failed; " + f.From + " keeps running: " + f.Reason,
			TriggeredAtUnix: f.AtUnix,
			Metadata:        map[string]string{"version": f.Version, "running": f.From},
		})
	}
	var ignored string
	s.box.Do(func() { ignored = s.ignored })
	if ignored != "" {
		out = append(out, protocol.HealthEvent{
			EventType: protocol.EventAgentUpdateRepo,
			Severity:  protocol.SeverityInfo,
			Message: "the server asks for self-updates from " + ignored + "; this node takes releases only from " + s.repo +
				" (agent.json update_repo; set it to " + ignored + " to allow that repository)",
			TriggeredAtUnix: now,
		})
	}
	return out
}
