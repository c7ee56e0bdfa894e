package sync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/openflare/openflare-agent/agent/crashpoint"
	"github.com/openflare/openflare-agent/agent/landing"
	"github.com/openflare/openflare-agent/agent/nginx"
	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/render"
	"github.com/openflare/openflare-agent/agent/state"
)

// Outcome is the result of one apply, as reported in the apply log.
type Outcome struct {
	Result  string // protocol.ResultSuccess, ResultWarning or ResultFailed
	Message string
	// Reloaded is false when the disk already held this version and nginx
	// was running, so nothing was touched.
	Reloaded bool
}

// apply lands a rendered version and makes nginx serve it, or keeps the node
// serving what it had (three-stage rollback, PROTOCOL 8.2 done more safely):
// validate a staged copy before touching live files, back up every path the
// apply will touch, swap, validate again, reload and confirm the reload.
func (s *Syncer) apply(ctx context.Context, ac *protocol.ActiveConfig, out *render.Output, startup bool) Outcome {
	target := landing.Ref{Version: ac.Version, Checksum: ac.Checksum}
	fail := func(err error) Outcome {
		return s.recoverFrom(ctx, nil, target, fmt.Errorf("apply version %s: %w", ac.Version, err))
	}
	// A problem of this node's nginx, not of the version: report it, but do
	// not blocklist the version (the operator installs the missing module
	// and restarts the agent, and the version applies).
	local := func(err error) Outcome {
		s.held = target
		cause := fmt.Errorf("apply version %s: %w", ac.Version, err)
		if s.Ctl != nil && s.Ctl.Caps != nil {
			// Nothing was touched; this only starts what can run (the
			// landed config, or the fallback, which needs no Lua).
			s.keepServing(ctx, false, cause, nil)
		}
		out := Outcome{Result: protocol.ResultFailed, Message: cause.Error() + " (not blocklisted: this node's nginx cannot run it until fixed and the agent restarted)"}
		s.recordFailure(out, false, target)
		return out
	}
	if s.Ctl == nil || s.Ctl.Caps == nil {
		return local(errors.New("nginx binary not usable: " + s.ProbeErr))
	}
	mainText, err := s.Adapter.Main(out.Main)
	if isLocal(err) {
		return local(err)
	}
	if err != nil {
		return fail(err)
	}
	// An earlier rollback that could not restore its backup left it on
	// disk: put it back before touching anything again.
	if _, err := s.restorePending(ctx); err != nil {
		return fail(err)
	}
	routeText := s.Adapter.Route(out.Route)
	set, err := landing.Plan(s.Paths, mainText, routeText, out.Files)
	if err != nil {
		return fail(err)
	}
	st := s.Store.Get()
	if startup && st.CurrentVersion == ac.Version && st.CurrentChecksum == ac.Checksum && s.Ctl.Running() && set.Unchanged() {
		return Outcome{Result: protocol.ResultSuccess, Message: "apply success"}
	}
	// nginx -t opens the logs and creates temp paths named in the config;
	// the workers must reach every file the sites use.
	if err := s.prepare(out.Main, false); isLocal(err) {
		return local(err)
	} else if err != nil {
		return fail(err)
	}
	began := time.Now()
	staged, err := landing.Stage(s.StagingDir, s.Paths, mainText, routeText, out.Files)
	if err == nil {
		err = s.Ctl.Test(ctx, staged)
	}
	s.Log.Debug("apply: staged copy validated", "version", ac.Version, "took", time.Since(began))
	os.RemoveAll(s.StagingDir)
	if err != nil {
		return fail(fmt.Errorf("staged validation: %w", err))
	}
	touched, err := set.Touched()
	if err != nil {
		return fail(err)
	}
	from := landing.Ref{Version: st.CurrentVersion, Checksum: st.CurrentChecksum}
	txn, err := landing.Begin(s.BackupDir, from, target, touched, set.Managed)
	if err != nil {
		return fail(err)
	}
	crashpoint.Hit("after-backup")
	s.Log.Debug("apply: backed up", "files", len(touched), "took", time.Since(began))
	err = set.Write(func() { crashpoint.Hit("mid-write") })
	crashpoint.Hit("after-swap")
	s.Log.Debug("apply: swapped in", "took", time.Since(began))
	if err == nil {
		err = s.Ctl.Test(ctx, s.Paths.Main)
		s.Log.Debug("apply: live config validated", "took", time.Since(began))
	}
	if err == nil {
		crashpoint.Hit("before-reload")
		err = s.activate(ctx)
		s.Log.Debug("apply: reload confirmed and probed", "took", time.Since(began))
	}
	if err != nil {
		return s.recoverFrom(ctx, txn, target, fmt.Errorf("apply version %s: %w", ac.Version, err))
	}
	// Record the new version before discarding the backup: a crash between
	// the two restores the old files and, from the manifest, the old state.
	if err := s.Store.Update(func(st *state.State) {
		st.CurrentVersion, st.CurrentChecksum = ac.Version, ac.Checksum
		st.BlockedVersion, st.BlockedChecksum, st.BlockedReason = "", "", ""
		st.LastError = ""
		st.OpenRestyStatus, st.OpenRestyMessage = protocol.StatusHealthy, ""
	}); err != nil {
		return s.recoverFrom(ctx, txn, target, fmt.Errorf("apply version %s: record state: %w", ac.Version, err))
	}
	crashpoint.Hit("after-state")
	if err := txn.Commit(); err != nil {
		s.Log.Warn("discard apply backup", "err", err)
	}
	return Outcome{Result: protocol.ResultSuccess, Message: "apply success", Reloaded: true}
}

// recoverFrom is stages 1–3 of the rollback. txn is nil when the live files
// were never touched. The node ends serving the previous config, or the
// safe fallback when nothing valid runs; a running nginx that still serves
// the last good config from memory is never replaced by the fallback. A
// cause on this node (isLocal: the data plane took the config but failed
// its self-probe) is still a failed apply, but the version is held rather
// than blocklisted.
func (s *Syncer) recoverFrom(ctx context.Context, txn *landing.Txn, target landing.Ref, cause error) Outcome {
	s.Log.Error("apply failed; rolling back", "version", target.Version, "err", cause)
	var rerr error
	if txn != nil {
		rerr = txn.Restore()
	}
	out := s.keepServing(ctx, txn != nil, cause, rerr)
	// The backup is the only copy of the last good files until it has been
	// put back: keep it for the next apply or boot to retry.
	if txn != nil && rerr == nil {
		if err := txn.Commit(); err != nil {
			s.Log.Warn("discard apply backup", "err", err)
		}
	}
	if isLocal(cause) {
		s.held = target
		out.Result = protocol.ResultFailed
		out.Message += " (not blocklisted: the cause is on this node; fix it, then restart the agent to retry this version)"
		s.recordFailure(out, false, target)
		return out
	}
	s.recordFailure(out, true, target)
	return out
}

// keepServing brings nginx back to a valid configuration after a failure.
func (s *Syncer) keepServing(ctx context.Context, touched bool, cause, restoreErr error) Outcome {
	usable := s.Ctl != nil && s.Ctl.Caps != nil
	if !touched && usable && s.Ctl.Running() {
		// The live files were never changed: nginx keeps what it serves.
		return Outcome{Result: protocol.ResultWarning, Message: fmt.Sprintf("apply failed, rolled back to previous config: %v", cause)}
	}
	if restoreErr == nil && usable && fileExists(s.Paths.Main) {
		err := s.Ctl.Test(ctx, s.Paths.Main)
		if err == nil {
			err = s.activate(ctx)
		}
		if err == nil {
			return Outcome{Result: protocol.ResultWarning, Message: fmt.Sprintf("apply failed, rolled back to previous config: %v", cause)}
		}
		restoreErr = err
	}
	if usable && s.Ctl.Running() {
		msg := fmt.Sprintf("apply failed: %v", cause)
		if restoreErr != nil {
			msg += fmt.Sprintf("; rollback recovery failed: %v", restoreErr)
		}
		return Outcome{Result: protocol.ResultFailed, Message: msg + "; nginx keeps serving its last loaded configuration"}
	}
	if err := s.startFallback(ctx); err != nil {
		return Outcome{Result: protocol.ResultFailed, Message: fmt.Sprintf("apply failed: %v; fallback runtime failed: %v", cause, err)}
	}
	return Outcome{Result: protocol.ResultWarning, Message: fmt.Sprintf("apply failed, but fallback runtime started: %v", cause)}
}

// startFallback writes and starts the safe fallback runtime (stage 2).
func (s *Syncer) startFallback(ctx context.Context) error {
	if s.Ctl == nil || s.Ctl.Caps == nil {
		return errors.New("nginx binary not usable: " + s.ProbeErr)
	}
	adapter := s.Adapter.ForFallback()
	mainText, err := adapter.Main(s.Fallback)
	if err != nil {
		return err
	}
	w, err := adapter.Worker(nginx.TemplateUser(s.Fallback))
	if err != nil {
		return err
	}
	// The fallback serves only a 503 and reads none of the tree: a parent
	// closed to the workers is reported, and the fallback starts anyway.
	if err := s.Tree.Prepare(w, false); err != nil && !errors.Is(err, landing.ErrWorkerAccess) {
		return err
	}
	if err := landing.FallbackPlan(s.Paths, mainText).Write(nil); err != nil {
		return err
	}
	if err := s.Ctl.Test(ctx, s.Paths.Main); err != nil {
		return err
	}
	s.Log.Warn("safe fallback runtime written: port 80 answers 503 until a valid version applies")
	if err := s.activate(ctx); err != nil {
		return err
	}
	// The node no longer serves the version state names: forget it, so the
	// server's version is applied again rather than taken as up to date.
	return s.Store.Update(func(st *state.State) { st.CurrentVersion, st.CurrentChecksum = "", "" })
}

// recordFailure records a failed apply; with block it is stage 3: the
// failed version+checksum is not fetched again until the server publishes
// something else (PROTOCOL 8.4).
func (s *Syncer) recordFailure(out Outcome, block bool, target landing.Ref) {
	status := protocol.StatusHealthy
	if out.Result == protocol.ResultFailed {
		status = protocol.StatusUnhealthy
	}
	err := s.Store.Update(func(st *state.State) {
		if block {
			st.BlockedVersion, st.BlockedChecksum, st.BlockedReason = target.Version, target.Checksum, out.Message
		}
		st.LastError = out.Message
		st.OpenRestyStatus, st.OpenRestyMessage = status, out.Message
	})
	if err != nil {
		s.Log.Error("record failed apply", "version", target.Version, "err", err)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
