package landing

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"openflare/agent/protocol"
)

// stageOf stages files in a fresh stage under t's temp dir.
func stageOf(t *testing.T, files ...protocol.SupportFile) *Stage {
	t.Helper()
	st, err := NewStage(filepath.Join(t.TempDir(), "stage"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := st.Add(f); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// A stage is the agent's own, starts empty whatever was left in it, keeps
// its files end to end in one file that no name reaches (so no path of
// the server's names anything on disk), hands them on in the order they
// came, duplicates included, and leaves nothing behind once removed.
func TestStageHoldsFilesPrivately(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "stage")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "left-by-an-older-release"), []byte("x"), 0o644)
	st, err := NewStage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("stage mode %v, %v", fi.Mode().Perm(), err)
	}
	paths := []string{"1.key", "../../escape.crt", "/etc/passwd", "a/../../b", "1.key"}
	for i, p := range paths {
		if err := st.Add(protocol.SupportFile{Path: p, Content: "content " + strconv.Itoa(i)}); err != nil {
			t.Fatalf("%q: %v", p, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("the stage's files have names: %v", entries)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 1 {
		t.Fatalf("files beside the stage: %v", entries)
	}
	got := st.Files()
	if len(got) != len(paths) {
		t.Fatalf("%d files, want %d", len(got), len(paths))
	}
	for i, f := range got {
		b, err := io.ReadAll(io.NewSectionReader(f.Staged, 0, f.Staged.Size()))
		if f.Path != paths[i] || f.Content != "" || string(b) != "content "+strconv.Itoa(i) || err != nil {
			t.Errorf("file %d: %q holds %q (%v)", i, f.Path, b, err)
		}
	}
	if err := st.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("stage left after Remove: %v", err)
	}
	if _, err := got[0].Staged.ReadAt(make([]byte, 1), 0); err == nil {
		t.Fatal("a removed stage still reads")
	}
}

// The stage refuses a file over 64 MiB, the file after MaxSupportFiles, and
// the byte that takes what it holds past 256 MiB.
func TestStageBounds(t *testing.T) {
	st := stageOf(t, protocol.SupportFile{Path: "max.crt", Content: strings.Repeat("m", MaxSupportFileBytes)})
	err := st.Add(protocol.SupportFile{Path: "big.crt", Content: strings.Repeat("b", MaxSupportFileBytes+1)})
	if err == nil || !strings.Contains(err.Error(), `support file "big.crt" holds 67108865 bytes, over the 64 MiB`) {
		t.Fatalf("a file over 64 MiB: %v", err)
	}

	st = stageOf(t)
	for i := range MaxSupportFiles {
		if err := st.Add(protocol.SupportFile{Path: strconv.Itoa(i) + ".crt"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Add(protocol.SupportFile{Path: "0.crt"}); err == nil || !strings.Contains(err.Error(), "more than 10000 support files") {
		t.Fatalf("file %d: %v", MaxSupportFiles+1, err)
	}

	st = stageOf(t)
	mib := strings.Repeat("x", 1<<20)
	for i := range MaxSupportBytes>>20 - 1 {
		if err := st.Add(protocol.SupportFile{Path: strconv.Itoa(i), Content: mib}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Add(protocol.SupportFile{Path: "last", Content: mib[1:]}); err != nil {
		t.Fatalf("the last MiB but a byte: %v", err)
	}
	if err := st.Add(protocol.SupportFile{Path: "past", Content: "xx"}); err == nil || !strings.Contains(err.Error(), "support files over 256 MiB") {
		t.Fatalf("past 256 MiB: %v", err)
	}
	if err := st.Add(protocol.SupportFile{Path: "fits", Content: "x"}); err != nil {
		t.Fatalf("the last byte under 256 MiB: %v", err)
	}
}

// A set planned from staged files is the set planned from the same files
// in memory: the same generation, found unchanged on disk once either
// landed, the staged content landed byte for byte with its modes, and the
// policy parse given the staged certificates.
func TestPlanFromStage(t *testing.T) {
	files := []protocol.SupportFile{
		{Path: "7.crt", Content: strings.Repeat("CERT\n", 20_000)},
		{Path: "7.key", Content: "KEY\n"},
		{Path: "error_pages/origin_error.html.tmpl", Content: "<p>{{status}}</p>"},
		{Path: "empty.crt"},
	}
	st := stageOf(t, files...)
	p := testPaths(t.TempDir())
	inMemory, err := Plan(p, "http {\n}\n", "ROUTE", files)
	if err != nil {
		t.Fatal(err)
	}
	staged, err := Plan(p, "http {\n}\n", "ROUTE", st.Files())
	if err != nil {
		t.Fatal(err)
	}
	if string(staged.Files[0].Data) != string(inMemory.Files[0].Data) {
		t.Fatal("a staged set stamps another generation than the same set in memory")
	}
	if staged.Unchanged() {
		t.Fatal("an empty tree taken for the set")
	}
	if err := staged.Write(nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		pl, _ := Place(f.Path)
		b, err := os.ReadFile(pl.Path(p))
		if err != nil || string(b) != f.Content {
			t.Fatalf("%s landed as %d bytes (%v), want %d", f.Path, len(b), err, len(f.Content))
		}
		if fi, _ := os.Stat(pl.Path(p)); fi.Mode().Perm() != pl.Mode {
			t.Errorf("%s: mode %v, want %v", f.Path, fi.Mode().Perm(), pl.Mode)
		}
	}
	if !staged.Unchanged() || !inMemory.Unchanged() {
		t.Fatal("the landed set is not found unchanged")
	}
	// One byte differs, the size alike: the set is no longer on disk.
	os.WriteFile(filepath.Join(p.CertDir, "7.crt"), []byte(strings.Repeat("CERT\n", 19_999)+"CERt\n"), 0o644)
	if staged.Unchanged() {
		t.Fatal("a changed certificate taken for the staged one")
	}
	touched, err := staged.Touched()
	if err != nil || !slices.Contains(touched, filepath.Join(p.CertDir, "7.crt")) || slices.Contains(touched, filepath.Join(p.CertDir, "7.key")) {
		t.Fatalf("touched %v, %v", touched, err)
	}

	dir := filepath.Join(t.TempDir(), "parse")
	if _, err := staged.WriteParseCopy(p, dir, "events {}\n", "ROUTE"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "certs", "7.crt")); string(b) != files[0].Content {
		t.Fatalf("the copy's certificate holds %d bytes", len(b))
	}
}

// A stage removed before its set is planned fails the plan, named.
func TestPlanStageGone(t *testing.T) {
	st := stageOf(t, protocol.SupportFile{Path: "7.crt", Content: "CERT"})
	st.Remove()
	_, err := Plan(testPaths(t.TempDir()), "m", "r", st.Files())
	if err == nil || !strings.Contains(err.Error(), "read the staged content of ") {
		t.Fatalf("err = %v", err)
	}
}
