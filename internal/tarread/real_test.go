package tarread

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"openflare/testing/hostexec"
)

var (
	deepPath  = "long/" + strings.Repeat("abcdefghij/", 12) + "file-with-a-fairly-long-name.txt" // 169 bytes: ustar's prefix and name
	hugePath  = "xlong/" + strings.Repeat("abcdefghij/", 30) + "end.txt"                         // 343 bytes: past ustar
	sparseLen = int64(1 << 20)
)

// tree makes the files a real tool archives: text, empty and
// block-sized files, directories, a UTF-8 name, a symbolic and a hard
// link, long paths unless short, and with sparse a sparse file.
func tree(t testing.TB, short, sparse bool) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "src")
	files := map[string]string{
		"index.html":          body1000,
		"empty":               "",
		"block":               strings.Repeat("b", 512),
		"assets/css/site.css": "body{}",
		"ünïcødé.txt":         "utf-8",
	}
	if !short {
		files[deepPath] = "deep"
		files[hugePath] = "huge"
	}
	for name, data := range files {
		put(t, dir, name, data)
	}
	if err := os.Symlink("index.html", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "index.html"), filepath.Join(dir, "zhard")); err != nil {
		t.Fatal(err)
	}
	if sparse {
		f, err := os.Create(filepath.Join(dir, "sparse.bin"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(sparseLen); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("island"), sparseLen/2); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return dir
}

func haveGNUTar(t testing.TB) bool {
	out, err := hostexec.Output(t, func() *exec.Cmd { return exec.Command("tar", "--version") })
	return err == nil && bytes.Contains(out, []byte("GNU tar"))
}

// put writes a file under dir, and its directories.
func put(t testing.TB, dir, name, data string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// gnuTar archives dir with GNU tar, or skips.
func gnuTar(t testing.TB, dir string, args ...string) []byte {
	t.Helper()
	if !haveGNUTar(t) {
		t.Skip("no GNU tar command")
	}
	out := filepath.Join(t.TempDir(), "out.tar")
	args = append([]string{"-c", "-b1", "--sort=name", "-f", out}, args...)
	run(t, "", "tar", append(args, "-C", dir, ".")...)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func run(t testing.TB, dir, name string, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	out, err := hostexec.Output(t, func() *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Stderr = dir, &stderr
		return cmd
	})
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

// checkTree reads an archive of tree(dir) and checks it member for member
// against archive/tar and every file's data against dir.
func checkTree(t *testing.T, b []byte, dir, prefix string) []member {
	t.Helper()
	got, err := readAll(b)
	if err != nil {
		t.Fatalf("after %v: %v", got, err)
	}
	std, stdErr := readStd(b)
	if stdErr != io.EOF {
		t.Fatalf("archive/tar: %v", stdErr)
	}
	if msg := mismatch(std, stdErr, got, nil); msg != "" {
		t.Fatal(msg)
	}
	kinds := map[string]byte{}
	for _, m := range got {
		name := strings.TrimSuffix(strings.TrimPrefix(m.name, prefix), "/")
		kinds[name] = m.flag
		if m.flag != '0' {
			continue
		}
		disk, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%q: %v", m.name, err)
		}
		if m.data != string(disk) || m.size != int64(len(disk)) {
			t.Errorf("%q: %d bytes, %d on disk", m.name, len(m.data), len(disk))
		}
	}
	want := map[string]byte{"index.html": '0', "empty": '0', "block": '0', "assets": '5', "assets/css": '5', "assets/css/site.css": '0', "ünïcødé.txt": '0', "link": '2', "zhard": '1'}
	if _, err := os.Stat(filepath.Join(dir, deepPath)); err == nil {
		want[deepPath], want[hugePath] = '0', '0'
	}
	for name, k := range want {
		if kinds[name] != k {
			t.Errorf("%q: type %q, want %q (members %v)", name, kinds[name], k, got)
		}
	}
	return got
}

func TestGNUTar(t *testing.T) {
	for _, format := range []string{"gnu", "oldgnu", "posix", "ustar", "v7"} {
		t.Run(format, func(t *testing.T) {
			short := format == "ustar" || format == "v7"
			dir := tree(t, short, false)
			checkTree(t, gnuTar(t, dir, "--format="+format), dir, "./")
		})
	}
	// ustar splits the 169-byte path into prefix and name.
	t.Run("ustar prefix", func(t *testing.T) {
		dir := t.TempDir()
		put(t, dir, deepPath, "deep")
		b := gnuTar(t, dir, "--format=ustar")
		got, err := readAll(b)
		if err != nil || got[len(got)-1] != (member{"./" + deepPath, '0', 4, "deep"}) {
			t.Fatalf("%v %v", got, err)
		}
		if !bytes.Contains(b, []byte("ustar\x0000")) || bytes.Contains(b, []byte("././@LongLink")) {
			t.Fatal("not a ustar archive with a prefix")
		}
	})
}

// A sparse file, in each of GNU tar's encodings, is a member of type 'S',
// named by its real name, and the members after it are read.
func TestGNUTarSparse(t *testing.T) {
	for _, args := range [][]string{
		{"--format=gnu"},
		{"--format=posix", "--sparse-version=0.0"},
		{"--format=posix", "--sparse-version=0.1"},
		{"--format=posix", "--sparse-version=1.0"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			dir := tree(t, false, true)
			b := gnuTar(t, dir, append(args, "--sparse")...)
			if len(b) > int(sparseLen) {
				t.Fatalf("%d bytes: not stored sparse", len(b))
			}
			var sparse []member
			for _, m := range checkTree(t, b, dir, "./") {
				if m.flag == 'S' {
					sparse = append(sparse, m)
				}
			}
			if len(sparse) != 1 || !strings.HasSuffix(sparse[0].name, "sparse.bin") || sparse[0].data != "" {
				t.Fatalf("sparse members %v", sparse)
			}
		})
	}
}

func TestBSDTar(t *testing.T) {
	if _, err := exec.LookPath("bsdtar"); err != nil {
		t.Skip("no bsdtar command")
	}
	for _, format := range []string{"gnutar", "pax", "ustar", "v7"} {
		t.Run(format, func(t *testing.T) {
			dir := tree(t, format == "ustar" || format == "v7", false)
			out := filepath.Join(t.TempDir(), "out.tar")
			run(t, dir, "bsdtar", "-c", "--format", format, "-f", out, ".")
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			checkTree(t, b, dir, "./")
		})
	}
}

func TestPythonTarfile(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	for _, format := range []string{"GNU", "PAX", "USTAR"} {
		t.Run(format, func(t *testing.T) {
			dir := tree(t, format == "USTAR", false)
			out := filepath.Join(t.TempDir(), "out.tar")
			run(t, dir, "python3", "-c", `import sys, tarfile
with tarfile.open(sys.argv[1], "w", format=getattr(tarfile, sys.argv[2] + "_FORMAT")) as tf:
    tf.add(".")`, out, format)
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			checkTree(t, b, dir, "./")
		})
	}
}

// git archive writes a pax global header (the commit) and pax headers for
// long paths.
func TestGitArchive(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	for name, data := range map[string]string{"index.html": body1000, hugePath: "huge", "a/b.css": "b"} {
		put(t, dir, name, data)
	}
	git := func(args ...string) []byte {
		return run(t, dir, "git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-qm", "site")
	b := git("archive", "--format=tar", "--prefix=site/", "HEAD")
	if b[156] != 'g' {
		t.Fatalf("no global header: type %q", b[156])
	}
	got, err := readAll(b)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, m := range got {
		if m.flag != '5' {
			files[m.name] = m.data
		}
	}
	want := map[string]string{"site/a/b.css": "b", "site/index.html": body1000, "site/" + hugePath: "huge"}
	if fmt.Sprint(files) != fmt.Sprint(want) {
		t.Fatalf("got %v", got)
	}
	std, stdErr := readStd(b)
	if msg := mismatch(std, stdErr, got, nil); msg != "" {
		t.Fatal(msg)
	}
}

// realArchives are small archives of GNU tar's formats, for fuzz seeds.
func realArchives(t testing.TB) [][]byte {
	if !haveGNUTar(t) {
		return nil
	}
	var out [][]byte
	for _, args := range [][]string{{"--format=gnu"}, {"--format=posix"}, {"--format=v7"}, {"--format=gnu", "--sparse"}, {"--format=posix", "--sparse", "--sparse-version=1.0"}} {
		small := t.TempDir()
		put(t, small, "d/f.txt", "data")
		if err := os.Symlink("d/f.txt", filepath.Join(small, "l")); err != nil {
			t.Fatal(err)
		}
		if args[0] != "--format=v7" {
			put(t, small, strings.Repeat("n", 120), "long")
		}
		if len(args) > 1 {
			put(t, small, "sp", "")
			if err := os.Truncate(filepath.Join(small, "sp"), 64<<10); err != nil {
				t.Fatal(err)
			}
		}
		b := gnuTar(t, small, args...)
		out = append(out, b)
	}
	return out
}
