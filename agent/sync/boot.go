package sync

import (
	"context"
	"fmt"

	"github.com/openflare/openflare-agent/agent/landing"
	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/state"
)

// Boot runs before the agent talks to the server (node autonomy): it rolls
// back an apply a crash interrupted, then makes sure nginx runs the last
// landed config. Upstream leaves a rebooted node dark until the server
// answers; this one serves.
func (s *Syncer) Boot(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	txn, err := landing.Pending(s.BackupDir)
	if err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	if txn != nil {
		s.Log.Warn("an apply was interrupted; restoring the previous config", "from", txn.From().Version)
		if err := txn.Restore(); err != nil {
			return fmt.Errorf("boot: restore interrupted apply: %w", err)
		}
		from := txn.From()
		if err := s.Store.Update(func(st *state.State) {
			st.CurrentVersion, st.CurrentChecksum = from.Version, from.Checksum
		}); err != nil {
			return fmt.Errorf("boot: %w", err)
		}
		if err := s.ensure(ctx, true); err != nil {
			return err
		}
		if err := txn.Commit(); err != nil {
			return err
		}
		s.Log.Info("local config ready", "version", s.Store.Get().CurrentVersion, "recovered", true)
		return nil
	}
	if err := s.ensure(ctx, false); err != nil {
		return err
	}
	s.Log.Info("local config ready", "version", s.Store.Get().CurrentVersion, "recovered", false)
	return nil
}

// ensure makes nginx run the landed config: started when not running,
// reloaded when reload is set. A landed config that no longer validates,
// with nothing running, gives way to the safe fallback.
func (s *Syncer) ensure(ctx context.Context, reload bool) error {
	if s.Ctl == nil || s.Ctl.Caps == nil {
		return fmt.Errorf("boot: nginx binary not usable: %s", s.ProbeErr)
	}
	if !fileExists(s.Paths.Main) {
		return nil
	}
	running := s.Ctl.Running()
	if running && !reload {
		return nil
	}
	if err := landing.MakeDirs(s.Paths); err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	err := s.Ctl.Test(ctx, s.Paths.Main)
	if err == nil {
		if err = s.Ctl.Activate(ctx); err == nil {
			s.Log.Info("nginx runs the last landed config", "version", s.Store.Get().CurrentVersion)
			return nil
		}
	}
	if running {
		return fmt.Errorf("boot: landed config does not load (nginx keeps serving from memory): %w", err)
	}
	s.Log.Error("landed config does not start; starting the safe fallback", "err", err)
	if ferr := s.startFallback(ctx); ferr != nil {
		return fmt.Errorf("boot: landed config failed (%v) and so did the fallback: %w", err, ferr)
	}
	return s.Store.Update(func(st *state.State) {
		st.OpenRestyStatus, st.OpenRestyMessage = protocol.StatusHealthy, "safe default fallback runtime started"
	})
}

// Restart restarts nginx (the one-shot restart_openresty_now), serialised
// with applies.
func (s *Syncer) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Ctl == nil || s.Ctl.Caps == nil {
		return fmt.Errorf("restart: nginx binary not usable: %s", s.ProbeErr)
	}
	if !fileExists(s.Paths.Main) {
		return fmt.Errorf("restart: no landed config at %s", s.Paths.Main)
	}
	return s.Ctl.Restart(ctx)
}
