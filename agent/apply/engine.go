// Package apply keeps nginx in step with the server's active version, one
// apply at a time: target → fetch → render → land → activate → report
// (PROTOCOL 8). It reaches the server, nginx and the clock through small
// interfaces, so every decision can be tested without either.
package apply

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"openflare/agent/controlplane"
	"openflare/agent/landing"
	"openflare/agent/osuser"
	"openflare/agent/policy"
	"openflare/agent/protocol"
	"openflare/agent/render"
	"openflare/agent/state"
)

// Mode says why an apply runs.
type Mode int

const (
	// Normal follows a heartbeat or an active_config push.
	Normal Mode = iota
	// Startup follows the process's first successful heartbeat: it re-applies
	// even when state says the version is current.
	Startup
	// Force follows force_sync_config: the blocklist is cleared first.
	Force
)

func (m Mode) String() string {
	return [...]string{"normal", "startup", "force"}[m]
}

// ControlPlane is what an apply asks of the server (agent/controlplane).
type ControlPlane interface {
	// ActiveConfig fetches E4, handing each support file to files as it
	// arrives.
	ActiveConfig(ctx context.Context, files func(protocol.SupportFile) error) (protocol.ActiveConfig, error)
	ApplyLog(ctx context.Context, l *protocol.ApplyLog) (protocol.ApplyLogRecord, error)
}

// Nginx is the local data plane: agent/nginx's Node for a usable binary,
// its Unusable when there is none.
type Nginx interface {
	// Usable is nil when the binary runs, else why not.
	Usable() error
	// Main and FallbackMain adapt a rendered main config (the safe
	// fallback) to this binary and host; Route adapts a route config.
	Main(rendered string) (string, error)
	FallbackMain(text string) (string, error)
	Route(rendered string) string
	// Modules are the load_module paths Main adds (the Lua module).
	Modules() []string
	// Workers is who the workers of a main config run as.
	Workers(mainText string, fallback bool) (osuser.Identity, error)
	// Test validates a config file (nginx -t).
	Test(ctx context.Context, conf string) error
	// PolicyParse runs nginx -t on the template policy's copy of a main
	// config (policy.ParseCopy, laid out by landing.Set.WriteParseCopy).
	PolicyParse(ctx context.Context, conf string) error
	// Activate reloads the running master or starts one; Restart stops
	// and starts it.
	Activate(ctx context.Context) error
	Restart(ctx context.Context) error
	Running() bool
	// LogMark and SelfTest prove the data plane serves (agent/selftest):
	// SelfTest quotes the error-log lines written after the mark.
	LogMark() int64
	SelfTest(ctx context.Context, mark int64) error
	// Handover makes the workers a reload replaced stop accepting, once
	// SelfTest passed: until then clients may still get the old config.
	Handover(ctx context.Context)
}

// Engine applies versions. Calls are serialised.
type Engine struct {
	CP    ControlPlane
	Nginx Nginx
	Store *state.Store
	Paths landing.Paths
	// Tree is the directory layout the nginx workers must be able to use.
	Tree landing.Tree
	// Policy is what the node owner lets a server-sent config do.
	Policy policy.Policy
	// Fallback is the embedded fallback.conf text.
	Fallback  string
	BackupDir string
	// ParseDir is where the copy the template policy has nginx parse
	// is laid out, and removed after each apply.
	ParseDir string
	// StageDir is where a fetched version's support files wait on disk
	// (landing.Stage) until it is landed: emptied at each fetch, removed
	// after each apply and at boot.
	StageDir string
	// Resolve looks up an origin's host name as nginx will when it loads
	// the config (nil: only literal addresses are checked).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)

	Log *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// The events of an apply, each nil for nothing. In the order they
	// happen:
	//
	// OnLanded runs once a validated version's runtime files (the WAF
	// config among them) are in place, before the reload: what workers
	// derive from them (the geo snapshot) is ready when they start.
	OnLanded func(ctx context.Context)
	// OnReported runs right after an apply log was sent.
	OnReported func()
	// OnIPGroupsReferenced runs after a success or warning apply with the
	// IP groups the version references.
	OnIPGroupsReferenced func(ctx context.Context, ids []uint64)
	// OnPagesReferenced runs after a success or warning apply with the
	// Pages projects the version serves (none included: the list is the
	// whole set).
	OnPagesReferenced func(ctx context.Context, ids []uint64)

	mu sync.Mutex
	// held is a version this node cannot run for a reason of its own (no
	// Lua, no binary, workers that cannot read their files): not
	// blocklisted on disk, but not retried until the agent restarts.
	held protocol.ConfigRef
	// phases times the apply under way (nil between applies).
	phases *phases
	// renderFailed spaces out retries of a version that does not render:
	// fetching hundreds of MiB every beat to fail again helps nobody.
	renderFailed struct {
		ref protocol.ConfigRef
		at  time.Time
		err error
	}
	// fetchFailed backs off fetching after E4 failures (a reply too large,
	// cut, or not JSON): each costs the whole reply again.
	fetchFailed struct {
		ref protocol.ConfigRef // the target that failed (zero: none named)
		n   int
		at  time.Time
	}
	// replaced is when each recently running version was replaced, and
	// returns when an apply went back to one of them.
	replaced map[protocol.ConfigRef]time.Time
	returns  []time.Time
}

// flipFlop reports whether applying target now would be one return too
// many, forgetting what left the window.
func (e *Engine) flipFlop(target protocol.ConfigRef) bool {
	cut := e.now().Add(-applyWindow)
	for ref, at := range e.replaced {
		if !at.After(cut) {
			delete(e.replaced, ref)
		}
	}
	e.returns = slices.DeleteFunc(e.returns, func(at time.Time) bool { return !at.After(cut) })
	_, back := e.replaced[target]
	return back && len(e.returns) >= maxReturns
}

// noteReload records that from was replaced by to.
func (e *Engine) noteReload(from, to protocol.ConfigRef) {
	if e.replaced == nil {
		e.replaced = map[protocol.ConfigRef]time.Time{}
	}
	if _, back := e.replaced[to]; back {
		e.returns = append(e.returns, e.now())
	}
	if from != (protocol.ConfigRef{}) {
		e.replaced[from] = e.now()
	}
}

// renderRetry is how long a version that failed to render is left alone.
const renderRetry = time.Minute

// fetchBackoff is how long a normal apply waits after n failed fetches in
// a row: 2 s, doubling, at most 5 minutes.
func fetchBackoff(n int) time.Duration {
	return min(time.Second<<min(n, 10), 5*time.Minute)
}

// A server flip-flopping between versions would reload nginx on every
// beat: a normal apply that goes back to a version replaced less than
// applyWindow ago is a return, and at most maxReturns are made per window.
// New versions and startup or force applies are never held back.
const (
	applyWindow = time.Minute
	maxReturns  = 2
)

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// Apply brings the node to target (nil: the heartbeat named no active
// version). Errors are also recorded as last_error for the next beat.
func (e *Engine) Apply(ctx context.Context, target *protocol.ConfigRef, mode Mode) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	err := e.apply(ctx, normalise(target), mode)
	if err != nil {
		e.Log.Warn("sync failed", "mode", mode, "err", err)
		e.update(func(st *state.State) { st.LastError = err.Error() })
	}
	return err
}

// update records a state change; a failure to write it is logged (the
// state is then kept in memory only until the next write succeeds).
func (e *Engine) update(f func(*state.State)) {
	if err := e.Store.Update(f); err != nil {
		e.Log.Error("record state", "err", err)
	}
}

// normalise trims a beat's target; one that names no usable version (none,
// or a malformed one) is no target, and the fetched reply decides.
func normalise(t *protocol.ConfigRef) *protocol.ConfigRef {
	if t == nil {
		return nil
	}
	r := protocol.ConfigRef{Version: strings.TrimSpace(t.Version), Checksum: strings.TrimSpace(t.Checksum)}
	if r.Check() != nil {
		return nil
	}
	return &r
}

func (e *Engine) apply(ctx context.Context, target *protocol.ConfigRef, mode Mode) error {
	if mode == Force {
		e.held = protocol.ConfigRef{}
		if err := e.Store.Update(func(st *state.State) {
			st.Blocked, st.BlockedReason = protocol.ConfigRef{}, ""
		}); err != nil {
			return err
		}
	}
	if target == nil && mode == Normal {
		return nil
	}
	if target != nil && e.skip(*target, mode) {
		return nil
	}
	if rf := e.renderFailed; target != nil && mode == Normal && rf.ref == *target && e.now().Sub(rf.at) < renderRetry {
		return rf.err
	}
	if mode == Normal && target != nil && e.flipFlop(*target) {
		return fmt.Errorf("applies rate-limited: the server's version %s went back and forth %d times in the last %s; it waits", target.Version, len(e.returns), applyWindow)
	}
	if ff := e.fetchFailed; mode == Normal && ff.n > 0 && (target == nil || *target == ff.ref) && e.now().Before(ff.at.Add(fetchBackoff(ff.n))) {
		return fmt.Errorf("fetch active config: retried after %s (failed %d times)", fetchBackoff(ff.n), ff.n)
	}
	e.phases = newPhases(ctx, e.now)
	defer func() { e.phases = nil }()
	stage, err := landing.NewStage(e.StageDir)
	if err != nil {
		return fmt.Errorf("fetch active config: %w", err)
	}
	defer func() {
		if err := stage.Remove(); err != nil {
			e.Log.Warn("support-file stage", "err", err)
		}
	}()
	ac, err := e.CP.ActiveConfig(ctx, stage.Add)
	if err != nil && !controlplane.NoActiveVersion(err) {
		// A newly published version starts its own count.
		var ref protocol.ConfigRef
		if target != nil {
			ref = *target
		}
		if ref != e.fetchFailed.ref {
			e.fetchFailed.n = 0
		}
		e.fetchFailed.ref, e.fetchFailed.n, e.fetchFailed.at = ref, e.fetchFailed.n+1, e.now()
	} else {
		e.fetchFailed.n = 0
	}
	if err != nil {
		if target == nil && controlplane.NoActiveVersion(err) {
			// No active version on the server: keep serving what we have.
			return nil
		}
		return fmt.Errorf("fetch active config: %w", err)
	}
	e.phases.mark("fetch")
	fetched := protocol.ConfigRef{Version: ac.Version, Checksum: ac.Checksum}
	if err := fetched.Check(); err != nil {
		return fmt.Errorf("fetch active config: reply names no usable version: %w", err)
	}
	if e.skip(fetched, mode) {
		return nil
	}
	out, err := render.Config(ac.SourceConfigJSON, stage.Files())
	if err != nil {
		err = fmt.Errorf("render version %s: %w", ac.Version, err)
		e.renderFailed.ref, e.renderFailed.at, e.renderFailed.err = fetched, e.now(), err
		return err
	}
	e.phases.mark("render")
	prev := e.Store.Get().Current
	outcome := e.land(ctx, fetched, out, mode != Normal)
	if outcome.Reloaded && prev != fetched {
		e.noteReload(prev, fetched)
	}
	if sum := out.Checksum(); sum != ac.Checksum {
		e.Log.Warn("rendered checksum differs from the server's; applied anyway", "version", ac.Version, "rendered", sum, "server", ac.Checksum)
		if outcome.Result == protocol.ResultSuccess {
			outcome.Message += fmt.Sprintf(" (rendered checksum %s differs from server checksum %s)", sum, ac.Checksum)
		}
	}
	e.Log.Info("apply finished", "version", ac.Version, "result", outcome.Result, "reloaded", outcome.Reloaded, "message", outcome.Message, "phases", e.phases.String())
	var reportErr error
	if outcome.Result != protocol.ResultSuccess || prev != fetched {
		reportErr = e.report(ctx, fetched, out, outcome)
		// The next status follows the apply log at once, so the control
		// plane shows the node on its new version within one round trip.
		if e.OnReported != nil {
			e.OnReported()
		}
	}
	// The IP groups are synced even if the report failed: without them a
	// referenced deny list is off.
	if outcome.Result != protocol.ResultFailed && e.OnIPGroupsReferenced != nil {
		e.OnIPGroupsReferenced(ctx, out.IPGroups)
	}
	// Pages content is deployed apart from the config: a project that
	// fails is reported alone and holds up neither the apply nor the others.
	if outcome.Result != protocol.ResultFailed && e.OnPagesReferenced != nil {
		ids, err := render.PagesProjectIDs(ac.SourceConfigJSON)
		if err != nil {
			e.Log.Warn("pages projects of the version", "version", ac.Version, "err", err)
		}
		e.OnPagesReferenced(ctx, ids)
	}
	if reportErr != nil {
		return reportErr
	}
	if outcome.Result != protocol.ResultSuccess {
		return errors.New(outcome.Message)
	}
	return nil
}

// skip reports whether nothing needs doing for ref: it is held or blocked,
// or (in normal mode) already current. Being current also clears a stale
// block and the last error.
func (e *Engine) skip(ref protocol.ConfigRef, mode Mode) bool {
	if e.held == ref {
		return true
	}
	st := e.Store.Get()
	if mode != Force && st.Blocked == ref {
		e.Log.Debug("active version is blocked locally; not fetching", "version", ref.Version)
		return true
	}
	if mode == Normal && st.Current == ref {
		if st.LastError != "" || st.Blocked != (protocol.ConfigRef{}) {
			e.update(func(st *state.State) {
				st.LastError = ""
				st.Blocked, st.BlockedReason = protocol.ConfigRef{}, ""
			})
		}
		return true
	}
	return false
}

// report sends the apply log (E5).
func (e *Engine) report(ctx context.Context, ref protocol.ConfigRef, out *render.Output, o Outcome) error {
	_, err := e.CP.ApplyLog(ctx, &protocol.ApplyLog{
		NodeID:              e.Store.Get().NodeID,
		Version:             ref.Version,
		Result:              o.Result,
		Message:             o.Message,
		Checksum:            ref.Checksum,
		MainConfigChecksum:  out.MainChecksum(),
		RouteConfigChecksum: out.RouteChecksum(),
		SupportFileCount:    len(out.Files),
	})
	if err != nil {
		return fmt.Errorf("report apply of %s: %w", ref.Version, err)
	}
	return nil
}
