package apply

import (
	"context"
	"errors"
	"fmt"
	"os"

	"openflare/agent/landing"
	"openflare/agent/protocol"
	"openflare/agent/state"
)

// unswap handles a version that failed validation after the swap: the
// backup goes back, and a running nginx, which never read the new files,
// keeps serving without a reload. With no nginx running, recovery is
// recoverFrom's (start the restored config, or the fallback).
func (e *Engine) unswap(ctx context.Context, txn *landing.Txn, target protocol.ConfigRef, cause error) Outcome {
	if !e.Nginx.Running() || txn.Restore() != nil {
		// Nothing serves, or the files are in an unknown state:
		// recoverFrom makes nginx run what can run.
		return e.recoverFrom(ctx, txn, target, cause)
	}
	if err := txn.Commit(); err != nil {
		e.Log.Warn("discard apply backup", "err", err)
	}
	return e.recoverFrom(ctx, nil, target, cause)
}

// recoverFrom is stages 1–3 of the rollback. txn is nil when the live files
// were never touched. The node ends serving the previous config, or the
// safe fallback when nothing valid runs; a running nginx that still serves
// the last good config from memory is never replaced by the fallback. A
// cause on this node (isLocal: the data plane took the config but failed
// its self-test) is still a failed apply, but the version is held rather
// than blocklisted.
func (e *Engine) recoverFrom(ctx context.Context, txn *landing.Txn, target protocol.ConfigRef, cause error) Outcome {
	e.Log.Error("apply failed; rolling back", "version", target.Version, "err", cause)
	var rerr error
	if txn != nil {
		rerr = txn.Restore()
	}
	out := e.keepServing(ctx, txn != nil, cause, rerr)
	// The backup is the only copy of the last good files until it has been
	// put back: keep it for the next apply or boot to retry.
	if txn != nil && rerr == nil {
		if err := txn.Commit(); err != nil {
			e.Log.Warn("discard apply backup", "err", err)
		}
	}
	if isLocal(cause) {
		e.held = target
		out.Result = protocol.ResultFailed
		out.Message += " (not blocklisted: the cause is on this node; fix it, then restart the agent to retry this version)"
		e.recordFailure(out, false, target)
		return out
	}
	e.recordFailure(out, true, target)
	return out
}

// keepServing brings nginx back to a valid configuration after a failure.
func (e *Engine) keepServing(ctx context.Context, touched bool, cause, restoreErr error) Outcome {
	if !touched && e.Nginx.Running() {
		// The live files were never changed: nginx keeps what it serves.
		return Outcome{Result: protocol.ResultWarning, Message: fmt.Sprintf("apply failed, rolled back to previous config: %v", cause)}
	}
	if restoreErr == nil && fileExists(e.Paths.Main) {
		err := e.Nginx.Test(ctx, e.Paths.Main)
		if err == nil {
			err = e.activate(ctx)
		}
		if err == nil {
			return Outcome{Result: protocol.ResultWarning, Message: fmt.Sprintf("apply failed, rolled back to previous config: %v", cause)}
		}
		restoreErr = err
	}
	if e.Nginx.Running() {
		msg := fmt.Sprintf("apply failed: %v", cause)
		if restoreErr != nil {
			msg += fmt.Sprintf("; rollback recovery failed: %v", restoreErr)
		}
		return Outcome{Result: protocol.ResultFailed, Message: msg + "; nginx keeps serving its last loaded configuration"}
	}
	if err := e.startFallback(ctx); err != nil {
		return Outcome{Result: protocol.ResultFailed, Message: fmt.Sprintf("apply failed: %v; fallback runtime failed: %v", cause, err)}
	}
	return Outcome{Result: protocol.ResultWarning, Message: fmt.Sprintf("apply failed, but fallback runtime started: %v", cause)}
}

// startFallback writes and starts the safe fallback runtime (stage 2).
func (e *Engine) startFallback(ctx context.Context) error {
	mainText, err := e.Nginx.FallbackMain(e.Fallback)
	if err != nil {
		return err
	}
	w, err := e.Nginx.Workers(e.Fallback, true)
	if err != nil {
		return err
	}
	// The fallback serves only a 503 and reads none of the tree: a parent
	// closed to the workers is reported, and the fallback starts anyway.
	if err := e.Tree.Prepare(w, false); err != nil && !errors.Is(err, landing.ErrWorkerAccess) {
		return err
	}
	if err := landing.FallbackPlan(e.Paths, mainText).Write(nil); err != nil {
		return err
	}
	if err := e.Nginx.Test(ctx, e.Paths.Main); err != nil {
		return err
	}
	e.Log.Warn("safe fallback runtime written: port 80 answers 503 until a valid version applies")
	if err := e.activate(ctx); err != nil {
		return err
	}
	// The node no longer serves the version state names: forget it, so the
	// server's version is applied again rather than taken as up to date.
	return e.Store.Update(func(st *state.State) { st.Current = protocol.ConfigRef{} })
}

// recordFailure records a failed apply; with block it is stage 3: the
// failed version+checksum is not fetched again until the server publishes
// something else (PROTOCOL 8.4).
func (e *Engine) recordFailure(out Outcome, block bool, target protocol.ConfigRef) {
	status := protocol.StatusHealthy
	if out.Result == protocol.ResultFailed {
		status = protocol.StatusUnhealthy
	}
	e.update(func(st *state.State) {
		if block {
			st.Blocked, st.BlockedReason = target, out.Message
		}
		st.LastError = out.Message
		st.OpenRestyStatus, st.OpenRestyMessage = status, out.Message
	})
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
