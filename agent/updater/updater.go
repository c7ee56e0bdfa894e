// Package updater replaces the agent's own binary with a newer release of
// the project, and puts the previous one back when the new one does not
// prove itself. It is the only package that replaces the binary.
//
// A check (PROTOCOL 10) looks up a release in agent.json's update_repo,
// refuses anything not strictly newer than the running version, downloads
// the asset for this platform to <exe>.update (0600) with a size cap and a
// stall watchdog, and verifies its SHA-256 (the release's digest field or a
// <asset>.sha256 asset; without one it refuses) and, when agent.json has
// update_public_key, an Ed25519 signature (<asset>.sig). Unlike upstream it
// then runs the new binary once as a trial ("-version" must print the
// release's version): a binary for the wrong architecture, one that panics
// at init or exits at once fails here, before anything is swapped.
//
// The swap keeps every instant bootable: <exe>.bak is a hard link to the
// running binary (a copy where links are not supported), and the new file
// is renamed over <exe>, so <exe> never goes missing, even across a power
// cut. The process then re-executes itself. <exe>.update.json records the
// pending version; the new binary counts its starts there (Start, before
// it reads agent.json), and is confirmed by its first successful heartbeat
// (Confirm), which removes the backup. A new binary that crashed twice
// before that, that cannot start at all (Abort: a command line or
// agent.json it rejects), or has no successful heartbeat within the
// confirm timeout (armed by Configure, apart from the agent's loops)
// renames the backup over <exe> and executes it. A version that failed is
// recorded and never tried again.
package updater

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/internal/atomicfile"
)

// Defaults of the Options' limits.
const (
	// DefaultMaxSize caps the binary: a release is about 7 MiB.
	DefaultMaxSize = 64 << 20
	// DefaultStallTimeout ends a download that received nothing this long.
	DefaultStallTimeout = 60 * time.Second
	// DefaultTrialTimeout bounds the trial run: a router reading 7 MiB
	// from slow flash may take seconds to start a binary.
	DefaultTrialTimeout = 20 * time.Second
	// AutoInterval spaces auto_update's release lookups: upstream asks at
	// every settings payload (every 3 s over the WebSocket) and hits the
	// API's 60 anonymous requests an hour (PROTOCOL 10 [UPSTREAM BUG]).
	AutoInterval = time.Hour
	// maxBoots is the start that rolls back: the new binary crashed on
	// the two before.
	maxBoots = 3
	// apiTimeout is PROTOCOL 10's, per release lookup.
	apiTimeout = 30 * time.Second
	// failureReported is how long a beat carries a failed update.
	failureReported = 24 * time.Hour
)

// ErrRefused is wrapped by the error of a check that found a release but
// would not install it: older or failed before, no asset, no or a wrong
// digest or signature, a short download, a failed trial run.
var ErrRefused = errors.New("self-update refused")

var errNoPending = errors.New("no pending update")

// Options configure an Updater.
type Options struct {
	// Exe is the running binary's path, symlinks resolved: the file that
	// is replaced and executed.
	Exe string
	// StatePath is the update state, <exe>.update.json when empty: beside
	// the binary, so that a start counts before agent.json is read, in
	// the one directory an update needs writable anyway.
	StatePath string
	// Version is the running build's version (main.version).
	Version string
	// Config is agent.json's part, set by Configure once it loaded.
	Config
	MaxSize      int64         // DefaultMaxSize when 0
	StallTimeout time.Duration // DefaultStallTimeout when 0
	TrialTimeout time.Duration // DefaultTrialTimeout when 0
	Log          *slog.Logger
	// Exec replaces the process (syscall.Exec when nil), which returns
	// only with an error; a test's stand-in returns nil for "replaced".
	// Args are the argv it gets (os.Args when nil).
	Exec func(path string, argv, env []string) error
	Args []string
}

// Config is what agent.json says about self-update.
type Config struct {
	// APIURL is the GitHub API base, Repo the owner/name releases come
	// from: agent.json's, never the server's choice.
	APIURL, Repo string
	// PublicKey, when set, makes a valid <asset>.sig mandatory.
	PublicKey ed25519.PublicKey
	// ConfirmTimeout is how long a new binary has for its first
	// successful heartbeat, from each of its starts.
	ConfirmTimeout time.Duration
}

// Updater checks for, installs and confirms or rolls back updates.
type Updater struct {
	o      Options
	log    *slog.Logger
	client *http.Client

	mu     sync.Mutex
	st     fileState
	bootAt time.Time
	// confirmed: a successful heartbeat proved the pending version, even
	// when recording that failed (Confirm tries again).
	confirmed bool
	// expiry rolls an unconfirmed version back at its deadline.
	expiry *time.Timer
	// warnedRepo is the last server update_repo logged as ignored.
	warnedRepo string
}

// Executable is the running binary's path, symlinks resolved: the file an
// update replaces, beside which its state lives.
func Executable() (string, error) {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return "", fmt.Errorf("find the agent's binary: %w", err)
	}
	return exe, nil
}

// Start is a daemon start's first step, before agent.json is read: it
// loads the state and counts the start of a pending version (Boot), which
// may execute the previous binary instead. Configure follows once
// agent.json loaded, or Abort when the start fails before the agent runs.
func Start(exe, version string, log *slog.Logger) *Updater {
	u := New(Options{Exe: exe, Version: version, Log: log})
	u.Boot()
	return u
}

// New loads the state file. A broken file is logged and treated as empty: it
// must never keep the agent from starting.
func New(o Options) *Updater {
	if o.MaxSize <= 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	if o.TrialTimeout <= 0 {
		o.TrialTimeout = DefaultTrialTimeout
	}
	if o.Exec == nil {
		o.Exec = syscall.Exec
	}
	if o.Args == nil {
		o.Args = os.Args
	}
	if o.StatePath == "" {
		o.StatePath = o.Exe + ".update.json"
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	u := &Updater{o: o, log: log, client: newClient(), bootAt: time.Now()}
	st, err := loadState(o.StatePath)
	if err != nil {
		log.Warn("self-update state unreadable; starting from none", "err", err)
	}
	u.st = st
	return u
}

func newClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   30 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
			IdleConnTimeout:       30 * time.Second,
		},
		// GitHub sends assets through a redirect to another host; it must
		// not downgrade the transport the digest's trust rests on.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
				return fmt.Errorf("redirect from https to %s refused", req.URL.Scheme)
			}
			return nil
		},
	}
}

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
	repo := u.repoFor(t.Repo)
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

// repoFor is agent.json's repository: the server's update_repo only
// counts when it is the same one, since a server that could name any
// repository could make every node run any binary.
func (u *Updater) repoFor(server string) string {
	if !strings.EqualFold(server, u.o.Repo) {
		u.mu.Lock()
		warn := u.warnedRepo != server
		u.warnedRepo = server
		u.mu.Unlock()
		if warn {
			u.log.Warn("the server names another update_repo; releases come from agent.json's", "server_repo", server, "update_repo", u.o.Repo)
		}
	}
	return u.o.Repo
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

// install downloads, verifies, tries, swaps and executes rel's binary.
func (u *Updater) install(ctx context.Context, rel *release) error {
	names := AssetNames(runtime.GOOS, runtime.GOARCH, goarm())
	a, ok := pick(rel, names)
	if !ok {
		return fmt.Errorf("%w: release %s has no asset %s", ErrRefused, rel.TagName, strings.Join(names, " or "))
	}
	sum, err := u.digest(ctx, rel, a)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrRefused, a.Name, err)
	}
	var sig []byte
	if u.o.PublicKey != nil {
		if sig, err = u.signature(ctx, rel, a); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrRefused, a.Name, err)
		}
	}
	tmp := u.o.Exe + ".update"
	os.Remove(tmp) // a leftover of a crash
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("self-update: the binary's directory must be writable: %w", err)
	}
	// After a swap tmp is gone, and after an exec nothing returns here.
	defer func() {
		f.Close()
		os.Remove(tmp)
	}()
	u.log.Info("self-update: downloading", "tag", rel.TagName, "asset", a.Name, "bytes", a.Size)
	got, err := u.fetch(ctx, a.URL, f, u.o.MaxSize, a.Size)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	if !bytes.Equal(got, sum) {
		return fmt.Errorf("%w: %s: SHA-256 mismatch: downloaded %x, the release says %x", ErrRefused, a.Name, got, sum)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("self-update: write %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("self-update: write %s: %w", tmp, err)
	}
	if sig != nil {
		if err := verifySignature(tmp, u.o.PublicKey, sig); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrRefused, a.Name, err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("self-update: %w", err)
	}
	if permanent, err := u.trial(ctx, tmp, rel.TagName); err != nil {
		if ctx.Err() != nil {
			return err
		}
		if !permanent {
			return fmt.Errorf("%w: %w; not held against the release: tried again at the next check", ErrRefused, err)
		}
		u.recordFailure(rel.TagName, u.o.Version, err.Error())
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return u.commit(ctx, tmp, rel.TagName)
}

// commit swaps the tried binary in and executes it. A stop requested
// meanwhile (SIGTERM) wins: before the swap nothing changes, after it the
// new binary runs at the next start, which counts as any start of it.
func (u *Updater) commit(ctx context.Context, tmp, tag string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("self-update to %s: stopping before the swap: %w", tag, err)
	}
	if err := u.swap(tmp, tag); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		u.log.Info("self-update: swapped in, but the agent is stopping; the new binary runs at the next start", "version", tag)
		return fmt.Errorf("self-update to %s: stopping before executing it: %w", tag, err)
	}
	u.log.Info("self-update: swapped in; executing the new binary", "version", tag, "previous", u.o.Version, "backup", u.o.Exe+".bak")
	err := u.o.Exec(u.o.Exe, u.o.Args, os.Environ())
	if err == nil {
		return nil
	}
	// Still here: the new binary could not even be executed.
	reason := fmt.Sprintf("exec %s: %v", u.o.Exe, err)
	if rerr := u.restore(reason, false); rerr != nil {
		return fmt.Errorf("self-update: %s; restoring the previous binary: %w", reason, rerr)
	}
	return fmt.Errorf("%w: %s", ErrRefused, reason)
}

// digest is the SHA-256 the release states for a: its digest field, else
// its .sha256 asset. Without either there is nothing to verify against.
func (u *Updater) digest(ctx context.Context, rel *release, a asset) ([]byte, error) {
	sum, ok, err := ParseDigestField(a.Digest)
	if err != nil || ok {
		return sum, err
	}
	d, ok := find(rel, a.Name+".sha256")
	if !ok {
		return nil, fmt.Errorf("%w: no digest field and no %s.sha256 asset", errNoDigest, a.Name)
	}
	data, err := u.fetchSmall(ctx, d, maxDigestFile)
	if err != nil {
		return nil, err
	}
	return ParseDigestFile(data, a.Name)
}

func (u *Updater) signature(ctx context.Context, rel *release, a asset) ([]byte, error) {
	s, ok := find(rel, a.Name+".sig")
	if !ok {
		return nil, fmt.Errorf("no signature asset %s.sig, and update_public_key requires one", a.Name)
	}
	data, err := u.fetchSmall(ctx, s, maxSigFile)
	if err != nil {
		return nil, err
	}
	return ParseSignature(data)
}

// trial runs the new binary with -version and wants it to print the
// release's version: it proves the file executes on this machine and gets
// through its initialisation, before it can replace anything. permanent
// says the error is a verdict on the binary: it printed another version,
// exited non-zero, died of a fault signal it raised itself, or the kernel
// refused its format. A timeout (a loaded router), a kill from outside or
// a failure to start it (ENOMEM; ETXTBSY from a fork elsewhere in the
// process while .update was open for writing, Go issue 22315) says nothing
// about the release.
func (u *Updater) trial(ctx context.Context, path, tag string) (permanent bool, err error) {
	tctx, cancel := context.WithTimeout(ctx, u.o.TrialTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(tctx, path, "-version")
	w := &capWriter{w: &out, n: 4 << 10}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case tctx.Err() != nil:
		return false, fmt.Errorf("trial run of %s -version did not finish within %v: %w", tag, u.o.TrialTimeout, tctx.Err())
	case errors.As(err, &exit):
		ws, ok := exit.Sys().(syscall.WaitStatus)
		return !ok || !ws.Signaled() || faultSignal(ws.Signal()),
			fmt.Errorf("trial run of %s -version failed: %w: %q", tag, err, truncate(out.String(), 200))
	case errors.Is(err, syscall.ENOEXEC):
		return true, fmt.Errorf("trial run of %s -version failed: not an executable for this machine: %w", tag, err)
	default:
		return false, fmt.Errorf("trial run of %s -version failed: %w", tag, err)
	}
	fields := strings.Fields(out.String())
	if len(fields) < 2 || fields[0] != "openflare-agent" || !sameVersion(fields[1], tag) {
		return true, fmt.Errorf("trial run of %s -version printed %q, not openflare-agent %s", tag, truncate(out.String(), 200), tag)
	}
	return false, nil
}

// faultSignal reports whether sig is one a process raises on itself by
// executing something wrong, rather than one sent to it (SIGKILL from the
// OOM killer, SIGTERM from a shutdown).
func faultSignal(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGILL, syscall.SIGFPE, syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGSYS:
		return true
	}
	return false
}

// swap records the pending version, keeps the running binary as
// <exe>.bak and renames the new one over <exe>.
func (u *Updater) swap(tmp, tag string) error {
	exe, bak := u.o.Exe, u.o.Exe+".bak"
	os.Remove(bak)
	if err := os.Link(exe, bak); err != nil {
		if err := copyFile(exe, bak); err != nil {
			return fmt.Errorf("self-update: keep the previous binary: %w", err)
		}
	}
	u.mu.Lock()
	u.st.Pending = &Pending{Version: tag, Previous: u.o.Version}
	err := saveState(u.o.StatePath, u.st)
	if err != nil {
		u.st.Pending = nil
	}
	u.mu.Unlock()
	if err != nil {
		os.Remove(bak)
		return fmt.Errorf("self-update: %w", err)
	}
	if err := os.Rename(tmp, exe); err != nil {
		u.mu.Lock()
		u.st.Pending = nil
		saveState(u.o.StatePath, u.st)
		u.mu.Unlock()
		os.Remove(bak)
		return fmt.Errorf("self-update: replace %s: %w", exe, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(exe)); err != nil {
		u.log.Warn("self-update: fsync the binary's directory", "err", err)
	}
	return nil
}

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

func sameVersion(a, b string) bool {
	va, errA := ParseVersion(a)
	vb, errB := ParseVersion(b)
	if errA != nil || errB != nil {
		return strings.TrimSpace(a) == strings.TrimSpace(b)
	}
	return Compare(va, vb) == 0
}

// goarm is the build's GOARM setting ("" off arm).
func goarm() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "GOARM" {
				return s.Value
			}
		}
	}
	return ""
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	return out.Close()
}

// capWriter keeps the first n bytes written to it and drops the rest.
type capWriter struct {
	w io.Writer
	n int
}

func (c *capWriter) Write(p []byte) (int, error) {
	if c.n > 0 {
		k := min(len(p), c.n)
		c.w.Write(p[:k])
		c.n -= k
	}
	return len(p), nil
}
