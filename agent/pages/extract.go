package pages

import (
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
	"strings"
	"unicode/utf8"

	"openflare/agent/testhook"
	"openflare/internal/tarread"
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

// dirs is the directories a package may have, explicit or implied.
func (l limits) dirs() int { return min(l.files*maxDepth, maxDirs) }

// Absolute caps, whatever E7 says.
const (
	maxPackage = 2 << 30
	maxFiles   = 1000
	maxTotal   = 8 << 30
)

// Directories cost the node disk blocks and system calls whatever a
// package declares, so they have caps of their own, far above what real
// sites need: they nest a dozen levels at most (docs/api/v2/…/index.html)
// and their directories are there to hold their files, about one per page.
const (
	// maxDepth bounds the segments of any member name, the file's own
	// included.
	maxDepth = 32
	// maxDirs bounds the distinct directories of a package, explicit or
	// implied, whatever it declares: four for each of maxFiles files.
	// Below it a package has at most maxDepth directories per declared
	// file: room for every file at full depth, so only a package padded
	// with empty directory entries reaches that.
	maxDirs = 4 * maxFiles
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

// open sniffs the package's format and returns its members; lim bounds
// what a format's reader may hold before the first member.
func open(f *os.File, size int64, lim limits) (members, string, error) {
	head := make([]byte, 512)
	n, err := f.ReadAt(head, 0)
	if err != nil && err != io.EOF {
		return nil, "", fmt.Errorf("read package: %w", err)
	}
	head = head[:n]
	stream := func() *bufio.Reader { return bufio.NewReaderSize(io.NewSectionReader(f, 0, size), 64<<10) }
	for _, m := range magicZip {
		if bytes.HasPrefix(head, m) {
			n, err := checkZip(f, size, lim)
			if err != nil {
				return nil, "zip", err
			}
			zr, err := zip.NewReader(io.NewSectionReader(f, 0, n), n)
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
		return tarMembers{tarread.NewReader(zr)}, "tar.gz", nil
	case bytes.HasPrefix(head, magicBzip2):
		return tarMembers{tarread.NewReader(bzip2.NewReader(stream()))}, "tar.bz2", nil
	case bytes.HasPrefix(head, magicXZ):
		return openXZ(stream())
	case bytes.HasPrefix(head, magic7z):
		return open7z(f, size, lim)
	case len(head) >= 262 && string(head[257:262]) == "ustar":
		return tarMembers{tarread.NewReader(stream())}, "tar", nil
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
		return e, nil, fmt.Errorf("%w: %.120q declares %d bytes", ErrPackage, zf.Name, zf.UncompressedSize64)
	}
	e.size = int64(zf.UncompressedSize64)
	rc, err := zf.Open()
	if err != nil {
		return e, nil, fmt.Errorf("%w: zip member %.120q: %v", ErrPackage, zf.Name, err)
	}
	z.cur = rc
	return e, rc, nil
}

// tarMembers walks a tar stream.
type tarMembers struct{ r *tarread.Reader }

func (t tarMembers) next() (entry, io.Reader, error) {
	// The reader skips pax global headers (git archive writes one): they
	// are metadata about the archive, not members.
	h, err := t.r.Next()
	if err == io.EOF {
		return entry{}, nil, io.EOF
	}
	if err != nil {
		return entry{}, nil, fmt.Errorf("%w: %v", ErrPackage, err) // its errors start "tar: "
	}
	e := entry{name: h.Name, size: h.Size}
	switch h.Typeflag {
	case '0': // '\x00' too, which the reader reads as '0' or, named with a slash, '5'
		return e, t.r, nil
	case '5':
		e.dir = true
	case '2':
		e.special = "symbolic link"
	case '1':
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
		return "", fmt.Errorf("%w: member name %.120q %s", ErrPackage, name, why)
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
// stops at its cap, and before anything of a member is created, so a
// refused member leaves nothing of its own. Files are 0644 and
// directories 0755 whatever the umask: the nginx workers, another user,
// read them. Empty directories are counted but not made: nothing serves
// them.
func extract(pkg *os.File, size int64, dest string, lim limits) (extracted, error) {
	var out extracted
	src, format, err := open(pkg, size, lim)
	out.format = format
	if err != nil {
		return out, err
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return out, err
	}
	t := newTree(root, lim.dirs())
	defer t.close()
	seen := map[string]bool{}
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
			return out, fmt.Errorf("%w: %.120q is a %s", ErrPackage, e.name, e.special)
		}
		if name == "" {
			continue // the archive's root directory
		}
		segs := strings.Split(name, "/")
		if len(segs) > maxDepth {
			return out, fmt.Errorf("%w: member %.120q has %d path segments, past the depth limit of %d", ErrPackage, name, len(segs), maxDepth)
		}
		if e.dir {
			if _, err := t.add(name, segs); err != nil {
				return out, err
			}
			continue
		}
		if seen[name] {
			return out, fmt.Errorf("%w: %.120q appears twice", ErrPackage, name)
		}
		seen[name] = true
		if len(out.names) == lim.files {
			return out, fmt.Errorf("%w: more than the %d files declared", ErrPackage, lim.files)
		}
		if e.size < 0 || e.size > lim.perFile || out.bytes+e.size > lim.total {
			return out, fmt.Errorf("%w: %.120q declares %d bytes, past the %d bytes declared for the package", ErrPackage, name, e.size, lim.total)
		}
		chain, err := t.add(name, segs[:len(segs)-1])
		if err != nil {
			return out, err
		}
		dir, err := t.enter(chain)
		if err != nil {
			return out, err
		}
		n, err := writeFile(dir, segs[len(segs)-1], name, r, e.size)
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

// tree is the package's directories, each counted and created once
// however many members name it, explicitly or as a parent. Creating them
// by path from the root would resolve every parent again for each one,
// quadratic in the depth; instead the directories of the last file stay
// open, so a file costs the segments it does not share with the file
// before (archives list a directory's files together), at most its own.
type tree struct {
	top   dirNode
	count int // directories known
	limit int
	// open[i] is the directory at depth i (open[0] is the root), and
	// at[i] its node, for the directories of the last file.
	open []*os.Root
	at   []*dirNode
}

type dirNode struct {
	name   string
	parent *dirNode
	kids   map[string]*dirNode
	made   bool // on disk
}

// path is d's name from the root, for errors: built only then, so that
// keeping the tree stays linear in the length of the names.
func (d *dirNode) path() string {
	p := d.name
	for n := d.parent; n.parent != nil; n = n.parent {
		p = n.name + "/" + p
	}
	return p
}

func newTree(root *os.Root, limit int) *tree {
	t := &tree{limit: limit, open: []*os.Root{root}}
	t.at = []*dirNode{&t.top}
	return t
}

// add counts the directories segs names (name is the member's, for
// errors) and returns their nodes, top first. Nothing is added when they
// would pass the limit.
func (t *tree) add(name string, segs []string) ([]*dirNode, error) {
	chain := make([]*dirNode, 0, len(segs))
	n := &t.top
	for _, seg := range segs {
		kid := n.kids[seg]
		if kid == nil {
			break
		}
		chain = append(chain, kid)
		n = kid
	}
	if t.count+len(segs)-len(chain) > t.limit {
		return nil, fmt.Errorf("%w: member %.120q takes the package past the limit of %d directories", ErrPackage, name, t.limit)
	}
	for _, seg := range segs[len(chain):] {
		if n.kids == nil {
			n.kids = map[string]*dirNode{}
		}
		kid := &dirNode{name: seg, parent: n}
		n.kids[seg] = kid
		chain = append(chain, kid)
		n = kid
		t.count++
	}
	return chain, nil
}

// enter opens the directories of chain, creating those not yet on disk,
// and returns the innermost.
func (t *tree) enter(chain []*dirNode) (*os.Root, error) {
	shared := 0
	for shared < len(chain) && shared+1 < len(t.at) && t.at[shared+1] == chain[shared] {
		shared++
	}
	t.leave(shared + 1)
	for _, d := range chain[shared:] {
		parent := t.open[len(t.open)-1]
		if !d.made {
			// What is there already is the same directory under another
			// case (a case-insensitive filesystem), or a file of the
			// package in the way, which OpenRoot refuses below.
			if err := parent.Mkdir(d.name, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("%w: directory %.120q: %v", ErrPackage, d.path(), pathless(err))
			}
			if err := parent.Chmod(d.name, dirMode); err != nil {
				return nil, fmt.Errorf("%w: directory %.120q: %v", ErrPackage, d.path(), err)
			}
			d.made = true
		}
		sub, err := parent.OpenRoot(d.name)
		if err != nil {
			return nil, fmt.Errorf("%w: directory %.120q: %v", ErrPackage, d.path(), err)
		}
		t.open = append(t.open, sub)
		t.at = append(t.at, d)
	}
	return t.open[len(t.open)-1], nil
}

// leave closes the open directories from depth keep on.
func (t *tree) leave(keep int) {
	for _, r := range t.open[keep:] {
		r.Close()
	}
	t.open, t.at = t.open[:keep], t.at[:keep]
}

func (t *tree) close() {
	t.leave(0)
}

// writeFile copies exactly size bytes of r into a new file base of dir
// (name is its path in the package, for errors): one byte more, or fewer,
// and the declared size was a lie.
func writeFile(dir *os.Root, base, name string, r io.Reader, size int64) (int64, error) {
	f, err := dir.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, fmt.Errorf("%w: %.120q: %v", ErrPackage, name, pathless(err))
	}
	n, err := io.Copy(f, io.LimitReader(r, size+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return n, fmt.Errorf("%w: %.120q after %d bytes: %v", ErrPackage, name, n, err)
	case n != size:
		return n, fmt.Errorf("%w: %.120q declares %d bytes but holds %s", ErrPackage, name, size, holds(n, size))
	}
	if err := dir.Chmod(base, 0o644); err != nil {
		return n, fmt.Errorf("make %.120q readable by the workers: %w", name, err)
	}
	return n, nil
}

// pathless drops the path an *fs.PathError repeats, for the calls that
// meet a segment of a name first: it may be as long as its archive format
// allows, and the error names the member itself, shortened.
func pathless(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

func holds(n, size int64) string {
	if n > size {
		return "more"
	}
	return fmt.Sprintf("%d", n)
}
