package render

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"openflare/agent/protocol"
	"openflare/testing/testsupport"
)

// fixtureCase is one captured publish (fixtures/render/NN-name).
type fixtureCase struct {
	name string
	dir  string
	e4   protocol.ActiveConfig
}

// loadFixtures reads every case directory in place.
func loadFixtures(t testing.TB) []fixtureCase {
	t.Helper()
	root := testsupport.SharedDir(t, "fixtures/render")
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatalf("read fixtures: %v", err)
	}
	var cases []fixtureCase
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		var c fixtureCase
		c.name, c.dir = e.Name(), dir
		data, err := os.ReadFile(filepath.Join(dir, "e4.json"))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := json.Unmarshal(data, &c.e4); err != nil {
			t.Fatalf("%s: decode e4.json: %v", c.name, err)
		}
		cases = append(cases, c)
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].name < cases[j].name })
	return cases
}

func readFixtureFile(t *testing.T, dir, name string) (string, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(data), true
}

func TestGoldenFixtures(t *testing.T) {
	cases := loadFixtures(t)
	if len(cases) != 27 {
		t.Errorf("found %d fixture cases, want 27", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := Config(c.e4.SourceConfigJSON, c.e4.SupportFiles)
			if want, failing := readFixtureFile(t, c.dir, "agent_error.txt"); failing {
				if err == nil {
					t.Fatalf("Render succeeded, want error %q", want)
				}
				if err.Error() != want {
					t.Fatalf("error = %q, want %q", err.Error(), want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			wantMain, _ := readFixtureFile(t, c.dir, "main.conf")
			wantRoute, _ := readFixtureFile(t, c.dir, "routes.conf")
			if d := testsupport.DiffExcerpt(wantMain, out.Main); d != "" {
				t.Errorf("main.conf mismatch:\n%s", d)
			}
			if d := testsupport.DiffExcerpt(wantRoute, out.Route); d != "" {
				t.Errorf("routes.conf mismatch:\n%s", d)
			}
			var wantFiles []protocol.SupportFile
			raw, _ := readFixtureFile(t, c.dir, "checksum_files.json")
			if err := json.Unmarshal([]byte(raw), &wantFiles); err != nil {
				t.Fatalf("decode checksum_files.json: %v", err)
			}
			gotFiles := checksummedFiles(out.Files)
			if len(gotFiles) != len(wantFiles) {
				t.Errorf("checksummed files: got %v, want %v", filePaths(gotFiles), filePaths(wantFiles))
			} else {
				for i := range wantFiles {
					if gotFiles[i].Path != wantFiles[i].Path {
						t.Errorf("file %d path = %q, want %q", i, gotFiles[i].Path, wantFiles[i].Path)
						continue
					}
					if d := testsupport.DiffExcerpt(wantFiles[i].Content, gotFiles[i].Content); d != "" {
						t.Errorf("file %s mismatch:\n%s", wantFiles[i].Path, d)
					}
				}
			}
			wantSum, _ := readFixtureFile(t, c.dir, "checksum.txt")
			wantSum = strings.TrimSpace(wantSum)
			if wantSum != c.e4.Checksum {
				t.Errorf("fixture inconsistent: checksum.txt %s, e4.json %s", wantSum, c.e4.Checksum)
			}
			if got := out.Checksum(); got != wantSum {
				t.Errorf("Checksum() = %s, want %s", got, wantSum)
			}
			if src := fileContent(out.Files, SourceConfigFile); src != c.e4.SourceConfigJSON {
				t.Errorf("openresty_config.json is not the raw source JSON")
			}
			// The output names the IP groups its own waf_config.json references.
			if ids, err := ipGroupIDsOf([]byte(fileContent(out.Files, WAFConfigFile))); err != nil || !slices.Equal(ids, out.IPGroups) {
				t.Errorf("IPGroups %v, waf_config.json references %v (%v)", out.IPGroups, ids, err)
			}
			if _, err := PagesProjectIDs(c.e4.SourceConfigJSON); err != nil {
				t.Errorf("PagesProjectIDs: %v", err)
			}
		})
	}
}

// checksummedFiles is the file list that goes into the checksum.
func checksummedFiles(files []protocol.SupportFile) []protocol.SupportFile {
	var out []protocol.SupportFile
	for _, f := range files {
		if f.Path != SourceConfigFile {
			out = append(out, f)
		}
	}
	return out
}

func filePaths(files []protocol.SupportFile) []string {
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.Path
	}
	return paths
}

func fileContent(files []protocol.SupportFile, path string) string {
	for _, f := range files {
		if f.Path == path {
			return f.Content
		}
	}
	return ""
}
