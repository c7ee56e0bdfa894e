package pages

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/openflare/openflare-agent/agent/testhook"
)

// ErrPackage marks a package refused for what it holds; nothing of it is
// used.
var ErrPackage = errors.New("package refused")

// limits are what a package may hold: E7's declaration within the
// absolute caps (PROTOCOL 9.1).
type limits struct {
	files   int   // at most this many files
	total   int64 // bytes in all
	perFile int64 // bytes in one file
}

// Absolute caps, whatever E7 says.
const (
	maxPackage = 2 << 30
	maxFiles   = 1000
	maxTotal   = 8 << 30
)

// entry is one archive member.
type entry struct {
	name string
	size int64 // declared
	dir  bool
	// special names a member that is neither a file nor a directory
	// (symlink, hard link, device, …); such a member refuses the package.
	special string
}

// members walks an archive: next returns each member and, for a file, a
// reader of its content; io.EOF ends the walk.
type members interface {
	next() (entry, io.Reader, error)
}

// Magic bytes of the supported formats (PROTOCOL 9.2 step 4): the format
// comes from the content, never from a name.
var (
	magicZip   = [][]byte{[]byte("PK\x03\x04"), []byte("PK\x05\x06"), []byte("PK\x07\x08")}
	magicGzip  = []byte{0x1f, 0x8b}
	magicBzip2 = []byte("BZh")
	magicXZ    = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	magic7z    = []byte{'7', 'z', 0xbc, 0xaf, 0x27, 0x1c}
)

// open sniffs the package's format and returns its members.
func open(f *os.File, size int64) (members, string, error) {
	head := make([]byte, 512)
	n, err := f.ReadAt(head, 0)
	if err != nil && err != io.EOF {
		return nil, "", fmt.Errorf("read package: %w", err)
	}
	head = head[:n]
	stream := func() *bufio.Reader { return bufio.NewReaderSize(io.NewSectionReader(f, 0, size), 64<<10) }
	for _, m := range magicZip {
		if bytes.HasPrefix(head, m) {
			zr, err := zip.NewReader(f, size)
			if err != nil {
				return nil, "zip", fmt.Errorf("%w: zip: %v", ErrPackage, err)
			}
			return &zipMembers{files: zr.File}, "zip", nil
		}
	}
	switch {
	case bytes.HasPrefix(head, magicGzip):
		zr, err := gzip.NewReader(stream())
		if err != nil {
			return nil, "tar.gz", fmt.Errorf("%w: gzip: %v", ErrPackage, err)
		}
		return tarMembers{tar.NewReader(zr)}, "tar.gz", nil
	case bytes.HasPrefix(head, magicBzip2):
		return tarMembers{tar.NewReader(bzip2.NewReader(stream()))}, "tar.bz2", nil
	case bytes.HasPrefix(head, magicXZ):
		return openXZ(stream())
	case bytes.HasPrefix(head, magic7z):
		return open7z(f, size)
	case len(head) >= 262 && string(head[257:262]) == "ustar":
		return tarMembers{tar.NewReader(stream())}, "tar", nil
	}
	return nil, "", fmt.Errorf("%w: not a zip, tar, tar.gz, tar.bz2, tar.xz or 7z archive (first bytes % x)", ErrPackage, head[:min(len(head), 8)])
}

// zipMembers walks a zip's central directory.
type zipMembers struct {
	files []*zip.File
	cur   io.ReadCloser
}

func (z *zipMembers) next() (entry, io.Reader, error) {
	if z.cur != nil {
		z.cur.Close()
		z.cur = nil
	}
	if len(z.files) == 0 {
		return entry{}, nil, io.EOF
	}
	zf := z.files[0]
	z.files = z.files[1:]
	mode := zf.Mode()
	e := entry{name: zf.Name, dir: mode.IsDir() || strings.HasSuffix(zf.Name, "/")}
	switch {
	case e.dir:
		return e, nil, nil
	case !mode.IsRegular():
		e.special = modeKind(mode)
		return e, nil, nil
	}
	if zf.UncompressedSize64 > maxTotal {
		return e, nil, fmt.Errorf("%w: %q declares %d bytes", ErrPackage, zf.Name, zf.UncompressedSize64)
	}
	e.size = int64(zf.UncompressedSize64)
	rc, err := zf.Open()
	if err != nil {
		return e, nil, fmt.Errorf("%w: zip member %q: %v", ErrPackage, zf.Name, err)
	}
	z.cur = rc
	return e, rc, nil
}

// tarMembers walks a tar stream.
type tarMembers struct{ r *tar.Reader }

func (t tarMembers) next() (entry, io.Reader, error) {
	h, err := t.r.Next()
	// A pax global header (git archive writes one) is metadata about the
	// archive, not a member.
	for err == nil && h.Typeflag == tar.TypeXGlobalHeader {
		h, err = t.r.Next()
	}
	if err == io.EOF {
		return entry{}, nil, io.EOF
	}
	if err != nil {
		return entry{}, nil, fmt.Errorf("%w: tar: %v", ErrPackage, err)
	}
	e := entry{name: h.Name, size: h.Size}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeRegA:
		return e, t.r, nil
	case tar.TypeDir:
		e.dir = true
	case tar.TypeSymlink:
		e.special = "symbolic link"
	case tar.TypeLink:
		e.special = "hard link"
	default:
		e.special = fmt.Sprintf("tar member of type %q", h.Typeflag)
	}
	return e, nil, nil
}

func modeKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}

// cleanName checks a member name against PROTOCOL 9.2 step 4 and returns
// it clean. A leading "./" (as `tar -C dir .` writes) is dropped: it
// names the archive's own root and cannot lead out of it.
func cleanName(name string, dir bool) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%w: member name %q %s", ErrPackage, name, why)
	}
	switch {
	case !utf8.ValidString(name):
		return bad("is not UTF-8")
	case strings.ContainsAny(name, "\\'\";"):
		return bad(`holds \ ' " or ;`)
	case strings.HasPrefix(name, "/"):
		return bad("is absolute")
	case len(name) >= 2 && name[1] == ':':
		return bad("starts with a drive letter")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return bad("holds a control character")
		}
	}
	n := name
	for strings.HasPrefix(n, "./") {
		n = n[2:]
	}
	if dir {
		n = strings.TrimSuffix(n, "/")
	}
	if n == "" || n == "." {
		if dir {
			return "", nil // the archive's root itself
		}
		return bad("is empty")
	}
	for _, seg := range strings.Split(n, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return bad("has an empty, . or .. segment")
		}
	}
	return n, nil
}

// extracted is what an extraction wrote.
type extracted struct {
	format string
	names  []string
	bytes  int64
}

// extract writes the package's files under dest, which must be empty,
// through an os.Root: whatever a name says, nothing lands outside dest.
// Limits are checked while the content streams, so a decompression bomb
// stops at its cap. Files are 0644 and directories 0755 whatever the
// umask: the nginx workers, another user, read them.
func extract(pkg *os.File, size int64, dest string, lim limits) (extracted, error) {
	var out extracted
	src, format, err := open(pkg, size)
	out.format = format
	if err != nil {
		return out, err
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return out, err
	}
	defer root.Close()
	seen := map[string]bool{}
	made := map[string]bool{".": true}
	for {
		e, r, err := src.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return out, err
		}
		name, err := cleanName(e.name, e.dir)
		if err != nil {
			return out, err
		}
		if e.special != "" {
			return out, fmt.Errorf("%w: %q is a %s", ErrPackage, e.name, e.special)
		}
		if e.dir {
			continue
		}
		if seen[name] {
			return out, fmt.Errorf("%w: %q appears twice", ErrPackage, name)
		}
		seen[name] = true
		if len(out.names) == lim.files {
			return out, fmt.Errorf("%w: more than the %d files declared", ErrPackage, lim.files)
		}
		if e.size < 0 || e.size > lim.perFile || out.bytes+e.size > lim.total {
			return out, fmt.Errorf("%w: %q declares %d bytes, past the %d bytes declared for the package", ErrPackage, name, e.size, lim.total)
		}
		if err := mkdirs(root, path.Dir(name), made); err != nil {
			return out, err
		}
		n, err := writeFile(root, name, r, e.size)
		if err != nil {
			return out, err
		}
		out.names = append(out.names, name)
		out.bytes += n
		testhook.Crash("pages-mid-extract")
	}
	if len(out.names) == 0 {
		return out, fmt.Errorf("%w: the archive holds no file", ErrPackage)
	}
	return out, nil
}

// mkdirs creates dir and its parents inside root at 0755.
func mkdirs(root *os.Root, dir string, made map[string]bool) error {
	if made[dir] {
		return nil
	}
	if err := mkdirs(root, path.Dir(dir), made); err != nil {
		return err
	}
	if err := root.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: directory %q: %v", ErrPackage, dir, err)
	}
	if err := root.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("%w: directory %q: %v", ErrPackage, dir, err)
	}
	made[dir] = true
	return nil
}

// writeFile copies exactly size bytes of r into a new file name: one byte
// more, or fewer, and the declared size was a lie.
func writeFile(root *os.Root, name string, r io.Reader, size int64) (int64, error) {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: %v", ErrPackage, name, err)
	}
	n, err := io.Copy(f, io.LimitReader(r, size+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return n, fmt.Errorf("%w: %q after %d bytes: %v", ErrPackage, name, n, err)
	case n != size:
		return n, fmt.Errorf("%w: %q declares %d bytes but holds %s", ErrPackage, name, size, holds(n, size))
	}
	if err := root.Chmod(name, 0o644); err != nil {
		return n, err
	}
	return n, nil
}

func holds(n, size int64) string {
	if n > size {
		return "more"
	}
	return fmt.Sprintf("%d", n)
}
