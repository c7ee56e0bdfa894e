package linux

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func writeProc(t *testing.T, root string, pid int, stat, cmdline string) {
	t.Helper()
	dir := filepath.Join(root, "proc", strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644)
	os.WriteFile(filepath.Join(dir, "cmdline"), []byte(cmdline), 0o644)
}

func TestProcessAndChildren(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, 10, "10 (nginx) S 1 10 10 0", "nginx: master process /usr/sbin/nginx -c /x\x00")
	// comm with spaces and a ')' must not shift the fields.
	writeProc(t, root, 11, "11 (nginx: wo) rk) S 10 10 10 0", "nginx: worker process\x00\x00")
	writeProc(t, root, 12, "12 (nginx) Z 10 10 10 0", "")
	writeProc(t, root, 13, "13 (sh) R 1 13 13 0", "sh\x00-c\x00true\x00")
	writeProc(t, root, 14, "garbage", "x")
	os.MkdirAll(filepath.Join(root, "proc", "self"), 0o755)
	fs := NewFS(root)

	p, err := fs.Process(10)
	if err != nil || p.PPID != 1 || p.State != 'S' || p.Cmdline != "nginx: master process /usr/sbin/nginx -c /x" {
		t.Fatalf("%+v %v", p, err)
	}
	if p, err := fs.Process(13); err != nil || p.Cmdline != "sh -c true" {
		t.Fatalf("%+v %v", p, err)
	}
	if _, err := fs.Process(14); err == nil {
		t.Fatal("garbage stat accepted")
	}
	if _, err := fs.Process(99); err == nil {
		t.Fatal("missing process found")
	}
	kids := fs.Children(10)
	if len(kids) != 1 || kids[0].PID != 11 || kids[0].Cmdline != "nginx: worker process" {
		t.Fatalf("children %+v", kids)
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0"))
	f.Add([]byte("5 (a) b) Z 4"))
	f.Fuzz(func(t *testing.T, b []byte) {
		state, ppid, err := parseProcStat(b)
		if err == nil && (ppid < 0 || state == 0 && len(b) == 0) {
			t.Fatalf("%q → %c %d", b, state, ppid)
		}
	})
}

func TestSignalPendingAndBlockedIn(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "proc", "10")
	os.MkdirAll(dir, 0o755)
	// SIGHUP (1) pending for the process, SIGCHLD (17) for the thread.
	os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\tnginx\nSigQ:\t1/63\nSigPnd:\t0000000000010000\nShdPnd:\t0000000000000001\nSigBlk:\t0\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "syscall"), []byte("130 0x7ffd 0x8 0x0 0x0 0x0 0x0 0x7ffd 0x7f\n"), 0o644)
	fs := NewFS(root)
	for sig, want := range map[int]bool{1: true, 17: true, 15: false} {
		if got, err := fs.SignalPending(10, sig); err != nil || got != want {
			t.Errorf("signal %d pending: %v %v", sig, got, err)
		}
	}
	if nr, blocked, err := fs.BlockedIn(10); err != nil || !blocked || nr != 130 {
		t.Fatalf("blocked in %d %v %v", nr, blocked, err)
	}
	for text, blocked := range map[string]bool{"running\n": false, "-1 0x7ffd 0x7f\n": false} {
		os.WriteFile(filepath.Join(dir, "syscall"), []byte(text), 0o644)
		if _, got, err := fs.BlockedIn(10); err != nil || got != blocked {
			t.Errorf("%q: %v %v", text, got, err)
		}
	}
	os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\tnginx\nSigPnd:\tzz\n"), 0o644)
	if _, err := fs.SignalPending(10, 1); err == nil {
		t.Error("a malformed mask was read")
	}
	os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\tnginx\n"), 0o644)
	if _, err := fs.SignalPending(10, 1); err == nil {
		t.Error("a status without masks was read")
	}
}

// The kernel's list of a thread's children stands in for the scan of
// /proc; a kernel without it (no file) gets the scan.
func TestChildrenFromTheKernelsList(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, 10, "10 (nginx) S 1 10 10 0", "nginx: master process\x00")
	writeProc(t, root, 11, "11 (nginx) S 10 10 10 0", "nginx: worker process\x00")
	writeProc(t, root, 12, "12 (nginx) S 10 10 10 0", "nginx: worker process\x00")
	task := filepath.Join(root, "proc", "10", "task", "10")
	os.MkdirAll(task, 0o755)
	// The list names 12 only: what it says is what counts.
	os.WriteFile(filepath.Join(task, "children"), []byte("12 "), 0o644)
	fs := NewFS(root)
	if kids := fs.Children(10); len(kids) != 1 || kids[0].PID != 12 {
		t.Fatalf("children %+v", kids)
	}
	os.WriteFile(filepath.Join(task, "children"), []byte("12 x"), 0o644)
	if kids := fs.Children(10); len(kids) != 2 {
		t.Fatalf("a malformed list must fall back to the scan: %+v", kids)
	}
}
