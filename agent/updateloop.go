package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/openflare/openflare-agent/agent/config"
	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/updater"
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
	off  bool
	wake chan struct{}

	mu   sync.Mutex
	next *updater.Trigger
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
	return &selfUpdate{u: u, log: log, off: off, wake: make(chan struct{}, 1)}
}

// offer passes a settings payload's trigger, if it has one, to the loop.
func (s *selfUpdate) offer(set protocol.AgentSettings) {
	if s == nil || s.off {
		return
	}
	t, ok := updater.TriggerFor(set)
	if !ok {
		return
	}
	s.mu.Lock()
	if s.next == nil || t.Force || !s.next.Force {
		s.next = &t
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
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
		case <-s.wake:
			s.mu.Lock()
			t := s.next
			s.next = nil
			s.mu.Unlock()
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

// events is the agent_update_failed condition for a beat: a new version
// that failed its trial or was rolled back, reported for a day by the
// version that stayed.
func (s *selfUpdate) events(now int64) []protocol.HealthEvent {
	if s == nil {
		return nil
	}
	f, ok := s.u.LastFailure(time.Unix(now, 0))
	if !ok {
		return nil
	}
	return []protocol.HealthEvent{{
		EventType:       "agent_update_failed",
		Severity:        "warning",
		Message:         "self-update to " + f.Version + " failed; " + f.From + " keeps running: " + f.Reason,
		TriggeredAtUnix: f.AtUnix,
		Metadata:        map[string]string{"version": f.Version, "running": f.From},
	}}
}
