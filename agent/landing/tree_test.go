package landing

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"openflare/agent/osuser"
	"openflare/testing/nstest"
)

// nobody is a worker that owns none of the test's files: only "other"
// permission bits let it in, as when the agent is root.
var nobody = osuser.Identity{User: "nobody", Group: "nogroup", UID: 65534, GID: 65534}

func testTree(t *testing.T) (Tree, string) {
	t.Helper()
	base := nstest.TraversableTempDir(t)
	// Like mktemp -d: the data dir starts closed to everyone else.
	dd := filepath.Join(base, "data")
	if err := os.Mkdir(dd, 0o700); err != nil {
		t.Fatal(err)
	}
	p := testPaths(dd)
	p.OpenRestyCertDir, p.OpenRestyLuaDir = p.CertDir, p.LuaDir
	return Tree{Paths: p, DataDir: dd, StateDir: filepath.Join(dd, "var", "lib", "openflare")}, base
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// Under umask 077 the tree still comes out usable by the workers, and the
// agent's private directory stays closed.
func TestPrepareUnderUmask077(t *testing.T) {
	tr, base := testTree(t)
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	if ancestorsClosed(base) {
		t.Skip("the temp root is not traversable by others on this machine")
	}
	if err := tr.Prepare(nobody, false); err != nil {
		t.Fatal(err)
	}
	for _, d := range tr.readDirs() {
		if m := mode(t, d); m != 0o755 {
			t.Errorf("worker-read dir %s is %v", d, m)
		}
		if blocked, err := nobody.Unreachable(d); err != nil || blocked != "" {
			t.Errorf("%s: blocked at %q (%v)", d, blocked, err)
		}
	}
	if m := mode(t, tr.DataDir); m&0o001 == 0 || m&0o004 != 0 {
		t.Errorf("data_dir is %v: want traversable, not listable", m)
	}
	if m := mode(t, tr.StateDir); m&0o004 != 0 {
		t.Errorf("state dir is %v: listable by the workers", m)
	}
	for _, d := range tr.writeDirs() {
		if m := mode(t, d); m != 0o700 {
			t.Errorf("worker temp dir %s is %v, want 0700 (nginx gives it to the workers)", d, m)
		}
	}
	if problems := tr.Unreadable(osuser.Identity{UID: 1 + os.Geteuid(), GID: os.Getegid()}); len(problems) != 0 {
		t.Errorf("the owner cannot use its own tree: %q", problems)
	}
}

// ancestorsClosed reports whether some parent of dir (outside the test's
// control, e.g. a 0700 home) stops other users.
func ancestorsClosed(dir string) bool {
	blocked, err := nobody.Unreachable(filepath.Dir(dir))
	return err != nil || blocked != ""
}

// A parent outside data_dir that the workers cannot traverse is reported,
// never changed.
func TestPrepareRefusesClosedParent(t *testing.T) {
	tr, base := testTree(t)
	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}
	err := tr.Prepare(nobody, false)
	if !errors.Is(err, ErrWorkerAccess) || !strings.Contains(err.Error(), "cannot traverse "+base+" (on the way") {
		t.Fatalf("err = %v", err)
	}
	// The layout is still complete, so nginx can be started from it.
	if _, err := os.Stat(tr.Paths.LuaDir); err != nil {
		t.Fatal(err)
	}
	if got := tr.Unreadable(nobody); len(got) == 0 || got[0].Path != base || got[0].Fixed {
		t.Fatalf("check's list: %v", got)
	}
	if m := mode(t, base); m != 0o700 {
		t.Fatalf("the agent changed a directory outside data_dir to %v", m)
	}
}

// Repair opens worker-read directories an older release left 0750 and
// makes their files readable, but leaves private keys alone; check's
// listing names what the workers cannot open.
func TestRepairAndUnreadable(t *testing.T) {
	tr, base := testTree(t)
	if ancestorsClosed(base) {
		t.Skip("the temp root is not traversable by others on this machine")
	}
	if err := tr.Prepare(nobody, false); err != nil {
		t.Fatal(err)
	}
	waf := filepath.Join(tr.Paths.LuaDir, "waf")
	check := filepath.Join(waf, "check.lua")
	key := filepath.Join(tr.Paths.CertDir, "1.key")
	if err := os.Mkdir(waf, 0o750); err != nil {
		t.Fatal(err)
	}
	for p, m := range map[string]os.FileMode{check: 0o640, key: 0o600} {
		if err := os.WriteFile(p, []byte("x"), m); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, m)
	}
	os.Chmod(waf, 0o750)
	got := fmt.Sprint(tr.Unreadable(nobody))
	if !strings.Contains(got, waf+": directory not traversable") || strings.Contains(got, key) {
		t.Fatalf("unreadable list: %s", got)
	}
	os.Chmod(waf, 0o755)
	if got := fmt.Sprint(tr.Unreadable(nobody)); !strings.Contains(got, check+": not readable") || !strings.Contains(got, "repairs this at start") {
		t.Fatalf("unreadable list: %s", got)
	}
	os.Chmod(waf, 0o750)
	if err := tr.Prepare(nobody, true); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, waf); m != 0o755 {
		t.Errorf("lua/waf is %v after repair", m)
	}
	if m := mode(t, check); m != 0o644 {
		t.Errorf("check.lua is %v after repair", m)
	}
	if m := mode(t, key); m != 0o600 {
		t.Errorf("private key is %v after repair", m)
	}
	if got := tr.Unreadable(nobody); len(got) != 0 {
		t.Errorf("still unreadable after repair: %q", got)
	}
}

// A link inside data_dir that points outside it is not followed: the
// directory it names keeps its mode.
func TestPrepareDoesNotFollowLinksOut(t *testing.T) {
	tr, base := testTree(t)
	outside := filepath.Join(base, "outside")
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(outside, 0o700)
	if err := os.MkdirAll(filepath.Join(tr.DataDir, "var"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(tr.DataDir, "var", "cache")); err != nil {
		t.Fatal(err)
	}
	err := tr.Prepare(nobody, true)
	if m := mode(t, outside); m != 0o700 {
		t.Fatalf("a directory outside data_dir went from 0700 to %v (err %v)", m, err)
	}
	if !errors.Is(err, ErrWorkerAccess) || !strings.Contains(err.Error(), outside) {
		t.Fatalf("err = %v, want the closed link target named", err)
	}
}

// Repair never opens the agent's own files, even when a worker-read tree
// is configured above the state directory.
func TestRepairKeepsStatePrivate(t *testing.T) {
	tr, _ := testTree(t)
	tr.Paths.PagesDir = filepath.Join(tr.DataDir, "var", "lib")
	if err := tr.Prepare(nobody, false); err != nil {
		t.Fatal(err)
	}
	st := filepath.Join(tr.StateDir, "agent-state.json")
	if err := os.WriteFile(st, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tr.Prepare(nobody, true); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, st); m != 0o600 {
		t.Fatalf("state file is %v after repair", m)
	}
	if m := mode(t, tr.StateDir); m&0o004 != 0 {
		t.Fatalf("state dir is %v after repair", m)
	}
}

// A managed directory reached through a link inside data_dir is refused:
// the route file would land wherever the link points.
func TestPrepareRefusesLinkedConfigDir(t *testing.T) {
	tr, base := testTree(t)
	elsewhere := filepath.Join(base, "elsewhere")
	os.MkdirAll(elsewhere, 0o755)
	os.MkdirAll(filepath.Dir(filepath.Dir(tr.Paths.Route)), 0o755)
	if err := os.Symlink(elsewhere, filepath.Dir(tr.Paths.Route)); err != nil {
		t.Fatal(err)
	}
	err := tr.Prepare(nobody, false)
	if !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), filepath.Dir(tr.Paths.Route)) {
		t.Fatalf("err = %v", err)
	}
}
