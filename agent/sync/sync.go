// Package sync keeps nginx in step with the server's active version, one
// apply at a time: target → fetch → render → land → activate → report
// (PROTOCOL 8).
package sync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	gosync "sync"
	"time"

	"github.com/openflare/openflare-agent/agent/controlplane"
	"github.com/openflare/openflare-agent/agent/landing"
	"github.com/openflare/openflare-agent/agent/nginx"
	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/render"
	"github.com/openflare/openflare-agent/agent/state"
)

// Mode says why a sync runs.
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

// Syncer applies versions. Sync calls are serialised.
type Syncer struct {
	CP      *controlplane.Client
	Store   *state.Store
	Paths   landing.Paths
	Adapter *nginx.Adapter
	Ctl     *nginx.Ctl
	// Tree is the directory layout the nginx workers must be able to use.
	Tree landing.Tree
	// ProbeErr explains why Ctl is nil (nginx missing or unusable).
	ProbeErr string
	// Fallback is the embedded fallback.conf text.
	Fallback   string
	BackupDir  string
	StagingDir string
	Log        *slog.Logger
	// AfterApply runs after a success or warning apply (IP-group sync).
	AfterApply func(ctx context.Context, wafConfigJSON string)

	mu gosync.Mutex
	// held is a version this node's nginx cannot run (no Lua, no binary):
	// not blocklisted on disk, but not retried until the agent restarts.
	held landing.Ref
	// renderFailed spaces out retries of a version that does not render:
	// fetching up to 64 MiB every beat to fail again helps nobody.
	renderFailed struct {
		ref landing.Ref
		at  time.Time
		err error
	}
}

// renderRetry is how long a version that failed to render is left alone.
const renderRetry = time.Minute

// Sync brings the node to target (nil: the heartbeat named no active
// version). Errors are also recorded as last_error for the next beat.
func (s *Syncer) Sync(ctx context.Context, target *protocol.ConfigRef, mode Mode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.sync(ctx, normalise(target), mode)
	if err != nil {
		s.Log.Warn("sync failed", "mode", mode, "err", err)
		if uerr := s.Store.Update(func(st *state.State) { st.LastError = err.Error() }); uerr != nil {
			s.Log.Error("record sync error", "err", uerr)
		}
	}
	return err
}

func normalise(t *protocol.ConfigRef) *protocol.ConfigRef {
	if t == nil {
		return nil
	}
	r := protocol.ConfigRef{Version: strings.TrimSpace(t.Version), Checksum: strings.TrimSpace(t.Checksum)}
	if r.Version == "" || r.Checksum == "" {
		return nil
	}
	return &r
}

func (s *Syncer) sync(ctx context.Context, target *protocol.ConfigRef, mode Mode) error {
	if mode == Force {
		s.held = landing.Ref{}
		if err := s.Store.Update(func(st *state.State) {
			st.BlockedVersion, st.BlockedChecksum, st.BlockedReason = "", "", ""
		}); err != nil {
			return err
		}
	}
	if target == nil && mode == Normal {
		return nil
	}
	if target != nil && s.skip(*target, mode) {
		return nil
	}
	if rf := s.renderFailed; target != nil && mode == Normal && rf.ref == (landing.Ref{Version: target.Version, Checksum: target.Checksum}) && time.Since(rf.at) < renderRetry {
		return rf.err
	}
	ac, err := s.CP.ActiveConfig(ctx)
	if err != nil {
		var apiErr *controlplane.Error
		if target == nil && errors.As(err, &apiErr) && apiErr.Status == http.StatusBadRequest {
			// No active version on the server: keep serving what we have.
			return nil
		}
		return fmt.Errorf("fetch active config: %w", err)
	}
	fetched := protocol.ConfigRef{Version: ac.Version, Checksum: ac.Checksum}
	if fetched.Version == "" || fetched.Checksum == "" {
		return errors.New("fetch active config: reply has no version or checksum")
	}
	if s.skip(fetched, mode) {
		return nil
	}
	out, err := render.Render(ac.SourceConfigJSON, ac.SupportFiles)
	if err != nil {
		err = fmt.Errorf("render version %s: %w", ac.Version, err)
		s.renderFailed.ref, s.renderFailed.at, s.renderFailed.err = landing.Ref{Version: ac.Version, Checksum: ac.Checksum}, time.Now(), err
		return err
	}
	prev := s.Store.Get()
	outcome := s.apply(ctx, &ac, out, mode != Normal)
	if sum := out.Checksum(); sum != ac.Checksum {
		s.Log.Warn("rendered checksum differs from the server's; applied anyway", "version", ac.Version, "rendered", sum, "server", ac.Checksum)
		if outcome.Result == protocol.ResultSuccess {
			outcome.Message += fmt.Sprintf(" (rendered checksum %s differs from server checksum %s)", sum, ac.Checksum)
		}
	}
	s.Log.Info("apply finished", "version", ac.Version, "result", outcome.Result, "reloaded", outcome.Reloaded, "message", outcome.Message)
	if ids, _ := render.PagesProjectIDs(ac.SourceConfigJSON); len(ids) > 0 && outcome.Result == protocol.ResultSuccess {
		s.Log.Warn("the version has Pages routes; this agent does not download Pages packages yet", "projects", ids)
		outcome.Message += fmt.Sprintf("; Pages content for projects %v is not synced by this agent", ids)
	}
	var reportErr error
	repeat := outcome.Result == protocol.ResultSuccess && prev.CurrentVersion == ac.Version && prev.CurrentChecksum == ac.Checksum
	if !repeat {
		reportErr = s.report(ctx, &ac, out, outcome)
	}
	// The IP groups are synced even if the report failed: without them a
	// referenced deny list is off.
	if outcome.Result != protocol.ResultFailed && s.AfterApply != nil {
		s.AfterApply(ctx, wafConfig(out))
	}
	if reportErr != nil {
		return reportErr
	}
	if outcome.Result != protocol.ResultSuccess {
		return fmt.Errorf("%s", outcome.Message)
	}
	return nil
}

// skip reports whether nothing needs doing for ref: it is blocked, or (in
// normal mode) already current. Being current also clears a stale block and
// the last error.
func (s *Syncer) skip(ref protocol.ConfigRef, mode Mode) bool {
	if s.held == (landing.Ref{Version: ref.Version, Checksum: ref.Checksum}) {
		return true
	}
	st := s.Store.Get()
	if mode != Force && st.BlockedVersion == ref.Version && st.BlockedChecksum == ref.Checksum {
		s.Log.Debug("active version is blocked locally; not fetching", "version", ref.Version)
		return true
	}
	if mode == Normal && st.CurrentVersion == ref.Version && st.CurrentChecksum == ref.Checksum {
		if st.LastError != "" || st.BlockedVersion != "" {
			if err := s.Store.Update(func(st *state.State) {
				st.LastError = ""
				st.BlockedVersion, st.BlockedChecksum, st.BlockedReason = "", "", ""
			}); err != nil {
				s.Log.Error("clear sync error", "err", err)
			}
		}
		return true
	}
	return false
}

// report sends the apply log (E5).
func (s *Syncer) report(ctx context.Context, ac *protocol.ActiveConfig, out *render.Output, o Outcome) error {
	st := s.Store.Get()
	_, err := s.CP.ApplyLog(ctx, &protocol.ApplyLog{
		NodeID:              st.NodeID,
		Version:             ac.Version,
		Result:              o.Result,
		Message:             o.Message,
		Checksum:            ac.Checksum,
		MainConfigChecksum:  out.MainChecksum(),
		RouteConfigChecksum: out.RouteChecksum(),
		SupportFileCount:    len(out.Files),
	})
	if err != nil {
		return fmt.Errorf("report apply of %s: %w", ac.Version, err)
	}
	return nil
}

func wafConfig(out *render.Output) string {
	for _, f := range out.Files {
		if f.Path == "waf_config.json" {
			return f.Content
		}
	}
	return ""
}
