package landing

import (
	"os"
	"syscall"
	"testing"

	"openflare/agent/logrotate"
	"openflare/agent/osuser"
)

// Prepare leaves the three logs there before nginx opens them, closed to
// other users whatever the umask, and closes those an older release left
// world-readable; a link the owner put in place of a log stays.
func TestPrepareMakesLogsPrivate(t *testing.T) {
	tr, _ := testTree(t)
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	if err := tr.Prepare(nobody, false); err != nil {
		t.Fatal(err)
	}
	want := logrotate.PermFor(osuser.DB{})
	check := func(when string, logs ...string) {
		t.Helper()
		for _, p := range logs {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode().Perm() != want.Mode || (want.GID >= 0 && int(st.Gid) != want.GID) || int(st.Uid) != os.Geteuid() {
				t.Errorf("%s: %s is %v %d:%d, want %v group %d, the agent's", when, p, fi.Mode().Perm(), st.Uid, st.Gid, want.Mode, want.GID)
			}
		}
	}
	check("created", tr.Paths.Logs()...)

	// An older release's log: nginx made it 0644, and it has lines.
	if err := os.Chmod(tr.Paths.AccessLog, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tr.Paths.AccessLog, []byte("a line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(tr.Paths.HTTPErrorLog); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", tr.Paths.HTTPErrorLog); err != nil {
		t.Fatal(err)
	}
	if err := tr.Prepare(nobody, false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(tr.Paths.AccessLog); string(b) != "a line\n" {
		t.Errorf("the access log's lines: %q", b)
	}
	if link, err := os.Readlink(tr.Paths.HTTPErrorLog); err != nil || link != "/dev/null" {
		t.Errorf("the owner's link: %q %v", link, err)
	}
	check("restricted", tr.Paths.AccessLog, tr.Paths.ErrorLog)
}
