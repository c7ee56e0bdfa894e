package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestWriteFileModesAndDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "f.json")
	if err := WriteFile(path, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	di, _ := os.Stat(dir)
	fi, _ := os.Stat(path)
	if di.Mode().Perm() != PrivateDir || fi.Mode().Perm() != 0o600 {
		t.Fatalf("dir %v file %v", di.Mode().Perm(), fi.Mode().Perm())
	}
	if err := WriteFile(path, []byte("[]"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "[]" {
		t.Fatalf("content %q", b)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".f.json.tmp-*")); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

// The umask does not decide the modes: the leaf gets exactly its mode,
// missing parents 0755, and existing directories are not touched.
func TestMkdirAllIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := t.TempDir()
	leaf := filepath.Join(base, "p", "q", "leaf")
	if err := MkdirAll(leaf, 0o711); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{leaf: 0o711, filepath.Dir(leaf): 0o755, filepath.Join(base, "p"): 0o755, base: 0o700} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(filepath.Join(base, "file"), 0o755); err == nil {
		t.Fatal("a file was taken for a directory")
	}
}
