package updater

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"openflare/internal/atomicfile"
)

// errNoPending is restore's answer when nothing waits to be rolled back
// any more (confirmed, or rolled back already).
var errNoPending = errors.New("no pending update")

// Boot runs first thing at a daemon start (Start). A pending version
// counts its starts here; the third start of it (two crashes before a
// successful heartbeat) restores and executes the previous binary, and
// does not return unless that fails.
func (u *Updater) Boot() {
	os.Remove(u.o.Exe + ".update")
	u.mu.Lock()
	p := u.st.Pending
	if p == nil {
		u.mu.Unlock()
		return
	}
	switch {
	case sameVersion(u.o.Version, p.Version):
		p.Boots++
		boots := p.Boots
		err := saveState(u.o.StatePath, u.st)
		u.mu.Unlock()
		if err != nil {
			u.log.Warn("self-update: count this start", "err", err)
		}
		if boots >= maxBoots {
			u.rollback(fmt.Sprintf("crashed on start %d times before a successful heartbeat", boots-1), false)
			return
		}
		u.log.Info("self-update: new version starting; it must reach a successful heartbeat", "version", u.o.Version, "previous", p.Previous, "start", boots)
	default:
		// The previous binary runs (the swap never finished, or the
		// operator put it back), or a binary installed by hand: nothing
		// waits for a confirmation any more.
		u.st.Pending = nil
		err := saveState(u.o.StatePath, u.st)
		u.mu.Unlock()
		if err != nil {
			u.log.Warn("self-update: clear the pending version", "err", err)
		}
		if !sameVersion(u.o.Version, p.Previous) {
			u.log.Warn("self-update: another binary runs than the one swapped in; dropping the backup", "version", u.o.Version, "pending", p.Version)
		}
		os.Remove(u.o.Exe + ".bak")
	}
}

// Configure takes agent.json's settings, once it loaded, and arms the
// confirm deadline of a pending version: from here on the rollback does
// not depend on the agent getting as far as its loops. Once ctx ends (the
// agent stops) the deadline no longer starts another binary. Call it once,
// before Check.
func (u *Updater) Configure(ctx context.Context, c Config) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.o.Config = c
	if d, ok := u.deadlineLocked(); ok {
		u.expiry = time.AfterFunc(time.Until(d), func() {
			if ctx.Err() == nil {
				u.Expire()
			}
		})
		u.log.Info("self-update: the new version rolls back without a successful heartbeat", "within", c.ConfirmTimeout)
	}
}

// Abort is a daemon start that failed before the agent ran: a command
// line or agent.json this version rejects, or agent.New failing. A pending
// version rolls back at once, since such a failure repeats at every start
// and some (a usage error) are not restarted at all. It returns when
// nothing is pending or the rollback failed.
func (u *Updater) Abort(cause error) {
	if u == nil {
		return
	}
	if _, ok := u.ConfirmDeadline(); !ok {
		return
	}
	u.rollback(fmt.Sprintf("cannot start: %v", cause), false)
}

// ConfirmDeadline is when the running version rolls back without a
// successful heartbeat; ok is false when it is not waiting for one.
func (u *Updater) ConfirmDeadline() (deadline time.Time, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.deadlineLocked()
}

func (u *Updater) deadlineLocked() (time.Time, bool) {
	if p := u.st.Pending; p == nil || u.confirmed || !sameVersion(u.o.Version, p.Version) {
		return time.Time{}, false
	}
	return u.bootAt.Add(u.o.ConfirmTimeout), true
}

// Confirm is called after every successful heartbeat: the first one of a
// pending version confirms it and drops the backup.
func (u *Updater) Confirm() {
	u.mu.Lock()
	p := u.st.Pending
	if p == nil || !sameVersion(u.o.Version, p.Version) {
		// A version rolled back from for want of a heartbeat, by this
		// one, which does reach the server: that rollback may have been
		// the server's outage (Failure.Unconfirmed).
		changed := false
		for i := range u.st.Failed {
			if f := &u.st.Failed[i]; f.Unconfirmed && !f.Reached && sameVersion(f.From, u.o.Version) {
				f.Reached, changed = true, true
			}
		}
		var err error
		if changed {
			err = saveState(u.o.StatePath, u.st)
		}
		u.mu.Unlock()
		if err != nil {
			u.log.Warn("self-update: record that the server is reachable", "err", err)
		}
		return
	}
	first := !u.confirmed
	u.confirmed = true
	if u.expiry != nil {
		u.expiry.Stop()
	}
	u.st.Pending = nil
	err := saveState(u.o.StatePath, u.st)
	if err != nil {
		// The file still says pending: the backup stays for the starts
		// it counts, and the next heartbeat records it again.
		u.st.Pending = p
	}
	u.mu.Unlock()
	if err != nil {
		if first {
			u.log.Warn("self-update: confirmed, but recording it failed; the backup stays until it is recorded", "version", u.o.Version, "err", err)
		}
		return
	}
	os.Remove(u.o.Exe + ".bak")
	u.log.Info("self-update confirmed by a successful heartbeat", "version", u.o.Version, "previous", p.Previous)
}

// Expire rolls back when the confirm deadline passed without a successful
// heartbeat. It does not return unless the rollback failed.
func (u *Updater) Expire() {
	u.mu.Lock()
	_, ok := u.deadlineLocked()
	timeout := u.o.ConfirmTimeout
	u.mu.Unlock()
	if ok {
		u.rollback(fmt.Sprintf("no successful heartbeat within %v of its start", timeout), true)
	}
}

// rollback puts the previous binary back and executes it; unconfirmed
// says the version only failed to reach the server in time.
func (u *Updater) rollback(reason string, unconfirmed bool) {
	err := u.restore(reason, unconfirmed)
	if errors.Is(err, errNoPending) {
		// Confirmed or rolled back meanwhile (the deadline and Abort race).
		return
	}
	if err != nil {
		u.log.Error("self-update: cannot roll back; this version keeps running", "version", u.o.Version, "reason", reason, "err", err)
		return
	}
	if err := u.o.Exec(u.o.Exe, u.o.Args, os.Environ()); err != nil {
		u.log.Error("self-update: rolled back, but executing the previous binary failed; it runs at the next start", "err", err)
	}
}

// restore renames <exe>.bak over <exe> and records the pending version as
// failed.
func (u *Updater) restore(reason string, unconfirmed bool) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	p := u.st.Pending
	if p == nil || u.confirmed {
		return errNoPending
	}
	exe := u.o.Exe
	if err := os.Rename(exe+".bak", exe); err != nil {
		return fmt.Errorf("restore the previous binary: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(exe)); err != nil {
		u.log.Warn("self-update: fsync the binary's directory", "err", err)
	}
	u.st.Pending = nil
	u.addFailureLocked(Failure{Version: p.Version, From: p.Previous, Reason: reason, AtUnix: time.Now().Unix(), Unconfirmed: unconfirmed})
	if err := saveState(u.o.StatePath, u.st); err != nil {
		u.log.Warn("self-update: record the rollback", "err", err)
	}
	u.log.Error("self-update rolled back to the previous binary", "failed_version", p.Version, "restored_version", p.Previous, "reason", reason)
	return nil
}
