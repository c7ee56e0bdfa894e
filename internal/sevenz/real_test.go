package sevenz

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"openflare/testing/hostexec"
)

const sevenZip = "/usr/bin/7zz"

func need7zz(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(sevenZip); err != nil {
		t.Skipf("%s not installed (Debian package 7zip): archives from the real tool cannot be made", sevenZip)
	}
}

// makeTree writes a site-like tree: nested directories, empty files and
// directories, non-ASCII names (including ones outside the BMP, which
// UTF-16 stores as surrogate pairs), many small files and a few MiB of text
// and incompressible data.
func makeTree(t testing.TB, dir string, big int) {
	t.Helper()
	rng := rand.New(rand.NewSource(1))
	write := func(name string, data []byte) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	text := func(n int) []byte {
		var b bytes.Buffer
		words := []string{"lorem", "ipsum", "<div class=\"x\">", "</div>", "static", "site", "données", "日本語", "\n"}
		for b.Len() < n {
			b.WriteString(words[rng.Intn(len(words))])
			fmt.Fprintf(&b, " %d ", rng.Intn(1000))
		}
		return b.Bytes()[:n]
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		rng.Read(b)
		return b
	}
	write("index.html", text(5000))
	write("assets/css/site.css", text(20000))
	write("assets/js/app.js", text(big/2))
	write("assets/img/photo.jpg", random(big/2))
	write("assets/img/tiny.bin", random(1))
	write("empty.txt", nil)
	write("deep/a/b/c/d/e/empty-too", nil)
	write("données/日本語/ファイル.txt", text(3000))
	write("emoji/😀 smile.txt", text(100))
	for i := 0; i < 150; i++ {
		write(fmt.Sprintf("pages/p%03d/index.html", i), text(rng.Intn(4000)))
	}
	for _, d := range []string{"empty-dir", "deep/empty/dir", "空"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(d)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

type want struct {
	isDir   bool
	link    bool
	content []byte
}

func scanTree(t testing.TB, dir string) map[string]want {
	t.Helper()
	m := map[string]want{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			m[rel] = want{link: true, content: []byte(target)}
		case d.IsDir():
			m[rel] = want{isDir: true}
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[rel] = want{content: b}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// run7zz archives everything in dir into a new archive and returns its path.
func run7zz(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "a.7z")
	b, err := hostexec.CombinedOutput(t, func() *exec.Cmd {
		cmd := exec.Command(sevenZip, append(append([]string{"a", "-bd", "-bso0", "-bsp0", "-mmt=2"}, args...), out, ".")...)
		cmd.Dir = dir
		return cmd
	})
	if err != nil {
		t.Fatalf("7zz %v: %v\n%s", args, err, b)
	}
	return out
}

func openFile(t testing.TB, path string) (*Reader, *os.File) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(f, st.Size())
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	return r, f
}

// compareArchive reads every entry and checks it against the tree.
func compareArchive(t *testing.T, r *Reader, tree map[string]want) {
	t.Helper()
	seen := map[string]bool{}
	for {
		e, rd, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Next after %d entries: %v", len(seen), err)
		}
		w, ok := tree[e.Name]
		if !ok {
			t.Errorf("unexpected entry %q", e.Name)
			continue
		}
		if seen[e.Name] {
			t.Errorf("entry %q twice", e.Name)
		}
		seen[e.Name] = true
		got, err := io.ReadAll(rd)
		if err != nil {
			t.Errorf("%q: reading: %v", e.Name, err)
			continue
		}
		switch {
		case w.isDir:
			if !e.IsDir || !e.Mode.IsDir() || e.Size != 0 || len(got) != 0 {
				t.Errorf("%q: want an empty directory, got IsDir=%v mode=%v size=%d content=%d bytes", e.Name, e.IsDir, e.Mode, e.Size, len(got))
			}
		case w.link:
			if e.Mode&fs.ModeSymlink == 0 || e.IsDir {
				t.Errorf("%q: want a symlink, got IsDir=%v mode=%v", e.Name, e.IsDir, e.Mode)
			}
			if !bytes.Equal(got, w.content) {
				t.Errorf("%q: link target %q, want %q", e.Name, got, w.content)
			}
		default:
			if e.IsDir || !e.Mode.IsRegular() {
				t.Errorf("%q: want a regular file, got IsDir=%v mode=%v", e.Name, e.IsDir, e.Mode)
			}
			if e.Size != int64(len(w.content)) || !bytes.Equal(got, w.content) {
				t.Errorf("%q: content differs (size %d, read %d, want %d)", e.Name, e.Size, len(got), len(w.content))
			}
		}
		if e.Anti {
			t.Errorf("%q: anti-item", e.Name)
		}
	}
	for name := range tree {
		if !seen[name] {
			t.Errorf("entry %q missing from the archive", name)
		}
	}
}

// TestReal7zz reads archives 7zz makes with every method, preset, solid
// mode and header option the control plane might use.
func TestReal7zz(t *testing.T) {
	need7zz(t)
	src := t.TempDir()
	makeTree(t, src, 3<<20)
	tree := scanTree(t, src)
	cases := [][]string{
		{"-m0=Copy"},
		{"-m0=Copy", "-mhc=off"},
		{"-m0=Copy", "-ms=off"},
		{"-m0=LZMA", "-mx1"},
		{"-m0=LZMA", "-mx5"},
		{"-m0=LZMA", "-mx9"},
		{"-m0=LZMA", "-ms=off"},
		{"-m0=LZMA", "-mhc=off"},
		{"-m0=LZMA2", "-mx1"},
		{"-m0=LZMA2", "-mx2"},
		{"-m0=LZMA2", "-mx3"},
		{"-m0=LZMA2", "-mx4"},
		{"-m0=LZMA2", "-mx5"},
		{"-m0=LZMA2", "-mx6"},
		{"-m0=LZMA2", "-mx7"},
		{"-m0=LZMA2", "-mx8"},
		{"-m0=LZMA2", "-mx9"},
		{"-m0=LZMA2", "-ms=on", "-mhc=off"},
		{"-m0=LZMA2", "-ms=off"},
		{"-m0=LZMA2", "-ms=e"},
		{"-m0=LZMA2", "-ms=256k"},
		{"-m0=LZMA", "-ms=20f"},
		{"-mx5"}, // the defaults: LZMA2, solid, compressed header
	}
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			r, _ := openFile(t, run7zz(t, src, args...))
			compareArchive(t, r, tree)
		})
	}
}

// TestReal7zzMultiFolder checks that the multi-folder options really make
// several folders, so TestReal7zz covers folder switching.
func TestReal7zzMultiFolder(t *testing.T) {
	need7zz(t)
	src := t.TempDir()
	makeTree(t, src, 1<<20)
	for _, args := range [][]string{{"-ms=off"}, {"-ms=e"}, {"-ms=256k"}} {
		r, _ := openFile(t, run7zz(t, src, args...))
		if len(r.si.folders) < 3 {
			t.Errorf("%v: %d folders, want several", args, len(r.si.folders))
		}
	}
	r, _ := openFile(t, run7zz(t, src, "-ms=on"))
	if len(r.si.folders) != 1 {
		t.Errorf("-ms=on: %d folders, want 1", len(r.si.folders))
	}
}

func TestReal7zzSymlink(t *testing.T) {
	need7zz(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "target.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target.txt", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "escape")); err != nil {
		t.Fatal(err)
	}
	tree := scanTree(t, src)
	for _, m := range []string{"-m0=Copy", "-m0=LZMA2"} {
		t.Run(m, func(t *testing.T) {
			r, _ := openFile(t, run7zz(t, src, m, "-snl"))
			compareArchive(t, r, tree)
		})
	}
}

// TestSkipUnread leaves entries unread or half read: later entries of the
// same solid block must still come out right.
func TestSkipUnread(t *testing.T) {
	need7zz(t)
	src := t.TempDir()
	makeTree(t, src, 1<<20)
	tree := scanTree(t, src)
	for _, args := range [][]string{{"-ms=on"}, {"-ms=off"}, {"-m0=Copy"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r, _ := openFile(t, run7zz(t, src, args...))
			i := 0
			var prev io.Reader
			for {
				e, rd, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := prev.(*entryReader); ok {
					if _, err := prev.Read(make([]byte, 1)); err != errStale {
						t.Fatalf("a reader from an earlier Next reads with error %v", err)
					}
				}
				i++
				switch i % 3 {
				case 0: // skipped
				case 1: // half read
					io.CopyN(io.Discard, rd, e.Size/2)
				case 2:
					got, err := io.ReadAll(rd)
					if err != nil || !bytes.Equal(got, tree[e.Name].content) {
						t.Fatalf("%q: %v, content equal %v", e.Name, err, bytes.Equal(got, tree[e.Name].content))
					}
				}
				prev = rd
			}
		})
	}
}

// TestUnsupported checks that chains and other methods are refused by
// name before any entry is returned.
func TestUnsupported(t *testing.T) {
	need7zz(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "a.txt"), bytes.Repeat([]byte("abc "), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-m0=BCJ", "-m1=LZMA2"}, "03030103"},
		{[]string{"-m0=Delta:4", "-m1=LZMA"}, "Delta"},
		{[]string{"-m0=PPMd"}, "030401"},
		{[]string{"-m0=BZip2"}, "040202"},
		{[]string{"-m0=Deflate"}, "040108"},
		{[]string{"-pSECRET", "-mhe=off"}, "06f10701"},
		{[]string{"-pSECRET", "-mhe=on"}, "06f10701"},
	} {
		path := run7zz(t, src, c.args...)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		_, err = NewReader(f, st.Size())
		f.Close()
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want ErrUnsupported naming %s", c.args, err, c.want)
		}
	}
}
