package sync

import (
	"context"
	"errors"
	"os"

	"github.com/openflare/openflare-agent/agent/landing"
	"github.com/openflare/openflare-agent/agent/nginx"
	"github.com/openflare/openflare-agent/agent/osuser"
	"github.com/openflare/openflare-agent/agent/state"
)

// isLocal reports whether err is a problem of this node rather than of the
// version being applied: the nginx binary cannot load Lua, the configured
// worker user does not exist, the workers cannot reach the agent's files,
// or the data plane fails its self-probe. Such a version is held until the
// agent restarts, never blocklisted.
func isLocal(err error) bool {
	return errors.Is(err, nginx.ErrNoLua) || errors.Is(err, osuser.ErrUnknownUser) ||
		errors.Is(err, landing.ErrWorkerAccess) || errors.Is(err, nginx.ErrProbe)
}

// activate makes nginx run the live config (reload, or start) and proves
// that it serves with it: the self-probe runs in a worker of the new
// generation.
func (s *Syncer) activate(ctx context.Context) error {
	mark := s.Ctl.LogMark()
	if err := s.Ctl.Activate(ctx); err != nil {
		return err
	}
	return s.probe(ctx, mark)
}

// probe runs the self-probe and records its verdict: while it fails, the
// node reports unhealthy with the reason (beats and `status`).
func (s *Syncer) probe(ctx context.Context, mark int64) error {
	err := s.Ctl.SelfTest(ctx, mark)
	msg := ""
	if err != nil {
		msg = err.Error()
		s.Log.Error("data plane failed its self-probe", "err", err)
	}
	if uerr := s.Store.Update(func(st *state.State) { st.ProbeError = msg }); uerr != nil {
		s.Log.Error("record self-probe result", "err", uerr)
	}
	return err
}

// prepare lays out the agent's directories for the workers that rendered
// (a main config as the server renders it, before adaptation) gets, and
// records who they are and why.
func (s *Syncer) prepare(rendered string, repair bool) error {
	w, err := s.Adapter.Worker(nginx.TemplateUser(rendered))
	if err != nil {
		return err
	}
	if err := s.Tree.Prepare(w, repair); err != nil {
		return err
	}
	desc := w.String() + ": " + w.Why
	if s.Store.Get().Workers != desc {
		s.Log.Info("nginx worker identity", "workers", w.String(), "why", w.Why)
		if err := s.Store.Update(func(st *state.State) { st.Workers = desc }); err != nil {
			s.Log.Error("record worker identity", "err", err)
		}
	}
	return nil
}

// prepareLanded lays out the directories for the workers the landed main
// config names (its user line is already the agent's decision).
func (s *Syncer) prepareLanded(repair bool) error {
	text, err := os.ReadFile(s.Paths.Main)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	user := nginx.TemplateUser(string(text))
	w, werr := s.Adapter.Worker(user)
	if werr != nil {
		// nginx_user no longer exists: lay the tree out for the system
		// fallback user, and still report the problem.
		if w, err = s.Adapter.ForFallback().Worker(user); err != nil {
			return errors.Join(werr, err)
		}
	}
	return errors.Join(werr, s.Tree.Prepare(w, repair))
}
