package logrotate

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"openflare/agent/osuser"
)

// fakeNginx writes the logs as nginx does: through descriptors opened
// with O_APPEND, which stay on a moved file until Reopen.
type fakeNginx struct {
	t     *testing.T
	files map[string]*os.File
	// fail makes Reopen fail; calls counts every Reopen.
	fail  error
	calls int
}

func newNginx(t *testing.T, paths ...string) *fakeNginx {
	n := &fakeNginx{t: t, files: map[string]*os.File{}}
	for _, p := range paths {
		n.open(p)
	}
	t.Cleanup(func() {
		for _, f := range n.files {
			f.Close()
		}
	})
	return n
}

func (n *fakeNginx) open(p string) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	if old := n.files[p]; old != nil {
		old.Close()
	}
	n.files[p] = f
}

func (n *fakeNginx) write(p, s string) {
	n.t.Helper()
	if _, err := n.files[p].WriteString(s); err != nil {
		n.t.Fatal(err)
	}
}

func (n *fakeNginx) Reopen() error {
	n.calls++
	if n.fail != nil {
		return n.fail
	}
	for p := range n.files {
		n.open(p)
	}
	return nil
}

// testPerm lets the group read, as adm would, with a group every test
// process may give its files to.
func testPerm() Perm { return Perm{Mode: 0o640, GID: os.Getegid()} }

func testRotator(t *testing.T, n Reopener, logs ...string) (*Rotator, *bytes.Buffer) {
	var out bytes.Buffer
	return &Rotator{
		Logs:     logs,
		MaxBytes: 100,
		Keep:     2,
		Perm:     testPerm(),
		Nginx:    n,
		Log:      slog.New(slog.NewTextHandler(&out, nil)),
	}, &out
}

func check(t *testing.T, r *Rotator) {
	t.Helper()
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
}

func content(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "(none)"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// expectFiles checks the log at p and its moved files hold want (the log
// first), and that nothing else of the log is in its directory.
func expectFiles(t *testing.T, p string, want ...string) {
	t.Helper()
	var got []string
	for i := range want {
		name := p
		if i > 0 {
			name = copyPath(p, i)
		}
		got = append(got, content(t, name))
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("%s and its copies hold %q, want %q", filepath.Base(p), got, want)
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	n := 0
	for _, e := range entries {
		if base := filepath.Base(p); e.Name() == base || strings.HasPrefix(e.Name(), base+".") || e.Name() == "."+base+".new" {
			n++
		}
	}
	if exist := len(want) - strings.Count(strings.Join(want, "|"), "(none)"); n != exist {
		t.Fatalf("%d files of %s in its directory, want %d", n, filepath.Base(p), exist)
	}
}

func line(c byte) string { return strings.Repeat(string(c), 59) + "\n" } // 60 bytes

func TestRotateBySize(t *testing.T) {
	p := filepath.Join(t.TempDir(), "error.log")
	n := newNginx(t, p)
	r, out := testRotator(t, n, p)

	n.write(p, line('a'))
	check(t, r)
	expectFiles(t, p, line('a'), "(none)")
	if n.calls != 0 {
		t.Fatalf("%d reopens without a rotation", n.calls)
	}

	n.write(p, line('b')) // 120 bytes: over
	check(t, r)
	n.write(p, line('c'))
	expectFiles(t, p, line('c'), line('a')+line('b'))
	if n.calls != 1 || !strings.Contains(out.String(), "log rotated") {
		t.Fatalf("%d reopens; log:\n%s", n.calls, out)
	}

	for _, c := range []byte("de") {
		n.write(p, line(c))
		check(t, r)
	}
	n.write(p, line('f'))
	check(t, r)
	// Two kept: the oldest (a, b) is gone.
	expectFiles(t, p, "", line('e')+line('f'), line('c')+line('d'), "(none)")
	if n.calls != 3 {
		t.Fatalf("%d reopens after 3 rotations", n.calls)
	}
}

// Every log nginx writes is checked, and one reopen covers them all.
func TestRotateSeveralLogs(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "access.log"), filepath.Join(dir, "error.log"), filepath.Join(dir, "http-error.log")
	n := newNginx(t, a, b, c)
	r, _ := testRotator(t, n, a, b, c)
	n.write(a, line('a')+line('a'))
	n.write(c, line('c')+line('c'))
	n.write(b, line('b'))
	check(t, r)
	expectFiles(t, a, "", line('a')+line('a'))
	expectFiles(t, b, line('b'), "(none)")
	expectFiles(t, c, "", line('c')+line('c'))
	if n.calls != 1 {
		t.Fatalf("%d reopens, want one for both", n.calls)
	}
}

// With log_keep 0 an error log is emptied where it is: no copies, no
// reopen, and nginx's next line lands at its start.
func TestKeepZeroEmptiesInPlace(t *testing.T) {
	p := filepath.Join(t.TempDir(), "http-error.log")
	n := newNginx(t, p)
	r, _ := testRotator(t, n, p)
	r.Keep = 0
	before, _ := os.Stat(p)
	n.write(p, line('a')+line('b'))
	check(t, r)
	n.write(p, line('c'))
	expectFiles(t, p, line('c'), "(none)")
	after, _ := os.Stat(p)
	if !os.SameFile(before, after) || n.calls != 0 {
		t.Fatalf("the log was replaced (same file: %v) or nginx told to reopen (%d)", os.SameFile(before, after), n.calls)
	}
}

// A smaller log_keep drops the files beyond it at the next check.
func TestKeepLowered(t *testing.T) {
	p := filepath.Join(t.TempDir(), "error.log")
	for i, s := range []string{"now", "one", "two", "three"} {
		name := p
		if i > 0 {
			name = copyPath(p, i)
		}
		os.WriteFile(name, []byte(s), 0o600)
	}
	r, _ := testRotator(t, nil, p)
	r.Keep = 1
	check(t, r)
	expectFiles(t, p, "now", "one", "(none)", "(none)")
}

// New logs get the mode whatever the umask, are the agent's, and are
// never more open than that; where the group cannot be given (adm missing
// or out of reach), only the owner reads.
func TestNewLogModes(t *testing.T) {
	for _, umask := range []int{0, 0o077} {
		old := syscall.Umask(umask)
		p := filepath.Join(t.TempDir(), "error.log")
		n := newNginx(t, p)
		os.Chmod(p, 0o644) // as nginx creates it
		r, _ := testRotator(t, n, p)
		n.write(p, line('a')+line('b'))
		check(t, r)
		syscall.Umask(old)
		for _, name := range []string{p, copyPath(p, 1)} {
			fi, err := os.Stat(name)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode().Perm() != 0o640 || int(st.Gid) != os.Getegid() || int(st.Uid) != os.Geteuid() {
				t.Errorf("umask %03o: %s is %v %d:%d, want 0640 and the agent's", umask, filepath.Base(name), fi.Mode().Perm(), st.Uid, st.Gid)
			}
		}
	}

	db := func(group string) Perm {
		root := t.TempDir()
		os.Mkdir(filepath.Join(root, "etc"), 0o755)
		os.WriteFile(filepath.Join(root, "etc", "group"), []byte(group), 0o644)
		return PermFor(osuser.DB{Root: root})
	}
	if p := db("root:x:0:\nadm:x:4:syslog\n"); p != (Perm{Mode: 0o640, GID: 4}) {
		t.Errorf("with adm: %+v", p)
	}
	if p := db("root:x:0:\nnogroup:x:65534:\n"); p != (Perm{Mode: 0o600, GID: -1}) {
		t.Errorf("without adm: %+v", p)
	}
	if os.Geteuid() != 0 {
		// A group the process is not in cannot be given: the owner alone.
		p := filepath.Join(t.TempDir(), "access.log")
		if err := (Perm{Mode: 0o640, GID: 4}).Ensure(p); err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
			t.Errorf("a group out of reach: %v, want 0600", fi.Mode().Perm())
		}
	}
}

// A failing reopen is reported, says what it means, and is tried again
// at every check until it succeeds; nothing is moved again meanwhile.
func TestReopenFailure(t *testing.T) {
	p := filepath.Join(t.TempDir(), "error.log")
	n := newNginx(t, p)
	r, _ := testRotator(t, n, p)
	check(t, r)
	n.fail = errors.New("signal master 4242: operation not permitted")
	n.write(p, line('a')+line('b'))
	err := r.Check()
	if err == nil || !strings.Contains(err.Error(), "tell nginx to reopen its logs: signal master 4242: operation not permitted") ||
		!strings.Contains(err.Error(), "writes to the files moved aside") {
		t.Fatalf("Check: %v", err)
	}
	n.write(p, line('c')) // still the moved file
	if err := r.Check(); err == nil || n.calls != 2 {
		t.Fatalf("second check: %v after %d reopens", err, n.calls)
	}
	n.fail = nil
	check(t, r)
	n.write(p, line('d'))
	expectFiles(t, p, line('d'), line('a')+line('b')+line('c'))
	check(t, r)
	if n.calls != 3 {
		t.Fatalf("%d reopens, want none once one succeeded", n.calls)
	}
}

// A rotation cut short at any step (a crash, a power cut) is finished by
// the next agent's first check: the log's lines end up in log.1, every
// older file once, one step up, the oldest dropped, and nginx, which went
// on writing to whichever file it had open, is told to reopen.
func TestInterruptedRotation(t *testing.T) {
	big := line('L') + line('L')
	steps := []struct {
		name  string
		files []string // log, .1, .2, .3; "-" for none
		tmp   bool
		link  bool // .1 is the log itself
	}{
		{"before anything", []string{big, "C1", "C2", "C3"}, false, false},
		{"after the oldest was dropped", []string{big, "C1", "C2", "-"}, false, false},
		{"after .2 moved up", []string{big, "C1", "-", "C2"}, false, false},
		{"after .1 moved up", []string{big, "-", "C1", "C2"}, false, false},
		{"after the new log was created", []string{big, "-", "C1", "C2"}, true, false},
		{"after the link", []string{big, "-", "C1", "C2"}, true, true},
		{"after the new log replaced it", []string{"", big, "C1", "C2"}, false, false},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "error.log")
			for i, c := range s.files {
				name := p
				if i > 0 {
					name = copyPath(p, i)
				}
				if c != "-" {
					os.WriteFile(name, []byte(c), 0o640)
				}
			}
			if s.tmp {
				os.WriteFile(filepath.Join(filepath.Dir(p), ".error.log.new"), nil, 0o640)
			}
			if s.link {
				if err := os.Link(p, copyPath(p, 1)); err != nil {
					t.Fatal(err)
				}
			}
			// nginx has the original log open, wherever it is now, and
			// writes on until it reopens.
			orig := p
			if s.files[0] != big {
				orig = copyPath(p, 1)
			}
			n := newNginx(t)
			f, err := os.OpenFile(orig, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			n.files[p] = f
			n.write(p, "x")
			r, _ := testRotator(t, n, p)
			r.Keep = 3
			check(t, r)
			if n.calls != 1 {
				t.Fatalf("%d reopens, want 1", n.calls)
			}
			n.write(p, "y")
			expectFiles(t, p, "y", big+"x", "C1", "C2")
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), ".error.log.new")); err == nil {
				t.Fatal("the new log of the interrupted rotation is left behind")
			}
		})
	}
}

// Without hard links (FAT) the log is renamed aside instead, and the
// outcome is the same.
func TestRotateWithoutHardLinks(t *testing.T) {
	link = func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EPERM} }
	t.Cleanup(func() { link = os.Link })
	p := filepath.Join(t.TempDir(), "error.log")
	n := newNginx(t, p)
	r, _ := testRotator(t, n, p)
	n.write(p, line('a')+line('b'))
	check(t, r)
	n.write(p, line('c'))
	expectFiles(t, p, line('c'), line('a')+line('b'))
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Fatalf("new log %v", fi.Mode().Perm())
	}
}

// A log replaced by a link (to /dev/null, say) is neither rotated nor
// followed.
func TestLinkedLogLeftAlone(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	os.WriteFile(target, []byte(strings.Repeat("z", 500)), 0o644)
	p := filepath.Join(dir, "error.log")
	os.Symlink(target, p)
	r, _ := testRotator(t, nil, p)
	check(t, r)
	if fi, _ := os.Stat(target); fi.Size() != 500 || fi.Mode().Perm() != 0o644 {
		t.Fatalf("the link's target was changed: %d bytes, %v", fi.Size(), fi.Mode().Perm())
	}
	if _, err := os.Lstat(copyPath(p, 1)); err == nil {
		t.Fatal("the link was rotated")
	}
}
