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
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
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
