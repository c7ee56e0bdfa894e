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
