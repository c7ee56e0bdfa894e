package apply

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/openflare/openflare-agent/agent/landing"
	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/render"
	"github.com/openflare/openflare-agent/agent/state"
	"github.com/openflare/openflare-agent/agent/testhook"
)

// Outcome is the result of one apply, as reported in the apply log.
type Outcome struct {
	Result  string // protocol.ResultSuccess, ResultWarning or ResultFailed
	Message string
	// Reloaded is false when the disk already held this version and nginx
	// was running, so nothing was touched.
	Reloaded bool
}

// land lands a rendered version and makes nginx serve it, or keeps the node
// serving what it had (three-stage rollback, PROTOCOL 8.2 done more safely):
// back up every path the apply will touch, swap, validate, reload, and
// prove with the self-probe that the workers serve.
func (e *Engine) land(ctx context.Context, target protocol.ConfigRef, out *render.Output, startup bool) Outcome {
	fail := func(err error) Outcome {
		return e.recoverFrom(ctx, nil, target, fmt.Errorf("apply version %s: %w", target.Version, err))
	}
	// A problem of this node, not of the version: report it, but do not
	// blocklist the version (the operator fixes the node and restarts the
	// agent, and the version applies).
	local := func(err error) Outcome {
		e.held = target
		cause := fmt.Errorf("apply version %s: %w", target.Version, err)
		// Nothing was touched; this only starts what can run (the landed
		// config, or the fallback, which needs no Lua).
		e.keepServing(ctx, false, cause, nil)
		o := Outcome{Result: protocol.ResultFailed, Message: cause.Error() + " (not blocklisted: this node's nginx cannot run it until fixed and the agent restarted)"}
		e.recordFailure(o, false, target)
		return o
	}
	// The owner's policy, before anything reaches nginx (nginx -t runs as
	// root and executes init Lua), on the text as rendered and as adapted:
	// adapting rewrites whole lines, which must not change what nginx reads.
	// A refusal is held, not blocklisted: the owner may change the policy
	// and restart the agent.
	refuse := func(err error) Outcome {
		e.held = target
		cause := fmt.Errorf("apply version %s: %w", target.Version, err)
		e.Log.Error("version refused by the template policy", "version", target.Version, "err", err)
		o := e.keepServing(ctx, false, cause, nil)
		o.Message += " (held until the agent restarts; template_policy and allowed_paths in agent.json decide what a server config may do)"
		e.recordFailure(o, false, target)
		return o
	}
	rendered := e.Policy.Confine(out.Main)
	if err := e.Policy.Check(rendered, out.Route); err != nil {
		return refuse(err)
	}
	mainText, err := e.Nginx.Main(rendered)
	if isLocal(err) {
		return local(err)
	}
	if err != nil {
		return fail(err)
	}
	if err := e.Policy.CheckAdapted(mainText, e.Nginx.Modules()); err != nil {
		return refuse(err)
	}
	// An earlier rollback that could not restore its backup left it on
	// disk: put it back before touching anything again.
	if _, err := e.restoreLeftover(ctx); err != nil {
		return fail(err)
	}
	routeText := e.Nginx.Route(out.Route)
	set, err := landing.Plan(e.Paths, mainText, routeText, out.Files)
	if err != nil {
		return fail(err)
	}
	st := e.Store.Get()
	if startup && st.Current == target && e.Nginx.Running() && set.Unchanged() {
		return Outcome{Result: protocol.ResultSuccess, Message: "apply success"}
	}
	// nginx -t opens the logs and creates temp paths named in the config;
	// the workers must reach every file the sites use.
	if err := e.prepare(out.Main); isLocal(err) {
		return local(err)
	} else if err != nil {
		return fail(err)
	}
	// One validation, of the live tree, after the swap: it reads exactly
	// what the reload will (the same include graph, absolute paths and
	// certificates), which a staged copy elsewhere cannot promise. It is as
	// safe as validating first: nginx reads its configuration files only
	// when started or signalled, and the agent alone signals it, so until
	// the reload the running workers serve the previous config from
	// memory. The files workers read while serving (Lua, the WAF JSON,
	// error pages, the service worker) are written only after the test
	// passed (Set.WriteConfig, then WriteRuntime), so no worker reads a
	// rejected version's. A failed validation restores the backup, and a
	// crash in between restores it at the next start. Should nginx
	// still refuse what -t accepted (a file changed in between, a port
	// taken), the master keeps its workers and logs why: reload sees that,
	// and the backup goes back the same way.
	began := e.now()
	e.Log.Debug("apply: planned", "version", target.Version)
	touched, err := set.Touched()
	if err != nil {
		return fail(err)
	}
	txn, err := landing.Begin(e.BackupDir, st.Current, target, touched, set.Managed)
	if err != nil {
		return fail(err)
	}
	testhook.Crash("after-backup")
	e.Log.Debug("apply: backed up", "version", target.Version, "files", len(touched), "took", e.now().Sub(began))
	// What nginx reads at load goes in first and is tested; what the
	// workers read while serving follows only once the test passed.
	err = set.WriteConfig(func() { testhook.Crash("mid-write") })
	testhook.Crash("after-swap")
	e.Log.Debug("apply: swapped in", "took", e.now().Sub(began))
	if err == nil {
		if err = e.Nginx.Test(ctx, e.Paths.Main); err != nil {
			return e.unswap(ctx, txn, target, fmt.Errorf("apply version %s: %w", target.Version, err))
		}
		e.Log.Debug("apply: validated", "took", e.now().Sub(began))
		err = set.WriteRuntime()
	}
	if err == nil && e.Landed != nil {
		e.Landed(ctx)
	}
	if err == nil {
		testhook.Crash("before-reload")
		err = e.activate(ctx)
		e.Log.Debug("apply: reload confirmed and probed", "took", e.now().Sub(began))
	}
	if err != nil {
		return e.recoverFrom(ctx, txn, target, fmt.Errorf("apply version %s: %w", target.Version, err))
	}
	// Record the new version before discarding the backup: a crash between
	// the two restores the old files and, from the manifest, the old state.
	if err := e.Store.Update(func(st *state.State) {
		st.Current = target
		st.Blocked, st.BlockedReason = protocol.ConfigRef{}, ""
		st.LastError = ""
		st.OpenRestyStatus, st.OpenRestyMessage = protocol.StatusHealthy, ""
	}); err != nil {
		return e.recoverFrom(ctx, txn, target, fmt.Errorf("apply version %s: record state: %w", target.Version, err))
	}
	testhook.Crash("after-state")
	if err := txn.Commit(); err != nil {
		e.Log.Warn("discard apply backup", "err", err)
	}
	return Outcome{Result: protocol.ResultSuccess, Message: "apply success", Reloaded: true}
}

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
// its self-probe) is still a failed apply, but the version is held rather
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
