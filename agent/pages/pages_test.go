package pages

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"openflare/agent/protocol"
)

// member is one archive entry a test writes.
type member struct {
	name string
	body string
	link string // symlink target (tar, zip)
	hard bool   // tar hard link to link
	dir  bool
	size int64 // declared size when it lies (tar); 0: len(body)
}

func tarBytes(t testing.TB, ms []member) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, m := range ms {
		h := &tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.body)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		switch {
		case m.dir:
			h.Typeflag, h.Size, h.Mode = tar.TypeDir, 0, 0o755
		case m.hard:
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, m.link, 0
		case m.link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, m.link, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(m.body))
	}
	tw.Close()
	return b.Bytes()
}

func gzipBytes(b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

func zipBytes(t testing.TB, ms []member) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, m := range ms {
		h := &zip.FileHeader{Name: m.name, Method: zip.Deflate}
		body := m.body
		switch {
		case m.dir:
			h.Name = strings.TrimSuffix(m.name, "/") + "/"
		case m.link != "":
			h.SetMode(fs.ModeSymlink | 0o777)
			body = m.link
		default:
			h.SetMode(0o644)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, body)
	}
	zw.Close()
	return b.Bytes()
}

// fakeCP serves one project's package from memory.
type fakeCP struct {
	meta  protocol.PagesMeta
	pkg   []byte
	after func() // runs after each download
}

func (f *fakeCP) PagesMeta(_ context.Context, id uint64) (protocol.PagesMeta, error) {
	if id != f.meta.ProjectID {
		return protocol.PagesMeta{}, errors.New("no such project")
	}
	return f.meta, nil
}

func (f *fakeCP) PagesPackage(_ context.Context, _ uint64, size int64, w io.Writer) (int64, error) {
	if int64(len(f.pkg)) != size {
		return 0, errors.New("size differs")
	}
	n, err := w.Write(f.pkg)
	if f.after != nil {
		f.after()
	}
	return int64(n), err
}

// deploy makes pkg the project's active deployment, counting what ms
// holds as the server would.
func (f *fakeCP) deploy(pkg []byte, ms []member) {
	sum := sha256.Sum256(pkg)
	files, total := 0, int64(0)
	for _, m := range ms {
		if !m.dir && m.link == "" {
			files++
			total += int64(len(m.body))
		}
	}
	f.pkg = pkg
	f.meta = protocol.PagesMeta{ProjectID: 3, DeploymentID: f.meta.DeploymentID + 1, Hash: hex.EncodeToString(sum[:]), PackageSize: int64(len(pkg)), FileCount: files, TotalSize: total}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var site1 = []member{
	{name: "dist/", dir: true},
	{name: "dist/index.html", body: "<h1>one</h1>"},
	{name: "dist/assets/app.js", body: "console.log(1)"},
}

// A package lands as a release with its top directory stripped, current
// points at it, files are 0644 and directories 0755 whatever the umask,
// and a new deployment switches current and removes the old release.
func TestReconcileDeploysAndSwitches(t *testing.T) {
	dir := t.TempDir()
	cp := &fakeCP{}
	cp.deploy(gzipBytes(tarBytes(t, site1)), site1)
	s := &Syncer{Dir: dir, CP: cp}
	old := umask(0o077)
	defer umask(old)
	if err := s.Reconcile(context.Background(), []uint64{3}); err != nil {
		t.Fatal(err)
	}
	cur := filepath.Join(dir, "projects", "3", "current")
	if got := read(t, filepath.Join(cur, "index.html")); got != "<h1>one</h1>" {
		t.Fatalf("index.html = %q", got)
	}
	if link, _ := os.Readlink(cur); link != filepath.Join("releases", cp.meta.Hash) {
		t.Fatalf("current -> %q", link)
	}
	for p, want := range map[string]fs.FileMode{filepath.Join(cur, "assets"): 0o755, filepath.Join(cur, "assets", "app.js"): 0o644, filepath.Join(cur, "index.html"): 0o644} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v %v", p, fi.Mode().Perm(), err)
		}
	}
	first := cp.meta.Hash

	site2 := []member{{name: "index.html", body: "<h1>two</h1>"}, {name: "about/index.html", body: "about"}}
	cp.deploy(zipBytes(t, site2), site2)
	if err := s.Reconcile(context.Background(), []uint64{3}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(cur, "index.html")); got != "<h1>two</h1>" {
		t.Fatalf("after the switch index.html = %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "projects", "3", "releases", first)); !os.IsNotExist(err) {
		t.Fatalf("the previous release was kept: %v", err)
	}
	// Nothing to do the second time: no download.
	cp.pkg = nil
	if err := s.Reconcile(context.Background(), []uint64{3}); err != nil {
		t.Fatalf("a ready release was fetched again: %v", err)
	}
}

func umask(m int) int { return syscallUmask(m) }

// Hostile packages are refused with an error naming the problem; nothing
// is written outside the project's directory and current still serves the
// previous release.
func TestHostilePackagesRefused(t *testing.T) {
	big := strings.Repeat("0", 1<<20)
	cases := []struct {
		name string
		pkg  func(t *testing.T) ([]byte, []member)
		want string
		// declare adjusts what the server announces.
		declare func(m *protocol.PagesMeta)
	}{
		{"traversal", tarCase([]member{{name: "../evil.html", body: "x"}}), "segment", nil},
		{"deep traversal", tarCase([]member{{name: "a/../../evil.html", body: "x"}}), "segment", nil},
		{"absolute path", tarCase([]member{{name: "/etc/evil", body: "x"}}), "absolute", nil},
		{"backslash", zipCase([]member{{name: `a\..\evil.html`, body: "x"}}), `holds \`, nil},
		{"drive letter", zipCase([]member{{name: `C:evil.html`, body: "x"}}), "drive letter", nil},
		{"symlink", tarCase([]member{{name: "index.html", body: "x"}, {name: "link", link: "/etc/passwd"}}), "symbolic link", nil},
		{"symlink then a file through it", tarCase([]member{{name: "d", link: "/tmp"}, {name: "d/evil", body: "x"}}), "symbolic link", nil},
		{"zip symlink", zipCase([]member{{name: "index.html", body: "x"}, {name: "link", link: "/etc/passwd"}}), "symbolic link", nil},
		{"hard link", tarCase([]member{{name: "index.html", body: "x"}, {name: "h", link: "index.html", hard: true}}), "hard link", nil},
		{"duplicate name", tarCase([]member{{name: "index.html", body: "x"}, {name: "./index.html", body: "y"}}), "appears twice", nil},
		{"more files than declared", tarCase([]member{{name: "a", body: "x"}, {name: "b", body: "y"}}), "more than the 1 files", func(m *protocol.PagesMeta) { m.FileCount = 1; m.TotalSize = 1 }},
		{"zip bomb", zipCase([]member{{name: "bomb.html", body: big}}), "past the 10 bytes", func(m *protocol.PagesMeta) { m.TotalSize = 10 }},
		{"xz bomb", xzBomb, "past the 10 bytes", func(m *protocol.PagesMeta) { m.TotalSize = 10 }},
		{"size that lies", lyingZip, "package refused", nil},
		{"truncated", func(t *testing.T) ([]byte, []member) {
			ms := []member{{name: "index.html", body: big}}
			b := gzipBytes(tarBytes(t, ms))
			return b[:len(b)/2], ms
		}, "package refused", nil},
		{"corrupt tar header", func(t *testing.T) ([]byte, []member) {
			ms := []member{{name: "index.html", body: "x"}, {name: "b.html", body: "y"}}
			b := tarBytes(t, ms)
			b[1024] ^= 1 // the second header's name
			return b, ms
		}, "package refused: tar: header checksum mismatch at offset 1024", nil},
		{"tar sparse file (pax)", func(t *testing.T) ([]byte, []member) {
			// archive/tar writes no GNU.sparse records: a comment of the
			// same length becomes one.
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			tw.WriteHeader(&tar.Header{Name: "index.html", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg, PAXRecords: map[string]string{"comment": "XXXXXXXXindex.html"}})
			tw.Write([]byte("x"))
			tw.Close()
			return bytes.Replace(b.Bytes(), []byte("comment=XXXXXXXX"), []byte("GNU.sparse.name="), 1), []member{{name: "index.html", body: "x"}}
		}, `"index.html" is a tar member of type 'S'`, nil},
		{"empty archive", zipCase(nil), "no file", func(m *protocol.PagesMeta) { m.FileCount = 1 }},
		{"empty tar", tarCase(nil), "not a zip", func(m *protocol.PagesMeta) { m.FileCount = 1 }},
		{"not an archive", func(*testing.T) ([]byte, []member) { return []byte("<html>hello</html>"), nil }, "not a zip", func(m *protocol.PagesMeta) { m.FileCount = 1 }},
		{"control character", tarCase([]member{{name: "a\x01b", body: "x"}}), "control", nil},
		{"quote", tarCase([]member{{name: `a";b`, body: "x"}}), `holds \`, nil},
		{"directory bomb", zipCase(dirBomb()), "depth limit of 32", nil},
		{"33 segments", tarCase([]member{{name: strings.Repeat("d/", 32) + "index.html", body: "x"}}), "depth limit of 32", nil},
		{"empty directory 33 segments deep", tarCase([]member{{name: "index.html", body: "x"}, {name: strings.Repeat("d/", 33), dir: true}}), "depth limit of 32", nil},
		{"wide directories", tarGzCase(wideDirs(1000)), "limit of 32 directories", nil},
		{"file in the way of a directory", tarCase([]member{{name: "a", body: "x"}, {name: "a/index.html", body: "y"}}), `directory "a"`, nil},
		{"zip declaring 2,000,000 entries", func(*testing.T) ([]byte, []member) {
			b, off := rawZip(3, 1, 0, 0)
			return zipEnd(b, 2_000_000, uint64(len(b)-off), uint64(off), true, ""), nil
		}, "lists 2000000 entries", func(m *protocol.PagesMeta) { m.FileCount = 1 }},
		{"zip end record counting entries it lacks", reZipCase(site2Zip, func(e, _, _ *uint64) { *e++ }), "declares 3 entries, the central directory holds 2", nil},
		{"zip end record counting fewer entries", reZipCase(site2Zip, func(e, _, _ *uint64) { *e-- }), "more than the 1 entries its end record declares", nil},
		{"zip directory past the package", reZipCase(site2Zip, func(_, _, o *uint64) { *o = 1 << 31 }), "at offset 2147483648 runs past its end record", nil},
		{"zip directory short of its end record", reZipCase(site2Zip, func(_, s, _ *uint64) { *s -= 10 }), "ends 10 bytes before its end record", nil},
		{"zip comment cut short", func(t *testing.T) ([]byte, []member) {
			b := reZip(zipBytes(t, site2Zip), false, "built by the release job", nil)
			return b[:len(b)-5], site2Zip
		}, "declares a comment of 24 bytes, past the end", nil},
		{"zip without its end record", func(t *testing.T) ([]byte, []member) {
			b := zipBytes(t, site2Zip)
			return b[:len(b)-22], site2Zip
		}, "no end of central directory record", nil},
		{"zip directory header without its signature", func(t *testing.T) ([]byte, []member) {
			b := zipBytes(t, site2Zip)
			last := bytes.LastIndex(b, []byte("PK\x01\x02"))
			b[last+3] = 3
			return b, site2Zip
		}, "entry 2 of the central directory has no header signature", nil},
		{"zip directory header running past the directory", func(t *testing.T) ([]byte, []member) {
			b := zipBytes(t, site2Zip)
			last := bytes.LastIndex(b, []byte("PK\x01\x02"))
			b[last+32]++ // its comment's length
			return b, site2Zip
		}, "entry 2 of the central directory is cut short", nil},
		{"zip64 locator pointing elsewhere", func(t *testing.T) ([]byte, []member) {
			b := reZip(zipBytes(t, site2Zip), true, "", nil)
			binary.LittleEndian.PutUint64(b[len(b)-zipEndLen-zip64LocLen+8:], 0)
			return b, site2Zip
		}, "no zip64 end of central directory record at offset 0", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "pages")
			cp := &fakeCP{}
			cp.deploy(gzipBytes(tarBytes(t, site1)), site1)
			s := &Syncer{Dir: dir, CP: cp}
			if err := s.Reconcile(context.Background(), []uint64{3}); err != nil {
				t.Fatal(err)
			}
			pkg, ms := tc.pkg(t)
			cp.deploy(pkg, ms)
			if tc.declare != nil {
				tc.declare(&cp.meta)
			}
			err := s.Reconcile(context.Background(), []uint64{3})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "pages project 3") {
				t.Fatalf("err = %v, want one naming project 3 and %q", err, tc.want)
			}
			if got := read(t, filepath.Join(dir, "projects", "3", "current", "index.html")); got != "<h1>one</h1>" {
				t.Fatalf("current no longer serves the previous release: %q", got)
			}
			// Nothing outside the project, and no staging left behind.
			var stray []string
			filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !strings.HasPrefix(p, filepath.Join(dir, "projects", "3")) && p != base && p != dir && p != filepath.Join(dir, "projects") {
					stray = append(stray, p)
				}
				if err == nil && strings.HasSuffix(p, ".tmp") {
					stray = append(stray, p)
				}
				return nil
			})
			if len(stray) > 0 {
				t.Fatalf("left behind: %v", stray)
			}
		})
	}
}

func tarCase(ms []member) func(*testing.T) ([]byte, []member) {
	return func(t *testing.T) ([]byte, []member) { return tarBytes(t, ms), ms }
}

func zipCase(ms []member) func(*testing.T) ([]byte, []member) {
	return func(t *testing.T) ([]byte, []member) { return zipBytes(t, ms), ms }
}

// xzBomb is a tar.xz of a few KiB holding 64 MiB of zeros (made by the
// real xz).
func xzBomb(t *testing.T) ([]byte, []member) {
	if _, err := exec.LookPath("xz"); err != nil {
		t.Skip("xz is not installed (make deps)")
	}
	ms := []member{{name: "index.html", body: string(make([]byte, 64<<20))}}
	cmd := exec.Command("xz", "-0", "-c")
	cmd.Stdin = bytes.NewReader(tarBytes(t, ms))
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return out, ms
}

// lyingZip declares 5 bytes for a member that holds 11.
func lyingZip(t *testing.T) ([]byte, []member) {
	ms := []member{{name: "index.html", body: "hello world"}}
	b := zipBytes(t, ms)
	// Both the local header and the central directory carry the size.
	b = bytes.ReplaceAll(b, []byte{11, 0, 0, 0}, []byte{5, 0, 0, 0})
	return b, ms
}

// The packages the real tools make, in every supported format, extract to
// the same tree.
func TestFormatsFromRealTools(t *testing.T) {
	src := t.TempDir()
	files := map[string]string{"site/index.html": "<h1>hi</h1>", "site/css/a.css": "body{}", "site/js/deep/x.js": strings.Repeat("x", 100_000)}
	for p, body := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(src, p)), 0o755)
		os.WriteFile(filepath.Join(src, p), []byte(body), 0o644)
	}
	out := t.TempDir()
	tools := []struct {
		format string
		cmd    []string
	}{
		{"tar", []string{"tar", "-cf", "{out}", "-C", src, "site"}},
		{"tar.gz", []string{"tar", "-czf", "{out}", "-C", src, "site"}},
		{"tar.bz2", []string{"tar", "-cjf", "{out}", "-C", src, "site"}},
		{"tar.xz", []string{"tar", "-cJf", "{out}", "-C", src, "site"}},
		{"zip", []string{"sh", "-c", "cd " + src + " && zip -qr {out} site"}},
		{"7z", []string{"sh", "-c", "cd " + src + " && 7zz a -bd -bso0 {out} site"}},
	}
	for _, tool := range tools {
		t.Run(tool.format, func(t *testing.T) {
			if _, err := exec.LookPath(strings.Fields(strings.Join(tool.cmd, " "))[0]); err != nil {
				t.Skipf("%s: %v", tool.cmd[0], err)
			}
			pkg := filepath.Join(out, "pkg."+tool.format)
			args := make([]string, len(tool.cmd))
			for i, a := range tool.cmd {
				args[i] = strings.ReplaceAll(a, "{out}", pkg)
			}
			if strings.Contains(strings.Join(args, " "), "7zz") {
				if _, err := exec.LookPath("7zz"); err != nil {
					t.Skip("7zz is not installed (make deps)")
				}
			}
			if b, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
				t.Skipf("%v: %v %s", args, err, b)
			}
			data := []byte(read(t, pkg))
			f, err := os.Open(pkg)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			dest := t.TempDir()
			got, err := extract(f, int64(len(data)), dest, limits{files: 10, total: 1 << 20, perFile: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if got.format != tool.format {
				t.Errorf("sniffed %s", got.format)
			}
			names := append([]string(nil), got.names...)
			sort.Strings(names)
			if fmt.Sprint(names) != "[site/css/a.css site/index.html site/js/deep/x.js]" {
				t.Fatalf("names %v", names)
			}
			for p, body := range files {
				if read(t, filepath.Join(dest, p)) != body {
					t.Fatalf("%s differs", p)
				}
			}
		})
	}
}

// A pax global header (git archive writes one) is metadata, not a member;
// a deployment that failed is not downloaded again until it waited or E7
// names another one.
func TestGitArchiveAndFailureBackoff(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "abc123"}, Format: tar.FormatPAX})
	tw.WriteHeader(&tar.Header{Name: "site/index.html", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	tw.Write([]byte("hi"))
	tw.Close()
	dir := t.TempDir()
	cp := &fakeCP{}
	downloads := 0
	cp.after = func() { downloads++ }
	cp.deploy(gzipBytes(b.Bytes()), []member{{name: "index.html", body: "hi"}})
	s := &Syncer{Dir: dir, CP: cp}
	if err := s.Reconcile(context.Background(), []uint64{3}); err != nil {
		t.Fatalf("git archive package: %v", err)
	}
	if got := read(t, filepath.Join(dir, "projects", "3", "current", "index.html")); got != "hi" {
		t.Fatalf("index.html = %q", got)
	}

	bad := []member{{name: "index.html", link: "/etc/passwd"}}
	cp.deploy(tarBytes(t, bad), bad)
	cp.meta.FileCount = 1
	downloads = 0
	for range 3 {
		if err := s.Reconcile(context.Background(), []uint64{3}); err == nil {
			t.Fatal("a refused package deployed")
		}
	}
	if downloads != 1 {
		t.Fatalf("the failed deployment was downloaded %d times in a row", downloads)
	}
	good := []member{{name: "index.html", body: "ok"}}
	cp.deploy(tarBytes(t, good), good)
	if err := s.Reconcile(context.Background(), []uint64{3}); err != nil {
		t.Fatalf("the next deployment waited for the failed one: %v", err)
	}
}
