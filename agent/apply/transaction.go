package apply

import (
	"context"
	"fmt"
	"net/netip"
	"os"

	"openflare/agent/landing"
	"openflare/agent/policy"
	"openflare/agent/protocol"
	"openflare/agent/render"
	"openflare/agent/state"
	"openflare/agent/testhook"
)

// Outcome is the result of one apply, as reported in the apply log.
type Outcome struct {
	Result  string // protocol.ResultSuccess, ResultWarning or ResultFailed
	Message string
	// Reloaded is false when the disk already held this version and nginx
	// was running, so nothing was touched.
	Reloaded bool
}

// land is the apply's transaction: it lands a rendered version and makes
// nginx serve it, or keeps the node serving what it had (the three-stage
// rollback, PROTOCOL 8.2 done more safely, rollback.go): back up every
// path the apply will touch, swap, validate, reload, and prove with the
// self-test that the workers serve.
//
// What nginx reads is the renderer's text rewritten in these steps, in
// this order, and nowhere else (docs/ARCHITECTURE.md, "What nginx reads"):
//
//  1. render.Config: main and route text, every path of the node one of
//     landing's placeholders (__OPENFLARE_*__)
//  2. policy.Confine: a cache directory outside the tree becomes one
//     beside the agent's own (a placeholder), before the policy reads it
//  3. Nginx.Main, Nginx.Route (agent/nginx's Adapter): the text fitted to
//     the installed binary and host (protocols, modules, the user line, a
//     default TLS server)
//  4. landing.Plan: the placeholders become this node's paths (landing's
//     one placeholder table, which the agent's Lua shares), and the main
//     config gets the node's http-level lines and the self-test's server
//     block (agent/selftest)
//  5. landing.Set's stamp: the self-test block gets its generation, a hash
//     of everything that lands
//
// The template policy's nginx parse (policyParse) reads a copy of step 3's
// text, its placeholders pointed into a scratch directory: nothing of it
// lands.
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
		o.Message += " (held until the agent restarts; template_policy, allowed_paths and allow_link_local_origins in agent.json decide what a server config may do)"
		e.recordFailure(o, false, target)
		return o
	}
	rendered := e.Policy.Confine(out.Main)
	if err := e.Policy.Check(rendered, out.Route); err != nil {
		return refuse(err)
	}
	if err := e.Policy.CheckOrigins(rendered, out.Origins, func(host string) ([]netip.Addr, error) {
		if e.Resolve == nil {
			return nil, nil
		}
		return e.Resolve(ctx, host)
	}); err != nil {
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
	e.phases.mark("plan")
	// The second guard, before anything of the version is landed or read
	// by nginx: nginx itself must find no directive of reach where the
	// policy's reader accepted none. A copy nginx fails to parse for
	// another reason is a version nginx finds invalid, as a failed
	// nginx -t: blocklisted.
	if refusal, err := e.policyParse(ctx, set, mainText, routeText); refusal != nil {
		return refuse(refusal)
	} else if isLocal(err) {
		return local(err)
	} else if err != nil {
		return fail(err)
	}
	e.phases.mark("parse")
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
	touched, err := set.Touched()
	if err != nil {
		return fail(err)
	}
	txn, err := landing.Begin(e.BackupDir, st.Current, target, touched, set.Managed)
	if err != nil {
		return fail(err)
	}
	testhook.Crash("after-backup")
	e.phases.mark("backup")
	e.Log.Debug("apply: backed up", "version", target.Version, "files", len(touched))
	// What nginx reads at load goes in first and is tested; what the
	// workers read while serving follows only once the test passed.
	err = set.WriteConfig(func() { testhook.Crash("mid-write") })
	testhook.Crash("after-swap")
	e.phases.mark("land")
	if err == nil {
		if err = e.Nginx.Test(ctx, e.Paths.Main); err != nil {
			return e.unswap(ctx, txn, target, fmt.Errorf("apply version %s: %w", target.Version, err))
		}
		e.phases.mark("test")
		err = set.WriteRuntime()
	}
	if err == nil && e.OnLanded != nil {
		e.OnLanded(ctx)
	}
	e.phases.mark("runtime")
	if err == nil {
		testhook.Crash("before-reload")
		err = e.activate(ctx)
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

// policyParse is the template policy's nginx parse: nginx reads a copy of
// the adapted main config (policy.ParseCopy, laid out by
// landing.Set.WriteParseCopy). refusal is the policy's verdict, err
// nginx's (the config is invalid) or a failure to run the parse at all.
func (e *Engine) policyParse(ctx context.Context, set *landing.Set, mainText, routeText string) (refusal, err error) {
	if e.Policy.Trusted {
		return nil, nil
	}
	text, err := e.Policy.ParseCopy(mainText, e.Nginx.Modules())
	if err != nil {
		return err, nil
	}
	conf, err := set.WriteParseCopy(e.Paths, e.ParseDir, text, routeText)
	defer os.RemoveAll(e.ParseDir)
	if err != nil {
		return nil, err
	}
	if err := e.Nginx.PolicyParse(ctx, conf); err != nil {
		if refusal := policy.ParseRefusal(err); refusal != nil {
			return refusal, nil
		}
		return nil, err
	}
	return nil, nil
}
