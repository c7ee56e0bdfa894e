package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

type doc struct {
	A string `json:"a"`
	B int    `json:"b"`
}

// What SaveJSON writes loads back, with PrivateFile; a crashed write's temp
// file is removed by the next load.
func TestSaveLoadJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	if err := SaveJSON(path, doc{A: "x", B: 2}); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(filepath.Dir(path), ".s.json.tmp-123")
	if err := os.WriteFile(stale, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got doc
	if err := LoadJSON(path, &got, nil); err != nil || got != (doc{A: "x", B: 2}) {
		t.Fatalf("loaded %+v, %v", got, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != PrivateFile {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temp file kept: %v", err)
	}
}

// A missing file leaves v as it was; one of the wrong shape is moved aside
// without a field of it reaching v.
func TestLoadJSONMissingAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	v := doc{A: "kept"}
	if err := LoadJSON(filepath.Join(dir, "none.json"), &v, nil); err != nil || v.A != "kept" {
		t.Fatalf("missing file: %+v, %v", v, err)
	}
	path := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(path, []byte(`{"a":"half","b":"two"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := LoadJSON(path, &v, nil); err != nil || v.A != "kept" {
		t.Fatalf("corrupt file: %+v, %v", v, err)
	}
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
		t.Fatalf("not moved aside: %v", aside)
	}
}
