package apply

import (
	"context"
	"errors"
	"os"
	"syscall"

	"openflare/agent/landing"
	"openflare/agent/nginx"
	"openflare/agent/osuser"
	"openflare/agent/state"
)

// isLocal reports whether err is a problem of this node rather than of the
// version being applied: no usable nginx binary, one that cannot load Lua,
// a configured worker user that does not exist, workers that cannot reach
// the agent's files, a data plane that fails its self-test, or a disk
// that is full, failing or read-only. Such a version is held until the
// agent restarts, never blocklisted.
func isLocal(err error) bool {
	return errors.Is(err, nginx.ErrUnusable) || errors.Is(err, nginx.ErrNoLua) ||
		errors.Is(err, osuser.ErrUnknownUser) || errors.Is(err, landing.ErrWorkerAccess) ||
		errors.Is(err, landing.ErrSymlink) ||
		errors.Is(err, nginx.ErrSelfTest) ||
		// A full, failing or read-only disk is the node's, not the version's.
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EROFS)
}

// activate makes nginx run the live config (reload, or start) and proves
// that it serves with it: the self-test is answered by a worker of the new
// generation.
func (e *Engine) activate(ctx context.Context) error {
	mark := e.Nginx.LogMark()
	if err := e.Nginx.Activate(ctx); err != nil {
		return err
	}
	e.phases.mark("reload")
	return e.selfTest(ctx, mark)
}

// selfTest runs the self-test, hands the listeners over to the new
// workers when it passed, and records its verdict: while it fails, the
// node reports unhealthy with the reason (beats and `status`).
func (e *Engine) selfTest(ctx context.Context, mark int64) error {
	err := e.Nginx.SelfTest(ctx, mark)
	e.phases.mark("selftest")
	if err == nil {
		e.Nginx.Handover(ctx)
		e.phases.mark("handover")
	}
	msg := ""
	if err != nil {
		msg = err.Error()
		e.Log.Error("data plane failed its self-test", "err", err)
	}
	e.update(func(st *state.State) { st.SelfTestError = msg })
	return err
}

// prepare lays out the agent's directories for the workers that rendered
// (a main config as the server renders it, before adaptation) gets, and
// records who they are and why.
func (e *Engine) prepare(rendered string) error {
	w, err := e.Nginx.Workers(rendered, false)
	if err != nil {
		return err
	}
	if err := e.Tree.Prepare(w, false); err != nil {
		return err
	}
	if desc := w.String() + ": " + w.Why; e.Store.Get().Workers != desc {
		e.Log.Info("nginx worker identity", "workers", w.String(), "why", w.Why)
		e.update(func(st *state.State) { st.Workers = desc })
	}
	return nil
}

// prepareLanded lays out the directories for the workers the landed main
// config names (its user line is already the agent's decision).
func (e *Engine) prepareLanded(repair bool) error {
	text, err := os.ReadFile(e.Paths.Main)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	w, werr := e.Nginx.Workers(string(text), false)
	if werr != nil {
		// nginx_user no longer exists: lay the tree out for the system
		// fallback user, and still report the problem.
		if w, err = e.Nginx.Workers(string(text), true); err != nil {
			return errors.Join(werr, err)
		}
	}
	return errors.Join(werr, e.Tree.Prepare(w, repair))
}
