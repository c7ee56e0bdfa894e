package updater

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"openflare/agent/protocol"
)

// Trigger is what one settings payload asks for.
type Trigger struct {
	Force   bool   // update_now: immediately, not rate-limited
	Channel string // "stable" or "preview"
	Tag     string // an exact release tag, or ""
	Repo    string // the server's update_repo
}

// TriggerFor applies PROTOCOL 10 to a settings payload: a check only when
// auto_update or update_now is set and update_repo is not empty; the
// preview channel only with update_now. No other field starts one.
func TriggerFor(s protocol.AgentSettings) (Trigger, bool) {
	repo := strings.TrimSpace(s.UpdateRepo)
	if !s.AutoUpdate && !s.UpdateNow || repo == "" {
		return Trigger{}, false
	}
	t := Trigger{Force: s.UpdateNow, Channel: "stable", Tag: strings.TrimSpace(s.UpdateTag), Repo: repo}
	if s.UpdateNow && s.UpdateChannel == "preview" {
		t.Channel = "preview"
	}
	return t, true
}

// Due reports whether a trigger may start a check now: update_now always,
// auto_update an hour after the last automatic check; neither while a new
// version waits for its confirmation.
func (u *Updater) Due(t Trigger, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.st.Pending != nil {
		return false
	}
	return t.Force || now.Sub(time.Unix(u.st.LastAutoCheckUnix, 0)) >= AutoInterval
}

// Check looks the trigger's release up and, when it is newer and passes
// every check, installs it and executes it: on success it does not return.
// Nothing to do is a nil error; a refusal wraps ErrRefused.
func (u *Updater) Check(ctx context.Context, t Trigger) error {
	defer u.client.CloseIdleConnections()
	if !t.Force {
		u.mu.Lock()
		u.st.LastAutoCheckUnix = time.Now().Unix()
		err := saveState(u.o.StatePath, u.st)
		u.mu.Unlock()
		if err != nil {
			// Not fatal: the rate limit still holds in memory.
			u.log.Warn("record update check time", "err", err)
		}
	}
	// A build that cannot be ordered (a "dev" build) could never accept a
	// release: it does not ask the API either.
	cur, err := ParseVersion(u.o.Version)
	if err != nil {
		return fmt.Errorf("%w: the running version cannot be ordered, so no release is known to be newer: %w", ErrRefused, err)
	}
	// Releases come from agent.json's repository only, whatever the
	// server's update_repo says: a server that could name any repository
	// could make every node run any binary (the loop reports a mismatch).
	repo := u.o.Repo
	rel, err := u.lookup(ctx, repo, t.Channel, t.Tag)
	if err != nil {
		return err
	}
	if rel == nil {
		u.log.Info("self-update: no such release", "repo", repo, "channel", t.Channel, "tag", t.Tag)
		return nil
	}
	remote, err := ParseVersion(rel.TagName)
	if err != nil {
		return fmt.Errorf("%w: release tag: %w", ErrRefused, err)
	}
	switch c := Compare(remote, cur); {
	case c == 0:
		u.log.Info("self-update: already running the release", "version", u.o.Version, "tag", rel.TagName)
		return nil
	case c < 0:
		return fmt.Errorf("%w: release %s is older than the running %s: no downgrades", ErrRefused, rel.TagName, u.o.Version)
	}
	if f := u.failed(remote); f != nil {
		return fmt.Errorf("%w: %s failed before (%s) and is not tried again", ErrRefused, rel.TagName, f.Reason)
	}
	return u.install(ctx, rel)
}

// failed returns the failure that rules v out, if any: any failure but an
// unconfirmed rollback, a second unconfirmed rollback, or one whose
// previous version has not reached the server since.
func (u *Updater) failed(v Version) *Failure {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out *Failure
	unconfirmed := 0
	for i := range u.st.Failed {
		if f, err := ParseVersion(u.st.Failed[i].Version); err != nil || Compare(f, v) != 0 {
			continue
		}
		f := u.st.Failed[i]
		if f.Unconfirmed {
			if unconfirmed++; unconfirmed == 1 && f.Reached {
				continue
			}
		}
		out = &f
	}
	return out
}

func (u *Updater) recordFailure(version, from, reason string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.addFailureLocked(Failure{Version: version, From: from, Reason: reason, AtUnix: time.Now().Unix()})
	if err := saveState(u.o.StatePath, u.st); err != nil {
		u.log.Warn("self-update: record the failed version", "err", err)
	}
}

func (u *Updater) addFailureLocked(f Failure) {
	u.st.Failed = append(u.st.Failed, f)
	if n := len(u.st.Failed); n > maxFailed {
		u.st.Failed = slices.Clone(u.st.Failed[n-maxFailed:])
	}
}

// LastFailure is the newest failed update away from the running version,
// for a day after it happened: what a beat reports.
func (u *Updater) LastFailure(now time.Time) (Failure, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.st.Failed) == 0 {
		return Failure{}, false
	}
	f := u.st.Failed[len(u.st.Failed)-1]
	if !sameVersion(f.From, u.o.Version) || now.Sub(time.Unix(f.AtUnix, 0)) > failureReported {
		return Failure{}, false
	}
	return f, true
}
