package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"openflare/agent/osuser"
	"openflare/testing/nstest"
	"openflare/testing/testsupport"
)

// With openflare-www on the node and no nginx_user, the workers run as
// openflare-www: another service's user (www-data, as PHP-FPM and Apache
// run) cannot open a worker's memory, where the TLS keys of the sites it
// serves lie, while the workers' own uid can, so the denial is the user's
// doing. The route serves throughout.
func TestWorkerUserOwnsWorkerMemory(t *testing.T) {
	needRealRoot(t)
	other, err := osuser.DB{}.Resolve(osuser.Host{EUID: 0}, "www-data", "")
	if err != nil {
		t.Skipf("no www-data here to play the other service: %v", err)
	}
	own := addWorkerUser(t)
	cp := controlPlane(t)
	n, _ := appV1(t, cp)

	if st := n.state(); !strings.HasPrefix(st.Workers, "openflare-www:openflare-www ") || !strings.Contains(st.Workers, "the workers' own user") {
		t.Errorf("state: workers %q, want openflare-www as the workers' own user", st.Workers)
	}
	master := n.nginxPID()
	workers := workerPIDs(master)
	if len(workers) == 0 {
		t.Fatal("no nginx workers")
	}
	for _, w := range workers {
		uids, gids := statusIDs(t, w, "Uid:"), statusIDs(t, w, "Gid:")
		for _, id := range append(uids, gids...) {
			if id != own {
				t.Fatalf("nginx worker %d runs as uids %v gids %v, want all %d (openflare-www)", w, uids, gids, own)
			}
		}
	}

	yama := strings.TrimSpace(readFileOr("/proc/sys/kernel/yama/ptrace_scope"))
	for _, w := range workers {
		out, err := openMem(w, other.UID, other.GID)
		if err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("www-data opened worker %d's memory: %v %s", w, err, out)
		}
		if yama != "" && yama != "0" {
			// Yama refuses the workers' own uid too, so the control
			// cannot show that the user makes the difference.
			continue
		}
		if out, err := openMem(w, own, own); err != nil {
			t.Errorf("the workers' own uid cannot open worker %d's memory (%v %s): the denial above proves nothing", w, err, out)
		}
	}
	if yama != "" && yama != "0" {
		t.Logf("Yama ptrace_scope %s: the control as the workers' own uid was left out", yama)
	}

	if r := get("app.test", "/"); r.status != 200 || r.body != "origin-ok v1 /" {
		t.Errorf("app.test after the checks: %d %q %v", r.status, r.body, r.err)
	}
}

// addWorkerUser adds openflare-www, with a free system uid and gid, to the
// accounts the agent and nginx read, for this test only: copies of
// /etc/passwd and /etc/group with the entries bind-mounted over the real
// files in the tests' own mount namespace, which nothing outside sees, and
// unmounted when the test ends. It returns the uid (and gid).
func addWorkerUser(t *testing.T) int {
	t.Helper()
	passwd, group := testsupport.ReadFile(t, "/etc/passwd"), testsupport.ReadFile(t, "/etc/group")
	for _, text := range []string{passwd, group} {
		if strings.HasPrefix(text, "openflare-www:") || strings.Contains(text, "\nopenflare-www:") {
			t.Skip("this host has an openflare-www user or group; the test brings its own")
		}
	}
	used := map[string]bool{}
	for _, text := range []string{passwd, group} {
		for _, line := range strings.Split(text, "\n") {
			if f := strings.Split(line, ":"); len(f) > 2 {
				used[f[2]] = true
			}
		}
	}
	id := 999
	for ; id >= 100 && used[strconv.Itoa(id)]; id-- {
	}
	if id < 100 {
		t.Fatal("no free system id from 999 down to 100")
	}
	dir := t.TempDir()
	for file, entry := range map[string]string{
		"/etc/passwd": fmt.Sprintf("openflare-www:x:%d:%d:openflare-agent nginx workers:/nonexistent:/usr/sbin/nologin\n", id, id),
		"/etc/group":  fmt.Sprintf("openflare-www:x:%d:\n", id),
	} {
		if err := nstest.PrivateMount(file); err != nil {
			t.Fatalf("refusing to mount over %s: %v", file, err)
		}
		text := testsupport.ReadFile(t, file)
		if text != "" && !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		copied := filepath.Join(dir, filepath.Base(file))
		if err := os.WriteFile(copied, []byte(text+entry), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(copied, file, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind-mount a copy of %s with openflare-www over it: %v", file, err)
		}
		t.Cleanup(func() {
			if err := unix.Unmount(file, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount the copy of %s: %v", file, err)
			}
		})
	}
	return id
}

// statusIDs are the four ids (real, effective, saved, file system) of a
// process's Uid: or Gid: line in /proc/<pid>/status.
func statusIDs(t *testing.T, pid int, key string) []int {
	t.Helper()
	for _, line := range strings.Split(testsupport.ReadFile(t, fmt.Sprintf("/proc/%d/status", pid)), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 || f[0] != key {
			continue
		}
		var ids []int
		for _, s := range f[1:] {
			id, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("/proc/%d/status: %q", pid, line)
			}
			ids = append(ids, id)
		}
		return ids
	}
	t.Fatalf("/proc/%d/status has no %s line", pid, key)
	return nil
}

// openMem opens /proc/<pid>/mem as uid:gid, with no supplementary groups,
// and reads nothing: the kernel decides at the open whether the caller may
// read that process's memory.
func openMem(pid, uid, gid int) (string, error) {
	cmd := exec.Command("/bin/sh", "-c", `exec 3<"/proc/$1/mem"`, "sh", strconv.Itoa(pid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
