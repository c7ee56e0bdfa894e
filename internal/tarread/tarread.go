// Package tarread reads the members of a tar archive: the Pages packages
// (tar, tar.gz, tar.bz2, tar.xz) the server accepts. It exists for the
// release binary's size budget: archive/tar, with the os/user only it pulls
// in, costs some 60 KiB for writing, sparse files and owner names the agent
// never needs.
//
// It reads what GNU tar, bsdtar, git archive, Python's tarfile and Go's
// archive/tar write, V7, ustar, GNU and pax headers, and names members as
// archive/tar does. The archive is untrusted: sizes are counts, never
// allocations, the extended headers it holds in memory are bounded, and so
// is a chain of them; FuzzMatchesArchiveTar lists where it refuses what
// archive/tar reads.
package tarread

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

const (
	blockSize = 512
	// maxSize is past any real member; refusing more keeps offset
	// arithmetic far from overflow.
	maxSize = 1 << 62
	// maxPAX bounds a pax header held in memory, as archive/tar does.
	maxPAX = 1 << 20
	// maxLongName bounds a GNU long name or link: a path on Linux is at
	// most 4 KiB.
	maxLongName = 64 << 10
	// maxMeta bounds the extended headers before one member, which real
	// archives give one or two: each costs a block of input at most, and a
	// compressed chain of them would otherwise cost time without a member.
	maxMeta = 64
	// maxSparseBlocks bounds an old GNU sparse map's extension blocks.
	maxSparseBlocks = 2048
)

// Header is a member of the archive.
type Header struct {
	// Name is as stored: a GNU long name or pax path, or else the ustar
	// prefix joined to the name field. Nothing is cleaned or checked.
	Name string
	// Size is the declared size, a pax size if any. The content Read
	// gives, for a regular file, is exactly that long; for a sparse file
	// it is what the archive stores, not the file's length.
	Size int64
	// Typeflag is the header's, except that '\x00' (a regular file of old
	// archives) reads as '0', or as '5' for a name ending in a slash. A
	// sparse file, old GNU or pax, is 'S'.
	Typeflag byte

	_ [0]func() // not comparable: the binary needs no equality function
}

// Reader reads the members of a tar stream in order.
type Reader struct {
	_      [0]func() // not comparable: the binary needs no equality function
	r      io.Reader
	off    int64 // bytes consumed from r, for the offsets errors name
	remain int64 // bytes of the current member's data not yet consumed
	pad    int   // and the padding after them
	data   bool  // the current member is a regular file: Read gives its data
	err    error // once Next fails, it fails again
	hdr    Header
	blk    [blockSize]byte
}

// NewReader reads the archive r holds from its start.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: r}
}

// pending is what extended headers say of the member that follows them.
type pending struct {
	longName   string // GNU 'L'
	path, size string // pax
	sparse     bool   // pax GNU.sparse.* records
	sparseName string
}

// Next skips what is left of the current member and returns the next one;
// io.EOF ends the archive.
func (r *Reader) Next() (Header, error) {
	if r.err == nil {
		if r.err = r.next(); r.err == nil {
			return r.hdr, nil
		}
	}
	return Header{}, r.err
}

// next reads headers up to the next member's, whose Header it leaves in
// r.hdr.
func (r *Reader) next() error {
	var p pending
	for meta := 0; ; meta++ {
		if err := r.skip(); err != nil {
			return err
		}
		at := r.off
		n, err := io.ReadFull(r.r, r.blk[:])
		r.off += int64(n)
		if err != nil {
			if err == io.EOF {
				return err // where a header would start: only the end marker is missing
			}
			return r.readErr(err)
		}
		if r.blk == [blockSize]byte{} {
			// The end marker is two of them; GNU tar, too, stops at one.
			return io.EOF
		}
		b := r.blk[:]
		if !checksumOK(b) {
			return errAt(at, "header checksum mismatch", nil)
		}
		size, ok := number(b[124:136])
		if !ok {
			return errAt(at, "size field not a number", string(b[124:136]))
		}
		flag := b[156]
		switch flag {
		case 'x', 'g', 'L', 'K':
		default:
			return r.member(b, size, flag, at, &p)
		}
		if meta == maxMeta {
			return errAt(at, "more than 64 extended headers in a row", nil)
		}
		limit, what := int64(maxPAX), "pax header size not within 1 MiB"
		if flag == 'L' || flag == 'K' {
			limit, what = maxLongName, "GNU long name size not within 64 KiB"
		}
		body, err := r.body(size, limit, what, at)
		if err != nil {
			return err
		}
		switch flag {
		case 'L':
			p.longName = cstr(body)
		case 'x', 'g':
			// A later header replaces an earlier one, and a global header
			// describes the archive, not the member: archive/tar returns it
			// as an entry, forgetting what came before.
			p = pending{longName: p.longName}
			if err := parsePAX(body, at, &p); err != nil {
				return err
			}
			if flag == 'g' {
				p = pending{}
			}
		}
	}
}

// member sets up the data of the member whose header b holds.
func (r *Reader) member(b []byte, size int64, flag byte, at int64, p *pending) error {
	name := p.longName // GNU's wins over pax's, as archive/tar has it
	if name == "" {
		name = p.path
	}
	if name == "" {
		name = cstr(b[:100])
		if pre := prefix(b); pre != "" {
			name = pre + "/" + name
		}
	}
	if p.size != "" {
		n, err := strconv.ParseInt(p.size, 10, 64)
		if err != nil {
			return errAt(at, "pax size not a number", p.size)
		}
		size = n
	}
	if size < 0 || size > maxSize {
		return errAt(at, "member size out of range", size)
	}
	if flag == 0 {
		flag = '0'
		if strings.HasSuffix(name, "/") {
			flag = '5'
		}
	}
	data := size
	switch flag {
	case '1', '2', '3', '4', '5', '6':
		// Links, devices, directories and FIFOs have no data whatever
		// their size says (a hard link's is its target's).
		data = 0
	case 'S':
		if gnu(b) && b[482] != 0 {
			if err := r.sparseMap(at); err != nil {
				return err
			}
		}
	}
	if p.sparse {
		flag = 'S'
		if p.sparseName != "" {
			name = p.sparseName
		}
	}
	r.hdr = Header{Name: name, Size: size, Typeflag: flag}
	r.remain, r.pad, r.data = data, padding(data), flag == '0'
	return nil
}

// sparseMap consumes the extension blocks of an old GNU sparse header,
// which come before its data.
func (r *Reader) sparseMap(at int64) error {
	for range maxSparseBlocks {
		n, err := io.ReadFull(r.r, r.blk[:])
		r.off += int64(n)
		if err != nil {
			return r.readErr(err)
		}
		if r.blk[504] == 0 {
			return nil
		}
	}
	return errAt(at, "sparse map past 2048 blocks", nil)
}

// skip consumes what is left of the current member's data and padding.
func (r *Reader) skip() error {
	short := r.remain
	n, err := io.CopyN(io.Discard, r.r, r.remain+int64(r.pad))
	r.off += n
	r.remain, r.pad, r.data = 0, 0, false
	if err == io.EOF && n >= short {
		return io.EOF // in the padding: the data is whole, and archive/tar ends there too
	}
	if err != nil {
		return r.readErr(err)
	}
	return nil
}

// body reads the data of an extended header, at most limit bytes.
func (r *Reader) body(size, limit int64, what string, at int64) ([]byte, error) {
	if size < 0 || size > limit {
		return nil, errAt(at, what, size)
	}
	// ReadAll grows with what arrives, not with what was declared.
	buf, err := io.ReadAll(io.LimitReader(r.r, size))
	r.off += int64(len(buf))
	if err == nil && int64(len(buf)) < size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, r.readErr(err)
	}
	r.pad = padding(size)
	return buf, nil
}

// Read reads the current member's data; for anything but a regular file
// there is none.
func (r *Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if !r.data || r.remain == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.remain {
		p = p[:r.remain]
	}
	n, err := r.r.Read(p)
	r.off += int64(n)
	r.remain -= int64(n)
	if err == io.EOF && r.remain == 0 {
		err = nil
	}
	if err != nil {
		r.err = r.readErr(err)
		err = r.err
	}
	return n, err
}

// errAt is every error of the package, formatted in one place since each
// call of fmt.Errorf costs the binary some 200 bytes: what is wrong at
// offset at, with v the value at fault, if any, or the reading error.
func errAt(at int64, what string, v any) error {
	args := []any{what, at, v}
	format := "tar: %s at offset %d: %#v"
	if v == nil {
		format, args = "tar: %s at offset %d", args[:2]
	} else if _, ok := v.(error); ok {
		format = "tar: %s at offset %d: %w"
	}
	return fmt.Errorf(format, args...)
}

// readErr is a failure to read the archive: io.EOF there is a cut.
func (r *Reader) readErr(err error) error {
	what := "reading"
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		what, err = "archive cut short", io.ErrUnexpectedEOF
	}
	return errAt(r.off, what, err)
}

// parsePAX reads the records of a pax header into p. Each is
// "<length> <key>=<value>\n", the length counting the whole record in
// decimal; one that is not exactly that is an error, as the rest could not
// be trusted to start where it seems to.
func parsePAX(body []byte, at int64, p *pending) error {
	s := string(body)
	for s != "" {
		ls, rest, _ := strings.Cut(s, " ")
		n, err := strconv.ParseInt(ls, 10, 64)
		if err != nil || n <= int64(len(ls))+1 || n > int64(len(s)) || s[n-1] != '\n' {
			return errAt(at, "pax record of the wrong length", s[:min(len(s), 40)])
		}
		k, v, ok := strings.Cut(rest[:n-int64(len(ls))-2], "=")
		if !ok || k == "" {
			return errAt(at, "pax record not key=value", s[:min(len(s), 40)])
		}
		switch {
		case k == "path":
			p.path = v
		case k == "size":
			p.size = v
		case strings.HasPrefix(k, "GNU.sparse."):
			// GNU tar's pax sparse files, whatever the version: their data
			// is a map and fragments, not the file.
			p.sparse = true
			if k == "GNU.sparse.name" {
				p.sparseName = v
			}
		}
		s = s[n:]
	}
	return nil
}

// checksumOK checks a header's checksum: the sum of its bytes with the
// checksum field as spaces, unsigned, or signed as some old tars summed.
func checksumOK(b []byte) bool {
	want, ok := octal(b[148:156])
	if !ok {
		return false
	}
	var u, s int64
	for i, c := range b {
		if i >= 148 && i < 156 {
			c = ' '
		}
		u += int64(c)
		s += int64(int8(c))
	}
	return want == u || want == s
}

// number reads a numeric field: octal text or, with the high bit of the
// first byte set, GNU's big-endian two's complement for what octal cannot
// hold. A negative number is -1, whatever it is: no field this package
// reads may be negative. ok is false for text that is not octal and for
// values past int64.
func number(f []byte) (v int64, ok bool) {
	if f[0]&0x80 == 0 {
		return octal(f)
	}
	if f[0]&0x40 != 0 {
		return -1, true
	}
	x := int64(f[0] & 0x3f)
	for _, c := range f[1:] {
		if x >= 1<<55 {
			return 0, false
		}
		x = x<<8 | int64(c)
	}
	return x, true
}

// octal reads octal digits with spaces or NULs before them and after
// them up to the end of the field, or anything after a NUL, as
// archive/tar does; padding alone is zero.
func octal(f []byte) (int64, bool) {
	i := 0
	for i < len(f) && (f[i] == ' ' || f[i] == 0) {
		i++
	}
	var x int64
	for ; i < len(f) && f[i] >= '0' && f[i] <= '7'; i++ {
		x = x<<3 | int64(f[i]-'0')
	}
	if i < len(f) && f[i] != 0 {
		for _, c := range f[i:] {
			if c != ' ' && c != 0 {
				return 0, false
			}
		}
	}
	return x, true
}

// prefix is the directory part of a ustar name, which ustar and star keep
// apart from the name field. GNU headers have none: their atime and ctime
// are there.
func prefix(b []byte) string {
	if string(b[257:263]) != "ustar\x00" {
		return ""
	}
	end := 500
	if string(b[508:]) == "tar\x00" {
		end = 476 // star: atime and ctime follow
	}
	return cstr(b[345:end])
}

func gnu(b []byte) bool { return string(b[257:265]) == "ustar  \x00" }

// cstr is b up to its first NUL. Each inlined copy would cost some 100
// bytes.
//
//go:noinline
func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// padding is what follows n bytes of data to the end of their last block.
func padding(n int64) int { return int(-n & (blockSize - 1)) }
