package apply

import (
	"context"
	"errors"
	"fmt"
	"os"

	"openflare/agent/landing"
	"openflare/agent/nginx"
	"openflare/agent/protocol"
	"openflare/agent/state"
)

// Boot runs before the agent talks to the server (node autonomy): it
// repairs the tree for the workers, rolls back an apply a crash
// interrupted, then makes sure nginx runs the last landed config and
// self-tests it. Upstream leaves a rebooted node dark until the server
// answers; this one serves.
func (e *Engine) Boot(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	// Support files a crash left staged are no version's any more.
	if err := os.RemoveAll(e.StageDir); err != nil {
		e.Log.Warn("clear the support-file stage", "err", err)
	}
	if e.Nginx.Usable() == nil {
		// Data dirs an older release (or a umask) left closed to the
		// workers are repaired before nginx is started from them.
		if err := e.prepareLanded(true); err != nil {
			e.Log.Error("the nginx workers cannot use the agent's files", "err", err)
			e.update(func(st *state.State) { st.LastError = err.Error() })
		}
	}
	recovered, err := e.restoreLeftover(ctx)
	if err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	if !recovered {
		wasRunning := e.Nginx.Running()
		if err := e.ensure(ctx, false); err != nil {
			return err
		}
		if wasRunning {
			// nginx outlived the previous agent: self-test what it serves now.
			e.selfTest(ctx, e.Nginx.LogMark())
		}
	}
	e.Log.Info("local config ready", "version", e.Store.Get().Current.Version, "recovered", recovered)
	return nil
}

// restoreLeftover puts back the backup an interrupted or failed apply left
// on disk, records its version as current again, and has nginx load it. It
// reports whether there was one.
func (e *Engine) restoreLeftover(ctx context.Context) (bool, error) {
	txn, err := landing.Leftover(e.BackupDir, e.Paths.Managed())
	if errors.Is(err, landing.ErrQuarantined) {
		e.Log.Warn("a damaged apply backup was set aside, not restored", "err", err)
		return false, nil
	}
	if err != nil || txn == nil {
		return false, err
	}
	from := txn.From()
	e.Log.Warn("an apply was interrupted or could not be rolled back; restoring the previous config", "from", from.Version)
	if err := txn.Restore(); err != nil {
		return false, fmt.Errorf("restore the previous config: %w", err)
	}
	if err := e.Store.Update(func(st *state.State) { st.Current = from }); err != nil {
		return false, err
	}
	if err := e.ensure(ctx, true); err != nil {
		return false, err
	}
	return true, txn.Commit()
}

// Down reports whether nginx should be running the landed config but is
// not (it crashed, was killed, or never came up).
func (e *Engine) Down() bool {
	return e.Nginx.Usable() == nil && fileExists(e.Paths.Main) && !e.Nginx.Running()
}

// Ensure starts nginx from the landed config if it is not running (or the
// fallback when that config no longer starts), serialised with applies.
func (e *Engine) Ensure(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ensure(ctx, false)
}

// ensure makes nginx run the landed config: started when not running,
// reloaded when reload is set. A landed config that no longer validates,
// with nothing running, gives way to the safe fallback.
func (e *Engine) ensure(ctx context.Context, reload bool) error {
	if err := e.Nginx.Usable(); err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	if !fileExists(e.Paths.Main) {
		return nil
	}
	running := e.Nginx.Running()
	if running && !reload {
		return nil
	}
	if err := e.prepareLanded(false); err != nil {
		// nginx is started all the same: the layout is complete, and a
		// node that serves part of its sites (the self-test says which part
		// fails) beats a dark one.
		e.Log.Error("the nginx workers cannot use the agent's files", "err", err)
		e.update(func(st *state.State) { st.LastError = err.Error() })
	}
	err := e.Nginx.Test(ctx, e.Paths.Main)
	if err == nil {
		if err = e.activate(ctx); err == nil {
			e.Log.Info("nginx runs the last landed config", "version", e.Store.Get().Current.Version)
			return nil
		}
		if errors.Is(err, nginx.ErrSelfTest) {
			// nginx runs the landed config but cannot serve it fully; the
			// fallback would serve nothing at all. Reported as unhealthy.
			return fmt.Errorf("boot: %w", err)
		}
	}
	if running {
		return fmt.Errorf("boot: landed config does not load (nginx keeps serving from memory): %w", err)
	}
	e.Log.Error("landed config does not start; starting the safe fallback", "err", err)
	if ferr := e.startFallback(ctx); ferr != nil {
		return fmt.Errorf("boot: landed config failed (%v) and so did the fallback: %w", err, ferr)
	}
	return e.Store.Update(func(st *state.State) {
		st.OpenRestyStatus, st.OpenRestyMessage = protocol.StatusHealthy, "safe default fallback runtime started"
	})
}

// Restart restarts nginx (the one-shot restart_openresty_now), serialised
// with applies. A failure is kept as RestartError, which marks the node
// unhealthy until a restart succeeds: the server asked for one, and the
// next beat must not say all is well because nginx still answers.
func (e *Engine) Restart(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	err := e.Nginx.Usable()
	if err == nil && !fileExists(e.Paths.Main) {
		err = fmt.Errorf("no landed config at %s", e.Paths.Main)
	}
	if err == nil {
		mark := e.Nginx.LogMark()
		if err = e.Nginx.Restart(ctx); err == nil {
			err = e.selfTest(ctx, mark)
		}
		if err != nil && !e.Nginx.Running() {
			// The old master is gone and the new one did not come up:
			// never leave the node dark.
			if eerr := e.ensure(ctx, false); eerr != nil {
				err = fmt.Errorf("%w; and starting again failed: %v", err, eerr)
			}
		}
	}
	msg := ""
	if err != nil {
		msg = "nginx restart failed: " + err.Error()
	}
	e.update(func(st *state.State) { st.RestartError = msg })
	return err
}
