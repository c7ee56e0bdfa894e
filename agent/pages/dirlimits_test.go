package pages

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dirBomb is 20 one-byte files, each 3,000 directories deep, in two chains:
// with directories uncounted, 6,000 of them and 40 s of CPU for a package
// declaring 20 bytes.
func dirBomb() []member {
	var ms []member
	for i := range 20 {
		chain := strings.Repeat(string(rune('a'+i%2))+"/", 3000)
		ms = append(ms, member{name: fmt.Sprintf("%sf%d.html", chain, i), body: "x"})
	}
	return ms
}

// wideDirs is one file beside n empty sibling directories.
func wideDirs(n int) []member {
	ms := []member{{name: "index.html", body: "x"}}
	for i := range n {
		ms = append(ms, member{name: fmt.Sprintf("d%d/", i), dir: true})
	}
	return ms
}

func tarGzCase(ms []member) func(*testing.T) ([]byte, []member) {
	return func(t *testing.T) ([]byte, []member) { return gzipBytes(tarBytes(t, ms)), ms }
}

// countDirs is the directories under dest, dest excluded.
func countDirs(t *testing.T, dest string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != dest {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("count the directories extracted: %v", err)
	}
	return n
}

// extractBytes extracts pkg into a new directory under the declared
// limits, as fetch does, and returns that directory.
func extractBytes(t *testing.T, pkg []byte, ms []member) (string, extracted, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "package")
	if err := os.WriteFile(p, pkg, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files, total := 0, int64(0)
	for _, m := range ms {
		if !m.dir {
			files++
			total += int64(len(m.body))
		}
	}
	dest := t.TempDir()
	out, err := extract(f, int64(len(pkg)), dest, limits{files: files, total: total, perFile: total})
	return dest, out, err
}

// Directory bombs, deep or wide, in zip and tar.gz, are refused by the
// depth or the directory limit before they cost the node more than a
// handful of directories.
func TestDirectoryBombsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		pkg  func(*testing.T) ([]byte, []member)
		want string
	}{
		{"deep zip", zipCase(dirBomb()), "past the depth limit of 32"},
		{"deep tar.gz", tarGzCase(dirBomb()), "past the depth limit of 32"},
		// Refused from its end record: more entries than 1 file and 32
		// directories.
		{"wide zip", zipCase(wideDirs(100_000)), "and the limit of 32 directories allow at most 34"},
		{"wide zip of as many entries as allowed", zipCase(wideDirs(33)), "past the limit of 32 directories"},
		{"wide tar.gz", tarGzCase(wideDirs(100_000)), "past the limit of 32 directories"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkg, ms := tc.pkg(t)
			dest, _, err := extractBytes(t, pkg, ms)
			if !errors.Is(err, ErrPackage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a refusal naming %q", err, tc.want)
			}
			if n := countDirs(t, dest); n >= 100 {
				t.Fatalf("the refused package created %d directories", n)
			}
		})
	}
}

// deepSite is a site 31 directories deep with a few hundred directories,
// some listed explicitly, in an order that goes up and down the tree.
func deepSite() []member {
	ms := []member{{name: "site/", dir: true}, {name: "site/index.html", body: "<h1>home</h1>"}}
	chain := "site"
	for i := 1; i <= 30; i++ {
		chain += fmt.Sprintf("/l%02d", i)
		ms = append(ms, member{name: chain + "/page.html", body: "level " + fmt.Sprint(i)})
	}
	ms = append(ms, member{name: chain + "/", dir: true})
	for i := range 300 {
		d := fmt.Sprintf("site/posts/p%03d", i)
		if i%3 == 0 {
			ms = append(ms, member{name: d + "/", dir: true})
		}
		ms = append(ms, member{name: d + "/index.html", body: "post " + fmt.Sprint(i)})
	}
	rng := rand.New(rand.NewPCG(3, 1))
	rng.Shuffle(len(ms)-1, func(i, j int) { ms[i+1], ms[j+1] = ms[j+1], ms[i+1] })
	return ms
}

// A site 31 directories deep with a few hundred directories, in zip and
// tar.gz, deploys and serves exactly its files, directories 0755.
func TestDeepSiteDeploys(t *testing.T) {
	ms := deepSite()
	want := map[string]string{}
	for _, m := range ms {
		if !m.dir {
			want[strings.TrimPrefix(m.name, "site/")] = m.body
		}
	}
	for _, tc := range []struct {
		format string
		pkg    []byte
	}{
		{"zip", zipBytes(t, ms)},
		{"tar.gz", gzipBytes(tarBytes(t, ms))},
	} {
		t.Run(tc.format, func(t *testing.T) {
			dir := t.TempDir()
			cp := &fakeCP{}
			cp.deploy(tc.pkg, ms)
			s := &Syncer{Dir: dir, CP: cp}
			if err := s.Reconcile(context.Background(), []uint64{3}); err != nil {
				t.Fatal(err)
			}
			cur := filepath.Join(dir, "projects", "3", "current")
			got := map[string]string{}
			dirs := 0
			err := fs.WalkDir(os.DirFS(cur), ".", func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				switch {
				case d.IsDir():
					fi, err := d.Info()
					if err != nil {
						return err
					}
					if fi.Mode().Perm() != 0o755 {
						return fmt.Errorf("directory %s is %v", p, fi.Mode().Perm())
					}
					dirs++
				case p != MarkerName:
					got[p] = read(t, filepath.Join(cur, p))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("current serves %d files, the package holds %d", len(got), len(want))
			}
			for name, body := range want {
				if got[name] != body {
					t.Fatalf("%s = %q, want %q", name, got[name], body)
				}
			}
			// current itself, 30 levels, posts and its 300 posts.
			if dirs != 1+30+1+300 {
				t.Fatalf("current has %d directories", dirs)
			}
		})
	}
}
