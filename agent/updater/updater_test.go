package updater

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"openflare/testing/releaseserver"
)

const repo = "openflare/openflare-agent"

// script is a stand-in agent binary: "-version" prints version, and the
// rest of the file makes each one's bytes distinct.
func script(version string, exit int) []byte {
	return []byte("#!/bin/sh\n# " + version + "\necho 'openflare-agent " + version + " (commit x) go linux/amd64'\nexit " + string(rune('0'+exit)) + "\n")
}

// rig is an installed agent binary at version 1.0.0, an updater for it,
// and a release server; execs records what it executed.
type rig struct {
	t     *testing.T
	dir   string
	exe   string
	old   []byte
	rs    *releaseserver.Server
	key   ed25519.PrivateKey
	execs []string
}

func newRig(t *testing.T) *rig {
	dir := t.TempDir()
	r := &rig{t: t, dir: dir, exe: filepath.Join(dir, "openflare-agent"), old: script("1.0.0", 0)}
	if err := os.WriteFile(r.exe, r.old, 0o755); err != nil {
		t.Fatal(err)
	}
	r.rs = releaseserver.Start(repo)
	t.Cleanup(r.rs.Close)
	_, r.key, _ = ed25519.GenerateKey(nil)
	return r
}

// updater is the updater of the binary running version.
func (r *rig) updater(version string, signed bool) *Updater {
	o := Options{
		Exe: r.exe, Version: version,
		Config:       Config{APIURL: r.rs.URL(), Repo: repo, ConfirmTimeout: time.Minute},
		StallTimeout: 5 * time.Second, Args: []string{r.exe, "-config", "agent.json"},
		Exec: func(path string, argv, env []string) error {
			r.execs = append(r.execs, path+" "+strings.Join(argv[1:], " "))
			return errors.New("exec recorded")
		},
	}
	if signed {
		o.PublicKey = r.key.Public().(ed25519.PublicKey)
	}
	return New(o)
}

func (r *rig) binary() []byte {
	b, err := os.ReadFile(r.exe)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

func (r *rig) exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

var updateNow = Trigger{Force: true, Channel: "stable", Repo: repo}

// A newer release is fetched, verified, tried, swapped in and executed; its
// first start counts, its first heartbeat confirms and drops the backup.
func TestUpdateSwapsExecutesAndConfirms(t *testing.T) {
	for _, digestFile := range []bool{false, true} {
		r := newRig(t)
		newBin := script("1.1.0", 0)
		r.rs.Set(releaseserver.Release{Tag: "v1.1.0", Binary: newBin, Key: r.key, DigestFile: digestFile})
		u := r.updater("v1.0.0", true)
		// The server's update_repo is another one: agent.json's counts.
		err := u.Check(context.Background(), Trigger{Force: true, Channel: "stable", Repo: "evil/repo"})
		if err == nil || !strings.Contains(err.Error(), "exec recorded") {
			t.Fatalf("check: %v", err)
		}
		// The recorded exec "failed", so the updater put the old binary
		// back: run it again with an exec that succeeds.
		if !bytes.Equal(r.binary(), r.old) {
			t.Fatal("a failed exec did not restore the previous binary")
		}
		r.execs = nil
		u = r.updater("v1.0.0", true)
		u.o.Exec = func(path string, argv, env []string) error {
			r.execs = append(r.execs, path)
			return nil
		}
		// The failed exec marked 1.1.0 failed; a fresh state forgets that.
		os.Remove(r.exe + ".update.json")
		u.st = fileState{}
		if err := u.Check(context.Background(), updateNow); err != nil {
			t.Fatalf("check: %v", err)
		}
		if len(r.execs) != 1 || r.execs[0] != r.exe {
			t.Fatalf("execs %v, want %s", r.execs, r.exe)
		}
		if !bytes.Equal(r.binary(), newBin) {
			t.Fatal("the new binary is not in place")
		}
		if b, _ := os.ReadFile(r.exe + ".bak"); !bytes.Equal(b, r.old) {
			t.Fatal("the backup is not the previous binary")
		}
		if fi, _ := os.Stat(r.exe); fi.Mode().Perm() != 0o755 {
			t.Errorf("mode %v", fi.Mode())
		}

		next := r.updater("1.1.0", true)
		next.Boot()
		if d, ok := next.ConfirmDeadline(); !ok || time.Until(d) <= 0 {
			t.Fatalf("no confirm deadline: %v %v", d, ok)
		}
		next.Confirm()
		if r.exists(r.exe + ".bak") {
			t.Error("confirmation left the backup")
		}
		if _, ok := next.ConfirmDeadline(); ok {
			t.Error("still waiting for a confirmation")
		}
		if _, ok := next.LastFailure(time.Now()); ok {
			t.Error("a failure is reported after a good update")
		}
		if !bytes.Equal(r.binary(), newBin) {
			t.Fatal("the new binary is not in place")
		}
	}
}

// Each bad release is refused before anything is swapped: the binary stays
// byte-identical and nothing is executed.
func TestUpdateRefusals(t *testing.T) {
	cases := []struct {
		name   string
		rel    releaseserver.Release
		signed bool
		want   string
	}{
		{"wrong digest", releaseserver.Release{Tag: "v1.1.0", Fault: releaseserver.WrongDigest}, false, "SHA-256 mismatch"},
		{"wrong digest file", releaseserver.Release{Tag: "v1.1.0", Fault: releaseserver.WrongDigest, DigestFile: true}, false, "SHA-256 mismatch"},
		{"truncated", releaseserver.Release{Tag: "v1.1.0", Fault: releaseserver.Truncated}, false, "truncated"},
		{"no digest", releaseserver.Release{Tag: "v1.1.0", Fault: releaseserver.NoDigest}, false, "no SHA-256 digest available"},
		{"bad signature", releaseserver.Release{Tag: "v1.1.0", Fault: releaseserver.BadSignature}, true, "signature does not match"},
		{"no signature", releaseserver.Release{Tag: "v1.1.0"}, true, "no signature asset"},
		{"downgrade", releaseserver.Release{Tag: "v0.9.0"}, false, "older than the running"},
		{"unparsable tag", releaseserver.Release{Tag: "nightly"}, false, "release tag"},
		{"no asset", releaseserver.Release{Tag: "v1.1.0", AssetName: "openflare-agent-plan9-386"}, false, "has no asset"},
		{"wrong version inside", releaseserver.Release{Tag: "v1.2.0"}, false, "not openflare-agent v1.2.0"},
		{"stalled", releaseserver.Release{Tag: "v1.1.0", Fault: releaseserver.Stalled}, false, "stalled: nothing received"},
		{"over the size cap", releaseserver.Release{Tag: "v1.1.0", Binary: bytes.Repeat([]byte("x"), 4097)}, false, "the cap is 4096"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			if c.rel.Binary == nil {
				c.rel.Binary = script("1.1.0", 0)
			}
			if c.signed || c.rel.Fault == releaseserver.BadSignature {
				c.rel.Key = r.key
			}
			if c.name == "no signature" {
				c.rel.Key = nil
			}
			r.rs.Set(c.rel)
			u := r.updater("1.0.0", c.signed)
			u.o.StallTimeout, u.o.MaxSize = 300*time.Millisecond, 4096
			err := u.Check(context.Background(), updateNow)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want a refusal with %q", err, c.want)
			}
			if !bytes.Equal(r.binary(), r.old) || len(r.execs) != 0 {
				t.Fatalf("binary changed or executed: %v", r.execs)
			}
			for _, leftover := range []string{r.exe + ".update", r.exe + ".bak"} {
				if r.exists(leftover) {
					t.Errorf("%s left behind", leftover)
				}
			}
		})
	}
}

// Equal and missing releases are no update and no error; a dev build
// cannot know any release is newer.
func TestNothingToDo(t *testing.T) {
	r := newRig(t)
	r.rs.Set(releaseserver.Release{Tag: "v1.0.0", Binary: script("1.0.0", 0)})
	if err := r.updater("1.0.0", false).Check(context.Background(), updateNow); err != nil {
		t.Errorf("equal: %v", err)
	}
	if err := r.updater("1.0.0", false).Check(context.Background(), Trigger{Force: true, Tag: "v7.0.0", Repo: repo}); err != nil {
		t.Errorf("missing tag: %v", err)
	}
	lookups := r.rs.Lookups()
	if err := r.updater("dev", false).Check(context.Background(), updateNow); !errors.Is(err, ErrRefused) || r.rs.Lookups() != lookups {
		t.Errorf("dev build: %v, %d lookups", err, r.rs.Lookups()-lookups)
	}
	if r.rs.Downloads(releaseserver.DefaultAssetName()) != 0 || len(r.execs) != 0 {
		t.Error("downloaded or executed")
	}
}

// The preview channel takes the newest prerelease, a tag that release.
func TestChannels(t *testing.T) {
	r := newRig(t)
	r.rs.Set(
		releaseserver.Release{Tag: "v3.0.0-rc.1", Prerelease: true, Draft: true, Binary: script("3.0.0-rc.1", 0)},
		releaseserver.Release{Tag: "v2.0.0-rc.1", Prerelease: true, Binary: script("2.0.0-rc.1", 0)},
		releaseserver.Release{Tag: "v1.0.0", Binary: script("1.0.0", 0)},
		releaseserver.Release{Tag: "v0.5.0", Binary: script("0.5.0", 0)},
	)
	u := r.updater("1.0.0", false)
	u.o.Exec = func(string, []string, []string) error { return nil }
	if err := u.Check(context.Background(), Trigger{Force: true, Channel: "preview", Repo: repo}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.binary(), script("2.0.0-rc.1", 0)) {
		t.Errorf("preview installed %q", r.binary())
	}
	r2 := newRig(t)
	r2.rs.Set(releaseserver.Release{Tag: "v1.0.0"}, releaseserver.Release{Tag: "v1.0.1", Binary: script("1.0.1", 0)})
	u = r2.updater("1.0.0", false)
	u.o.Exec = func(string, []string, []string) error { return nil }
	if err := u.Check(context.Background(), Trigger{Force: true, Tag: "v1.0.1", Repo: repo}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r2.binary(), script("1.0.1", 0)) {
		t.Errorf("tag installed %q", r2.binary())
	}
}

// A binary that fails its trial run is never swapped in, is recorded as
// failed (reported, and never tried again).
func TestTrialFailure(t *testing.T) {
	r := newRig(t)
	r.rs.Set(releaseserver.Release{Tag: "v1.1.0", Binary: script("1.1.0", 3)})
	u := r.updater("1.0.0", false)
	err := u.Check(context.Background(), updateNow)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "trial run") {
		t.Fatalf("error %v", err)
	}
	if !bytes.Equal(r.binary(), r.old) || len(r.execs) != 0 {
		t.Fatal("binary changed or executed")
	}
	f, ok := u.LastFailure(time.Now())
	if !ok || f.Version != "v1.1.0" || f.From != "1.0.0" || !strings.Contains(f.Reason, "exit status 3") {
		t.Fatalf("failure %+v %v", f, ok)
	}
	if _, ok := u.LastFailure(time.Now().Add(25 * time.Hour)); ok {
		t.Error("reported after a day")
	}
	// A restart remembers: the version is not downloaded again.
	n := r.rs.Downloads(releaseserver.DefaultAssetName())
	r.rs.Set(releaseserver.Release{Tag: "v1.1.0", Binary: script("1.1.0", 0)})
	err = r.updater("1.0.0", false).Check(context.Background(), updateNow)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not tried again") {
		t.Fatalf("second check: %v", err)
	}
	if r.rs.Downloads(releaseserver.DefaultAssetName()) != n {
		t.Error("downloaded again")
	}
}

// installed swaps in 1.1.0 and returns its bytes.
func (r *rig) installed() []byte {
	newBin := script("1.1.0", 0)
	r.rs.Set(releaseserver.Release{Tag: "v1.1.0", Binary: newBin})
	u := r.updater("1.0.0", false)
	u.o.Exec = func(string, []string, []string) error { return nil }
	if err := u.Check(context.Background(), updateNow); err != nil {
		r.t.Fatal(err)
	}
	return newBin
}

// A new binary that crashes on start twice is replaced by the previous one
// at its third start, which then executes it.
func TestRollbackAfterTwoCrashes(t *testing.T) {
	r := newRig(t)
	newBin := r.installed()
	for start := 1; start <= 2; start++ {
		r.updater("1.1.0", false).Boot()
		if !bytes.Equal(r.binary(), newBin) || len(r.execs) != 0 {
			t.Fatalf("start %d rolled back", start)
		}
	}
	r.updater("1.1.0", false).Boot()
	if !bytes.Equal(r.binary(), r.old) || r.exists(r.exe+".bak") {
		t.Fatal("third start did not restore the previous binary")
	}
	if len(r.execs) != 1 || !strings.HasPrefix(r.execs[0], r.exe+" -config agent.json") {
		t.Fatalf("execs %v", r.execs)
	}
	old := r.updater("1.0.0", false)
	old.Boot()
	f, ok := old.LastFailure(time.Now())
	if !ok || f.Version != "v1.1.0" || !strings.Contains(f.Reason, "crashed on start 2 times") {
		t.Fatalf("failure %+v %v", f, ok)
	}
	r.rs.Set(releaseserver.Release{Tag: "v1.1.0", Binary: newBin})
	if err := old.Check(context.Background(), updateNow); !errors.Is(err, ErrRefused) {
		t.Errorf("the failed version was tried again: %v", err)
	}
}

// Without a successful heartbeat within the confirm timeout the previous
// binary comes back; a confirmed version is not rolled back.
func TestRollbackWithoutHeartbeat(t *testing.T) {
	r := newRig(t)
	r.installed()
	u := r.updater("1.1.0", false)
	u.Boot()
	u.Expire()
	if !bytes.Equal(r.binary(), r.old) || len(r.execs) != 1 {
		t.Fatalf("not rolled back: execs %v", r.execs)
	}
	if f, ok := r.updater("1.0.0", false).LastFailure(time.Now()); !ok || !strings.Contains(f.Reason, "no successful heartbeat") {
		t.Fatalf("failure %+v %v", f, ok)
	}

	r2 := newRig(t)
	newBin := r2.installed()
	u = r2.updater("1.1.0", false)
	u.Boot()
	u.Confirm()
	u.Expire()
	if !bytes.Equal(r2.binary(), newBin) || len(r2.execs) != 0 {
		t.Fatal("a confirmed version was rolled back")
	}
}

// The previous binary starting with an update pending (a crash before the
// swap finished) drops the pending version and the backup.
func TestPreviousBinaryClearsPending(t *testing.T) {
	r := newRig(t)
	r.installed()
	os.WriteFile(r.exe, r.old, 0o755) // as if the rename never happened
	u := r.updater("1.0.0", false)
	u.Boot()
	if _, ok := u.ConfirmDeadline(); ok || r.exists(r.exe+".bak") {
		t.Fatal("pending update or backup left")
	}
	if !u.Due(updateNow, time.Now()) {
		t.Error("checks stay blocked")
	}
}

// A rollback for want of a heartbeat may have been the server's outage:
// once the previous version reaches the server, the new one gets a second
// try; a second such rollback is final.
func TestUnconfirmedRollbackRetriedOnce(t *testing.T) {
	r := newRig(t)
	newBin := r.installed()
	expire := func() {
		t.Helper()
		u := r.updater("1.1.0", false)
		u.Boot()
		u.Expire()
		if !bytes.Equal(r.binary(), r.old) {
			t.Fatal("not rolled back")
		}
	}
	check := func(confirmed bool) error {
		t.Helper()
		old := r.updater("1.0.0", false)
		old.o.Exec = func(string, []string, []string) error { return nil }
		old.Boot()
		if confirmed {
			old.Confirm()
		}
		return old.Check(context.Background(), updateNow)
	}
	expire()
	// The server still unreachable: not yet.
	if err := check(false); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not tried again") {
		t.Fatalf("retried before the previous version reached the server: %v", err)
	}
	// Reached: tried once more (the state survives a restart, check
	// builds a new Updater from the file).
	r.updater("1.0.0", false).Confirm()
	if err := check(false); err != nil {
		t.Fatalf("second try: %v", err)
	}
	if !bytes.Equal(r.binary(), newBin) {
		t.Fatal("the second try did not swap the binary in")
	}
	expire()
	if err := check(true); !errors.Is(err, ErrRefused) {
		t.Fatalf("tried a third time: %v", err)
	}
	// A crash rollback is final at once.
	r2 := newRig(t)
	r2.installed()
	for range maxBoots {
		r2.updater("1.1.0", false).Boot()
	}
	old := r2.updater("1.0.0", false)
	old.Boot()
	old.Confirm()
	if err := old.Check(context.Background(), updateNow); !errors.Is(err, ErrRefused) {
		t.Fatalf("a crashed version was tried again: %v", err)
	}
}

// execCh is an Exec stand-in safe from other goroutines (the confirm
// deadline's timer): each executed path arrives on the channel.
func execCh() (func(string, []string, []string) error, chan string) {
	c := make(chan string, 4)
	return func(path string, _, _ []string) error {
		c <- path
		return nil
	}, c
}

// Start keeps its state beside the binary and counts a pending version's
// start there, before anything else is read.
func TestStartCountsBesideTheBinary(t *testing.T) {
	r := newRig(t)
	newBin := r.installed()
	if r.exists(filepath.Join(r.dir, "update.json")) || !r.exists(r.exe+".update.json") {
		t.Fatal("the state is not <exe>.update.json")
	}
	Start(r.exe, "1.1.0", nil)
	st, err := loadState(r.exe + ".update.json")
	if err != nil || st.Pending == nil || st.Pending.Boots != 1 {
		t.Fatalf("state %+v, %v: want one counted start", st.Pending, err)
	}
	if !bytes.Equal(r.binary(), newBin) {
		t.Fatal("the first start rolled back")
	}
}

// A pending version that cannot start (a flag or an agent.json it
// rejects, a failing agent.New) rolls back at its first start, for good;
// nothing else is rolled back by a failed start.
func TestAbortRollsBackAtOnce(t *testing.T) {
	r := newRig(t)
	r.installed()
	u := r.updater("1.1.0", false)
	u.Boot()
	u.Abort(errors.New("agent.json: unknown field"))
	if !bytes.Equal(r.binary(), r.old) || r.exists(r.exe+".bak") {
		t.Fatal("the previous binary is not back")
	}
	if len(r.execs) != 1 || r.execs[0] != r.exe+" -config agent.json" {
		t.Fatalf("execs %v, want the previous binary with the same arguments", r.execs)
	}
	old := r.updater("1.0.0", false)
	old.Boot()
	f, ok := old.LastFailure(time.Now())
	if !ok || f.Unconfirmed || !strings.Contains(f.Reason, "cannot start: agent.json: unknown field") {
		t.Fatalf("failure %+v %v", f, ok)
	}
	old.Confirm()
	if err := old.Check(context.Background(), updateNow); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not tried again") {
		t.Fatalf("a version that could not start was tried again: %v", err)
	}

	// Nothing pending, a confirmed version, or no updater at all: the
	// failed start just fails.
	r2 := newRig(t)
	r2.updater("1.0.0", false).Abort(errors.New("x"))
	newBin := r2.installed()
	u = r2.updater("1.1.0", false)
	u.Boot()
	u.Confirm()
	u.Abort(errors.New("x"))
	var none *Updater
	none.Abort(errors.New("x"))
	none.Configure(context.Background(), Config{})
	if !bytes.Equal(r2.binary(), newBin) || len(r2.execs) != 0 {
		t.Fatalf("rolled back: execs %v", r2.execs)
	}
}

// Configure arms the confirm deadline by itself: a new binary that hangs
// before the agent's loops run is rolled back all the same.
func TestConfigureArmsTheDeadline(t *testing.T) {
	r := newRig(t)
	r.installed()
	u := r.updater("1.1.0", false)
	exec, execs := execCh()
	u.o.Exec = exec
	u.Boot()
	u.Configure(context.Background(), Config{APIURL: r.rs.URL(), Repo: repo, ConfirmTimeout: 50 * time.Millisecond})
	select {
	case path := <-execs:
		if path != r.exe {
			t.Fatalf("executed %s", path)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the deadline did not roll back")
	}
	if !bytes.Equal(r.binary(), r.old) {
		t.Fatal("the previous binary is not back")
	}
	if f, ok := r.updater("1.0.0", false).LastFailure(time.Now()); !ok || !f.Unconfirmed {
		t.Fatalf("failure %+v %v, want an unconfirmed rollback", f, ok)
	}

	// Confirmed before agent.json loaded, or not pending: nothing armed.
	r2 := newRig(t)
	r2.installed()
	u = r2.updater("1.1.0", false)
	u.Boot()
	u.Confirm()
	u.Configure(context.Background(), Config{ConfirmTimeout: time.Nanosecond})
	if u.expiry != nil {
		t.Error("a deadline armed for a confirmed version")
	}
}

// Only a verdict on the binary is held against a release: a timeout, a
// kill from outside or a failure to start it is not.
func TestTrialVerdicts(t *testing.T) {
	cases := []struct {
		name      string
		body      []byte
		busy      bool // held open for writing: ETXTBSY
		permanent bool
		want      string
	}{
		{"exits non-zero", script("1.1.0", 3), false, true, "exit status 3"},
		{"another version", script("1.0.9", 0), false, true, "not openflare-agent v1.1.0"},
		{"faults", []byte("#!/bin/sh\nulimit -c 0\nkill -SEGV $$\n"), false, true, "segmentation fault"},
		{"not for this machine", []byte("\x7fELF garbage"), false, true, "not an executable for this machine"},
		{"killed from outside", []byte("#!/bin/sh\nkill -KILL $$\n"), false, false, "killed"},
		{"times out", []byte("#!/bin/sh\nexec sleep 30\n"), false, false, "did not finish within"},
		{"text file busy", script("1.1.0", 0), true, false, "text file busy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			u := r.updater("1.0.0", false)
			u.o.TrialTimeout = 200 * time.Millisecond
			path := r.exe + ".update"
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(c.body)
			if !c.busy {
				f.Close()
			} else {
				defer f.Close()
			}
			permanent, err := u.trial(context.Background(), path, "v1.1.0")
			if err == nil || permanent != c.permanent || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("permanent %v, error %v; want %v and %q", permanent, err, c.permanent, c.want)
			}
		})
	}
}

// A trial that timed out is refused without being recorded: the next
// check downloads the release again and installs it.
func TestTrialTimeoutRetried(t *testing.T) {
	r := newRig(t)
	r.rs.Set(releaseserver.Release{Tag: "v1.1.0", Binary: []byte("#!/bin/sh\n# v1.1.0 slow\nexec sleep 30\n")})
	u := r.updater("1.0.0", false)
	u.o.TrialTimeout = 200 * time.Millisecond
	err := u.Check(context.Background(), updateNow)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "tried again at the next check") {
		t.Fatalf("error %v", err)
	}
	if _, ok := u.LastFailure(time.Now()); ok || !bytes.Equal(r.binary(), r.old) || r.exists(r.exe+".update") {
		t.Fatal("recorded as failed, or the binary changed, or .update left")
	}
	newBin := r.installed()
	if !bytes.Equal(r.binary(), newBin) {
		t.Fatal("the retry did not install the release")
	}
}

// cancelAfter is a context whose Err reports cancellation from its n-th
// call on: commit asks before the swap and again before the exec.
type cancelAfter struct {
	context.Context
	n int
}

func (c *cancelAfter) Err() error {
	if c.n--; c.n <= 0 {
		return context.Canceled
	}
	return nil
}

// A stop requested after the trial wins: before the swap nothing changes;
// after it the new binary is not executed, and counts as pending at the
// next start.
func TestCommitStopsWhenCancelled(t *testing.T) {
	for _, n := range []int{1, 2} {
		r := newRig(t)
		newBin := script("1.1.0", 0)
		tmp := r.exe + ".update"
		if err := os.WriteFile(tmp, newBin, 0o755); err != nil {
			t.Fatal(err)
		}
		u := r.updater("1.0.0", false)
		err := u.commit(&cancelAfter{Context: context.Background(), n: n}, tmp, "v1.1.0")
		if !errors.Is(err, context.Canceled) || len(r.execs) != 0 {
			t.Fatalf("cancelled at check %d: error %v, execs %v", n, err, r.execs)
		}
		next := r.updater("1.1.0", false)
		next.Boot()
		_, pending := next.ConfirmDeadline()
		if n == 1 && (!bytes.Equal(r.binary(), r.old) || pending || r.exists(r.exe+".bak")) {
			t.Fatal("swapped although cancelled before the swap")
		}
		if n == 2 && (!bytes.Equal(r.binary(), newBin) || !pending || !r.exists(r.exe+".bak")) {
			t.Fatal("after the swap: want the new binary pending with its backup")
		}
	}
}

// A confirmation that cannot be recorded keeps the backup (the file still
// says pending and counts starts) but stops the deadline; the next
// heartbeat records it and drops the backup.
func TestConfirmKeepsBackupUntilRecorded(t *testing.T) {
	r := newRig(t)
	newBin := r.installed()
	u := r.updater("1.1.0", false)
	u.Boot()
	statePath := u.o.StatePath
	u.o.StatePath = filepath.Join(r.exe, "not-a-dir.json")
	u.Confirm()
	if !r.exists(r.exe + ".bak") {
		t.Fatal("the backup was removed although the confirmation was not recorded")
	}
	if _, ok := u.ConfirmDeadline(); ok {
		t.Fatal("still waiting for a confirmation")
	}
	u.Expire()
	if !bytes.Equal(r.binary(), newBin) || len(r.execs) != 0 {
		t.Fatal("a confirmed version was rolled back")
	}
	u.o.StatePath = statePath
	u.Confirm()
	if r.exists(r.exe + ".bak") {
		t.Fatal("the backup outlived the recorded confirmation")
	}
	if st, _ := loadState(statePath); st.Pending != nil {
		t.Fatalf("still pending on file: %+v", st.Pending)
	}
}
