package tarread

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"math/big"
	"strings"
	"testing"
)

type member struct {
	name string
	flag byte
	size int64
	data string
}

func (m member) String() string {
	return fmt.Sprintf("{%q %q %d %.20q}", m.name, m.flag, m.size, m.data)
}

// readAll reads every member of b with this package, each file's data
// whole (b bounds it).
func readAll(b []byte) ([]member, error) {
	r := NewReader(bytes.NewReader(b))
	var ms []member
	for {
		h, err := r.Next()
		if err == io.EOF {
			return ms, nil
		}
		if err != nil {
			return ms, err
		}
		d, err := io.ReadAll(r)
		if err != nil {
			return ms, err
		}
		ms = append(ms, member{h.Name, h.Typeflag, h.Size, string(d)})
	}
}

// stdMember is a member as archive/tar reads it.
type stdMember struct {
	member
	sparse bool // a GNU sparse file, old or pax: its data is not compared
	// goPrefix is whether archive/tar may have put a GNU header's atime
	// and ctime before the name, taking them for a prefix.
	goPrefix bool
}

// goPrefixes is whether b has a GNU header whose atime or ctime is not a
// number and that archive/tar reads with a prefix made of them (it does
// so for archives of Go's writer before 1.8).
func goPrefixes(b []byte) bool {
	for ; len(b) >= blockSize; b = b[blockSize:] {
		if !gnu(b) || cstr(b[345:500]) == "" {
			continue
		}
		if b[345] != 0 && !fitsInt64(b[345:357]) || b[357] != 0 && !fitsInt64(b[357:369]) {
			return true
		}
	}
	return false
}

// fitsInt64 is whether archive/tar reads a numeric field: octal, or base
// 256 (two's complement below the flag bit) within int64. number takes
// every negative one for -1, so it cannot say.
func fitsInt64(f []byte) bool {
	if f[0]&0x80 == 0 {
		_, ok := octal(f)
		return ok
	}
	b := bytes.Clone(f)
	b[0] &= 0x7f
	x := new(big.Int).SetBytes(b)
	if b[0]&0x40 != 0 {
		x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b)-1)))
	}
	return x.IsInt64()
}

// readStd reads b with archive/tar, without its global headers (this
// package skips them), up to the first error; a member whose data fails is
// not counted.
func readStd(b []byte) ([]stdMember, error) {
	tr := tar.NewReader(bytes.NewReader(b))
	goPrefix := goPrefixes(b)
	var ms []stdMember
	for {
		h, err := tr.Next()
		if err != nil {
			return ms, err
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		m := stdMember{member: member{h.Name, h.Typeflag, h.Size, ""}, sparse: h.Typeflag == tar.TypeGNUSparse, goPrefix: goPrefix}
		for k := range h.PAXRecords {
			m.sparse = m.sparse || strings.HasPrefix(k, "GNU.sparse.")
		}
		if h.Typeflag == tar.TypeReg && !m.sparse {
			d, err := io.ReadAll(tr)
			if err != nil {
				return ms, err
			}
			m.data = string(d)
		}
		ms = append(ms, m)
	}
}

// file is one member for the archive/tar writer.
type file struct {
	h    tar.Header
	data string
}

// write is an archive of fs through archive/tar's writer; with open, the
// end marker is left out.
func write(t testing.TB, format tar.Format, fs []file, open bool) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range fs {
		h := f.h
		if h.Format == tar.FormatUnknown {
			h.Format = format
		}
		if h.Typeflag == tar.TypeReg || h.Typeflag == 0 {
			h.Size = int64(len(f.data))
		}
		if h.Mode == 0 && h.Typeflag != tar.TypeXGlobalHeader {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		if _, err := io.WriteString(tw, f.data); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if open {
		err = tw.Flush()
	} else {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func reg(name, data string) file {
	return file{tar.Header{Name: name, Typeflag: tar.TypeReg}, data}
}

var (
	longDir  = strings.Repeat("directory/", 12)                     // 120 bytes: past the name field, within the prefix
	longName = strings.Repeat("a-rather-long-segment/", 14) + "end" // 311 bytes: past ustar
	body1000 = strings.Repeat("0123456789", 100)
)

// sample is an archive the round trips read, and a fuzz seed.
type sample struct {
	name    string
	archive []byte
	want    []member // nil: archive/tar's reading of it
}

func samples(t testing.TB) []sample {
	mixed := []file{
		reg("index.html", "<h1>hi</h1>"),
		{tar.Header{Name: "assets/", Typeflag: tar.TypeDir, Mode: 0o755}, ""},
		reg("assets/empty", ""),
		reg("assets/block", strings.Repeat("x", 512)),
		reg("assets/big", body1000),
		{tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "index.html"}, ""},
		{tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: "index.html"}, ""},
		{tar.Header{Name: "fifo", Typeflag: tar.TypeFifo}, ""},
		{tar.Header{Name: "tty", Typeflag: tar.TypeChar, Devmajor: 4, Devminor: 1}, ""},
	}
	mixedWant := []member{
		{"index.html", '0', 11, "<h1>hi</h1>"},
		{"assets/", '5', 0, ""},
		{"assets/empty", '0', 0, ""},
		{"assets/block", '0', 512, strings.Repeat("x", 512)},
		{"assets/big", '0', 1000, body1000},
		{"link", '2', 0, ""},
		{"hard", '1', 0, ""},
		{"fifo", '6', 0, ""},
		{"tty", '3', 0, ""},
	}
	global := file{tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "0123abcd"}}, ""}
	long := []file{
		reg(longDir+"index.html", "prefix"),
		reg(longName, "long"),
		{tar.Header{Name: longName + "/", Typeflag: tar.TypeDir}, ""},
		{tar.Header{Name: "s", Typeflag: tar.TypeSymlink, Linkname: longName}, ""},
		reg("ünïcødé.txt", "utf-8"),
		reg("after", "x"),
	}
	longWant := []member{
		{longDir + "index.html", '0', 6, "prefix"},
		{longName, '0', 4, "long"},
		{longName + "/", '5', 0, ""},
		{"s", '2', 0, ""},
		{"ünïcødé.txt", '0', 5, "utf-8"},
		{"after", '0', 1, "x"},
	}
	ustarPrefix := write(t, tar.FormatUSTAR, []file{reg(longDir+"index.html", "prefix")}, false)
	if string(ustarPrefix[345:355]) != "directory/" || len(ustarPrefix) != 2048 {
		t.Fatalf("the ustar sample has no prefix field: %q", ustarPrefix[345:355])
	}
	return []sample{
		{"ustar", write(t, tar.FormatUSTAR, mixed, false), mixedWant},
		{"pax", write(t, tar.FormatPAX, mixed, false), mixedWant},
		{"gnu", write(t, tar.FormatGNU, mixed, false), mixedWant},
		{"ustar prefix", ustarPrefix, []member{{longDir + "index.html", '0', 6, "prefix"}}},
		{"pax long names", write(t, tar.FormatPAX, long, false), longWant},
		{"gnu long names", write(t, tar.FormatGNU, long, false), longWant},
		{"pax global header", write(t, tar.FormatPAX, []file{global, reg("a", "1"), global, reg("b", "22")}, false), []member{{"a", '0', 1, "1"}, {"b", '0', 2, "22"}}},
		{"pax records", write(t, tar.FormatPAX, []file{{tar.Header{Name: "short", Typeflag: tar.TypeReg, PAXRecords: map[string]string{"comment": "x", "mtime": "1.5"}}, "data"}}, false), []member{{"short", '0', 4, "data"}}},
		{"pax path and size", cat(pax('x', rec("path", "renamed"), rec("size", "3"), rec("mtime", "1")), hdr("orig", '0', 99), []byte("abc"), pad(3), end()), []member{{"renamed", '0', 3, "abc"}}},
		{"pax replaced", cat(pax('x', rec("path", "first")), pax('x', rec("comment", "c")), ent("orig", '0', "a"), end()), []member{{"orig", '0', 1, "a"}}},
		{"pax empty path", cat(pax('x', rec("path", "")), ent("orig", '0', "a"), end()), []member{{"orig", '0', 1, "a"}}},
		{"gnu long name over pax path", cat(pax('x', rec("path", "pax")), ent("././@LongLink", 'L', "gnu\x00junk"), ent("orig", '0', "a"), end()), []member{{"gnu", '0', 1, "a"}}},
		{"global header forgets", cat(ent("././@LongLink", 'L', "gnu"), pax('x', rec("path", "pax")), pax('g', rec("comment", "c")), ent("orig", '0', "a"), end()), []member{{"orig", '0', 1, "a"}}},
		{"star prefix", star(), []member{{"pre/name", '0', 1, "s"}}},
		{"pax sparse", cat(pax('x', rec("GNU.sparse.major", "1"), rec("GNU.sparse.minor", "0"), rec("GNU.sparse.name", "real"), rec("GNU.sparse.realsize", "1000")), ent("GNUSparseFile.0/real", '0', "1\n0\n3\n"+strings.Repeat("\x00", 506)+"abc"), ent("next", '0', "n"), end()), []member{{"real", 'S', 515, ""}, {"next", '0', 1, "n"}}},
		{"empty", write(t, tar.FormatPAX, nil, false), []member{}},
		{"no end marker", write(t, tar.FormatPAX, []file{reg("a", "1"), reg("b", body1000)}, true), []member{{"a", '0', 1, "1"}, {"b", '0', 1000, body1000}}},
		{"no end marker after an empty file", write(t, tar.FormatUSTAR, []file{reg("a", "")}, true), []member{{"a", '0', 0, ""}}},
		{"base-256 size", base256(t), []member{{"b256", '0', 5, "hello"}}},
		{"one zero block", cat(ent("a", '0', "x"), make([]byte, blockSize)), []member{{"a", '0', 1, "x"}}},
		{"old regular type", oldReg(t), []member{{"f", '0', 3, "abc"}, {"d/", '5', 3, ""}, {"g", '0', 1, "z"}}},
		{"v7", v7(t), []member{{"v7file", '0', 2, "v7"}, {"v7dir/", '5', 0, ""}}},
	}
}

// The archive ends at its first zero block, as with GNU tar, whatever
// follows; archive/tar refuses a header or a partial block after it.
func TestEndsAtZeroBlock(t *testing.T) {
	for _, tail := range [][]byte{nil, make([]byte, 100), ent("b", '0', "y"), []byte("garbage")} {
		got, err := readAll(cat(ent("a", '0', "x"), make([]byte, blockSize), tail))
		if err != nil || fmt.Sprint(got) != fmt.Sprint([]member{{"a", '0', 1, "x"}}) {
			t.Errorf("%q after the zero block: %v %v", tail, got, err)
		}
	}
}

// Round trips: what archive/tar writes reads back member for member.
func TestRoundTrip(t *testing.T) {
	for _, s := range samples(t) {
		t.Run(s.name, func(t *testing.T) {
			got, err := readAll(s.archive)
			if err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(s.want) {
				t.Errorf("got  %v\nwant %v", got, s.want)
			}
			std, err := readStd(s.archive)
			if err != io.EOF {
				t.Fatalf("archive/tar: %v", err)
			}
			if msg := mismatch(std, err, got, nil); msg != "" {
				t.Error(msg)
			}
		})
	}
}

// hdr is a ustar header of a member.
func hdr(name string, flag byte, size int64) []byte {
	b := make([]byte, blockSize)
	copy(b, name)
	copy(b[100:], "0000644\x00")
	copy(b[124:], fmt.Sprintf("%011o\x00", size))
	b[156] = flag
	copy(b[257:], "ustar\x0000")
	fix(b)
	return b
}

func pad(n int) []byte { return make([]byte, padding(int64(n))) }

// ent is a member with its data.
func ent(name string, flag byte, data string) []byte {
	return cat(hdr(name, flag, int64(len(data))), []byte(data), pad(len(data)))
}

// pax is a pax header of records.
func pax(flag byte, recs ...string) []byte {
	return ent("PaxHeaders/x", flag, strings.Join(recs, ""))
}

// rec is a pax record, its length counting itself.
func rec(k, v string) string {
	n := len(k) + len(v) + 3
	n += len(fmt.Sprint(n))
	if len(fmt.Sprint(n)) != len(fmt.Sprint(n-1)) {
		n++
	}
	return fmt.Sprintf("%d %s=%s\n", n, k, v)
}

func end() []byte { return make([]byte, 2*blockSize) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// star is a header as star writes it: a shorter prefix, then times, and
// "tar" at the end of the block.
func star() []byte {
	b := ent("name", '0', "s")
	copy(b[345:], "pre")
	copy(b[476:], "00000000000\x0000000000000\x00")
	copy(b[508:], "tar\x00")
	fix(b)
	return cat(b, end())
}

// fix rewrites the checksum of the header at b[0:512].
func fix(b []byte) {
	copy(b[148:156], "        ")
	var s int
	for _, c := range b[:blockSize] {
		s += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", s))
}

// base256 is a GNU archive whose size field is in base 256, as GNU tar
// writes sizes octal cannot hold, here for a small file.
func base256(t testing.TB) []byte {
	b := write(t, tar.FormatGNU, []file{reg("b256", "hello")}, false)
	f := b[124:136]
	clear(f)
	f[0], f[11] = 0x80, 5
	fix(b)
	return b
}

// oldReg has members of type '\x00', as tars before ustar wrote them,
// one of them a directory by its trailing slash (and a size, which a
// directory does not have data for).
func oldReg(t testing.TB) []byte {
	b := write(t, tar.FormatUSTAR, []file{reg("f", "abc"), {tar.Header{Name: "d/", Typeflag: tar.TypeDir}, ""}, reg("g", "z")}, false)
	b[156] = 0
	fix(b)
	d := b[1024:]
	d[156] = 0
	copy(d[124:136], "00000000003\x00")
	fix(d)
	return b
}

// v7 has headers without magic: no prefix, no owner names.
func v7(t testing.TB) []byte {
	b := write(t, tar.FormatUSTAR, []file{reg("v7file", "v7"), {tar.Header{Name: "v7dir/", Typeflag: tar.TypeDir}, ""}}, false)
	for _, h := range [][]byte{b, b[1024:]} {
		clear(h[257:500])
		copy(h[345:], "ignored prefix") // not a field in V7
		fix(h)
	}
	return b
}

// A member past 8 GiB has its size in a pax record or in base 256; its
// data is skipped, not read, and the member after it is found.
func TestLargeSize(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 8 GiB")
	}
	const size = 8<<30 + 3
	for _, format := range []tar.Format{tar.FormatPAX, tar.FormatGNU} {
		t.Run(format.String(), func(t *testing.T) {
			var hdr bytes.Buffer
			tw := tar.NewWriter(&hdr)
			if err := tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Size: size, Mode: 0o644, Format: format}); err != nil {
				t.Fatal(err)
			}
			if format == tar.FormatGNU && hdr.Bytes()[124]&0x80 == 0 {
				t.Fatal("size not in base 256")
			}
			tail := write(t, format, []file{reg("after", "tail")}, false)
			r := NewReader(io.MultiReader(&hdr, io.LimitReader(zeros{}, size), bytes.NewReader(make([]byte, padding(size))), bytes.NewReader(tail)))
			h, err := r.Next()
			if err != nil || h.Name != "huge" || h.Size != size || h.Typeflag != '0' {
				t.Fatalf("%+v %v", h, err)
			}
			if n, err := io.ReadFull(r, make([]byte, 100)); n != 100 || err != nil {
				t.Fatal(n, err)
			}
			h, err = r.Next()
			if err != nil || h.Name != "after" {
				t.Fatalf("%+v %v", h, err)
			}
			if d, err := io.ReadAll(r); string(d) != "tail" || err != nil {
				t.Fatalf("%q %v", d, err)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Fatal(err)
			}
		})
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Read gives exactly the member's data, in pieces of any size, and nothing
// for a member that is not a file.
func TestReadPieces(t *testing.T) {
	b := write(t, tar.FormatPAX, []file{reg("a", body1000), {tar.Header{Name: "d/", Typeflag: tar.TypeDir}, ""}, reg("b", "bb")}, false)
	r := NewReader(bytes.NewReader(b))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	var got []byte
	p := make([]byte, 7)
	for {
		n, err := r.Read(p)
		got = append(got, p[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(got) != body1000 {
		t.Fatalf("%d bytes", len(got))
	}
	if h, err := r.Next(); err != nil || h.Typeflag != '5' {
		t.Fatal(h, err)
	}
	if n, err := r.Read(p); n != 0 || err != io.EOF {
		t.Fatal(n, err)
	}
	// b is read half, then skipped.
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(p[:1]); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatal(err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatal("end not sticky:", err)
	}
}

// Numeric fields read as archive/tar reads them, tried in a directory's
// size field (archive/tar ignores its value but must parse it).
func TestNumber(t *testing.T) {
	for _, c := range []struct {
		field string
		want  int64 // -2: not a number
	}{
		{"00000000012\x00", 10},
		{"  12        ", 10},
		{"\x00\x00 12 \x00 \x00\x00\x00\x00", 10},
		{"12\x00zz garbag", 10},
		{"12 \x00\x00\x00\x00\x00\x00\x00\x00\x00", 10},
		{"12 \x0034\x00\x00\x00\x00\x00\x00", -2},
		{"12 34\x00\x00\x00\x00\x00\x00\x00", -2},
		{"00000000018\x00", -2},
		{"0x1\x00\x00\x00\x00\x00\x00\x00\x00\x00", -2},
		{"+1\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", -2},
		{"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", 0},
		{"            ", 0},
		{"777777777777", 0o777777777777},
		{"\x80\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00", 256},
		{"\x80\x00\x00\x00\x7f\xff\xff\xff\xff\xff\xff\xff", 1<<63 - 1},
		{"\x80\x00\x00\x00\x80\x00\x00\x00\x00\x00\x00\x00", -2},
		{"\x80\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00", -2},
		{"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xfb", -1},
	} {
		if len(c.field) != 12 {
			t.Fatalf("%q is not 12 bytes", c.field)
		}
		v, ok := number([]byte(c.field))
		if !ok {
			v = -2
		}
		if v != c.want {
			t.Errorf("%q: %d, want %d", c.field, v, c.want)
		}
		h, err := tar.NewReader(bytes.NewReader(set(hdr("d/", '5', 0), 124, c.field))).Next()
		switch {
		case err != nil && ok:
			t.Errorf("%q: %d, archive/tar: %v", c.field, v, err)
		case err == nil && !ok:
			t.Errorf("%q: not a number, archive/tar reads %d", c.field, h.Size)
		case err == nil && h.Size != v && !(v == -1 && h.Size < 0):
			t.Errorf("%q: %d, archive/tar reads %d", c.field, v, h.Size)
		}
	}
}
