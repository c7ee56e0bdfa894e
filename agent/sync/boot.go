package sync

import (
	"context"
	"errors"
	"fmt"

	"github.com/openflare/openflare-agent/agent/landing"
	"github.com/openflare/openflare-agent/agent/nginx"
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
	if s.Ctl != nil && s.Ctl.Caps != nil {
		// Data dirs an older release (or a umask) left closed to the
		// workers are repaired before nginx is started from them.
		if err := s.prepareLanded(true); err != nil {
			s.Log.Error("the nginx workers cannot use the agent's files", "err", err)
			if uerr := s.Store.Update(func(st *state.State) { st.LastError = err.Error() }); uerr != nil {
				s.Log.Error("record boot error", "err", uerr)
			}
		}
	}
	recovered, err := s.restorePending(ctx)
	if err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	if !recovered {
		wasRunning := s.Ctl != nil && s.Ctl.Caps != nil && s.Ctl.Running()
		if err := s.ensure(ctx, false); err != nil {
			return err
		}
		if wasRunning {
			// nginx outlived the previous agent: probe what it serves now.
			s.probe(ctx, s.Ctl.LogMark())
		}
	}
	s.Log.Info("local config ready", "version", s.Store.Get().CurrentVersion, "recovered", recovered)
	return nil
}

// restorePending puts back the backup an interrupted or failed apply left
// on disk, records its version as current again, and has nginx load it. It
// reports whether there was one.
func (s *Syncer) restorePending(ctx context.Context) (bool, error) {
	txn, err := landing.Pending(s.BackupDir)
	if err != nil || txn == nil {
		return false, err
	}
	from := txn.From()
	s.Log.Warn("an apply was interrupted or could not be rolled back; restoring the previous config", "from", from.Version)
	if err := txn.Restore(); err != nil {
		return false, fmt.Errorf("restore the previous config: %w", err)
	}
	if err := s.Store.Update(func(st *state.State) {
		st.CurrentVersion, st.CurrentChecksum = from.Version, from.Checksum
	}); err != nil {
		return false, err
	}
	if err := s.ensure(ctx, true); err != nil {
		return false, err
	}
	return true, txn.Commit()
}

// Down reports whether nginx should be running the landed config but is
// not (it crashed, was killed, or never came up).
func (s *Syncer) Down() bool {
	return s.Ctl != nil && s.Ctl.Caps != nil && fileExists(s.Paths.Main) && !s.Ctl.Running()
}

// Ensure starts nginx from the landed config if it is not running (or the
// fallback when that config no longer starts), serialised with applies.
func (s *Syncer) Ensure(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ensure(ctx, false)
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
	if err := s.prepareLanded(false); err != nil {
		// nginx is started all the same: the layout is complete, and a
		// node that serves part of its sites (the probe says which part
		// fails) beats a dark one.
		s.Log.Error("the nginx workers cannot use the agent's files", "err", err)
		if uerr := s.Store.Update(func(st *state.State) { st.LastError = err.Error() }); uerr != nil {
			s.Log.Error("record boot error", "err", uerr)
		}
	}
	err := s.Ctl.Test(ctx, s.Paths.Main)
	if err == nil {
		if err = s.activate(ctx); err == nil {
			s.Log.Info("nginx runs the last landed config", "version", s.Store.Get().CurrentVersion)
			return nil
		}
		if errors.Is(err, nginx.ErrProbe) {
			// nginx runs the landed config but cannot serve it fully; the
			// fallback would serve nothing at all. Reported as unhealthy.
			return fmt.Errorf("boot: %w", err)
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
	mark := s.Ctl.LogMark()
	err := s.Ctl.Restart(ctx)
	if err == nil {
		err = s.probe(ctx, mark)
	}
	if err != nil && !s.Ctl.Running() {
		// The old master is gone and the new one did not come up: never
		// leave the node dark.
		if eerr := s.ensure(ctx, false); eerr != nil {
			err = fmt.Errorf("%w; and starting again failed: %v", err, eerr)
		}
	}
	if err != nil {
		if uerr := s.Store.Update(func(st *state.State) { st.LastError = "nginx restart: " + err.Error() }); uerr != nil {
			s.Log.Error("record restart error", "err", uerr)
		}
	}
	return err
}
