package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
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
	u    *updater.Updater
	log  *slog.Logger
	wake chan struct{}

	mu   sync.Mutex
	next *updater.Trigger
}

// newSelfUpdate builds the updater and runs its start-up step first of
// all, which may execute the previous binary instead (updater.Boot). It is
// nil when agent.json turns self-update off or the binary cannot be found.
func newSelfUpdate(cfg *config.Config, version string, log *slog.Logger) *selfUpdate {
	if cfg.UpdateRepo == "off" {
		log.Info("self-update is off (update_repo \"off\")")
		return nil
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		log.Warn("self-update unavailable: the agent's binary cannot be found", "err", err)
		return nil
	}
	u := updater.New(updater.Options{
		Exe:            exe,
		StatePath:      filepath.Join(filepath.Dir(cfg.StatePath), "update.json"),
		Version:        version,
		APIURL:         cfg.UpdateAPIURL,
		Repo:           cfg.UpdateRepo,
		PublicKey:      cfg.UpdatePublicKey,
		ConfirmTimeout: cfg.UpdateConfirmTimeout,
		Log:            log,
	})
	u.Boot()
	return &selfUpdate{u: u, log: log, wake: make(chan struct{}, 1)}
}

// offer passes a settings payload's trigger, if it has one, to the loop.
func (s *selfUpdate) offer(set protocol.AgentSettings) {
	if s == nil {
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

// loop checks for updates as triggers arrive and rolls an unconfirmed new
// version back at its deadline, until ctx ends (started by Agent.Run).
func (s *selfUpdate) loop(ctx context.Context) {
	if s == nil {
		return
	}
	var expire <-chan time.Time
	if d, ok := s.u.ConfirmDeadline(); ok {
		t := time.NewTimer(time.Until(d))
		defer t.Stop()
		expire = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-expire:
			expire = nil
			s.u.Expire()
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
