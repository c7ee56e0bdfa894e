package sevenz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unicode/utf16"
)

// The archives in testdata were made by 7zz 26.02 from a five-entry tree
// (a directory with a subdirectory, an empty directory, an empty file, text,
// a UTF-8 name and, where -snl was given, a symlink), so that corruption
// tests and fuzz seeds do not need the tool:
//
//	copy-plainheader.7z  -m0=Copy -mhc=off -snl
//	copy.7z              -m0=Copy (header LZMA-compressed)
//	lzma-solid.7z        -m0=LZMA -mhc=off
//	lzma2-nonsolid.7z    -m0=LZMA2 -ms=off
//	default.7z           defaults (LZMA2, solid, compressed header), -snl
func seeds(t testing.TB) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob("testdata/*.7z")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no seed archives in testdata: %v", err)
	}
	m := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		m[filepath.Base(p)] = b
	}
	return m
}

type item struct {
	Entry
	content string
}

// readAll reads every entry of an archive held in b, stopping with an error
// once more than maxOut bytes of content have come out, so that a crafted
// archive's huge declared sizes cannot make a test run for ever.
func readAll(b []byte, maxOut int64) ([]item, error) {
	r, err := NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	var items []item
	for {
		e, rd, err := r.Next()
		if err == io.EOF {
			return items, nil
		}
		if err != nil {
			return items, err
		}
		var c bytes.Buffer
		n, err := io.Copy(&c, io.LimitReader(rd, maxOut+1))
		if err != nil {
			return items, err
		}
		if maxOut -= n; maxOut < 0 {
			return items, errors.New("output limit reached")
		}
		items = append(items, item{*e, c.String()})
	}
}

func TestSeeds(t *testing.T) {
	for name, b := range seeds(t) {
		items, err := readAll(b, 1<<20)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := map[string]item{}
		for _, it := range items {
			got[it.Name] = it
		}
		if len(items) < 7 {
			t.Errorf("%s: %d entries", name, len(items))
		}
		if it := got["dir/hello.txt"]; it.content != "hello, world\n" || it.Mode != 0o644 {
			t.Errorf("%s: dir/hello.txt: %+v", name, it)
		}
		if it := got["dir/名前.txt"]; it.content != "ü" {
			t.Errorf("%s: UTF-8 name: %+v", name, it)
		}
		if it := got["empty.txt"]; it.IsDir || it.Size != 0 || !it.Mode.IsRegular() {
			t.Errorf("%s: empty.txt: %+v", name, it)
		}
		if it := got["emptydir"]; !it.IsDir || it.Mode != fs.ModeDir|0o755 {
			t.Errorf("%s: emptydir: %+v", name, it)
		}
		// Without -snl 7zz stores what the link points to.
		it := got["link"]
		if name == "copy-plainheader.7z" || name == "default.7z" {
			if it.Mode != fs.ModeSymlink|0o777 || it.content != "dir/hello.txt" {
				t.Errorf("%s: link stored with -snl: %+v", name, it)
			}
		} else if it.Mode != 0o644 || it.content != "hello, world\n" {
			t.Errorf("%s: link stored as its target: %+v", name, it)
		}
	}
}

// TestTruncated cuts every seed at every length: each must fail, in
// NewReader or while reading.
func TestTruncated(t *testing.T) {
	for name, b := range seeds(t) {
		for n := 0; n < len(b); n++ {
			if _, err := readAll(b[:n], 1<<20); err == nil {
				t.Errorf("%s cut to %d bytes: no error", name, n)
			}
		}
	}
}

// TestByteFlips changes every byte of every seed in several ways. Headers
// and content are all covered by CRCs, so each change must either fail or
// leave what is read unchanged (the minor version byte, unused bits at the
// end of an LZMA stream). The vast majority must fail.
func TestByteFlips(t *testing.T) {
	for name, b := range seeds(t) {
		orig, err := readAll(b, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		failed, total := 0, 0
		c := make([]byte, len(b))
		for i := range b {
			for _, x := range []byte{0x01, 0x10, 0x80, 0xFF} {
				copy(c, b)
				c[i] ^= x
				total++
				got, err := readAll(c, 1<<20)
				if err != nil {
					failed++
					continue
				}
				if !equalItems(got, orig) {
					t.Errorf("%s: byte %d ^ 0x%02x: read different entries without an error", name, i, x)
				}
			}
		}
		if failed < total*9/10 {
			t.Errorf("%s: only %d of %d changes failed", name, failed, total)
		}
	}
}

// TestRandomGarbage overwrites random runs of the seeds with random bytes.
func TestRandomGarbage(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for name, b := range seeds(t) {
		orig, _ := readAll(b, 1<<20)
		c := make([]byte, len(b))
		for i := 0; i < 2000; i++ {
			copy(c, b)
			at := rng.Intn(len(c))
			n := 1 + rng.Intn(16)
			if at+n > len(c) {
				n = len(c) - at
			}
			rng.Read(c[at : at+n])
			got, err := readAll(c, 1<<20)
			if err == nil && !equalItems(got, orig) {
				t.Errorf("%s: garbage at %d+%d read as different entries without an error", name, at, n)
			}
		}
	}
}

func equalItems(a, b []item) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// num encodes v as a 7z variable-length number.
func num(v uint64) []byte {
	n := 0
	for n < 8 && v >= 1<<(7*(n+1)) {
		n++
	}
	// n extra bytes leave 7-n bits of the first byte for the value.
	first := byte(0xFF << (8 - n))
	if n < 8 {
		first |= byte(v >> (8 * n))
	}
	out := []byte{first}
	for i := 0; i < n; i++ {
		out = append(out, byte(v>>(8*i)))
	}
	return out
}

func TestNumber(t *testing.T) {
	for _, v := range []uint64{0, 1, 0x7F, 0x80, 0x3FFF, 0x4000, 1 << 20, 1<<49 - 1, 1 << 49, 1<<56 - 1, 1 << 56, 1<<63 + 5, 1<<64 - 1} {
		h := &buf{b: num(v)}
		got, err := h.readNumber("n")
		if err != nil || got != v || len(h.b) != 0 {
			t.Errorf("%d encoded as %x: decoded %d, %v, %d bytes left", v, num(v), got, err, len(h.b))
		}
	}
	if _, err := (&buf{b: []byte{0xFF, 1, 2, 3}}).readNumber("n"); !errors.Is(err, ErrFormat) {
		t.Errorf("truncated number: %v", err)
	}
}

// archive wraps a raw header (and packed data before it) in a signature
// header with correct CRCs.
func archive(packed, header []byte) []byte {
	b := make([]byte, 32, 32+len(packed)+len(header))
	copy(b, signature)
	b[7] = 4
	binary.LittleEndian.PutUint64(b[12:], uint64(len(packed)))
	binary.LittleEndian.PutUint64(b[20:], uint64(len(header)))
	binary.LittleEndian.PutUint32(b[28:], crc32.ChecksumIEEE(header))
	binary.LittleEndian.PutUint32(b[8:], crc32.ChecksumIEEE(b[12:32]))
	b = append(b, packed...)
	return append(b, header...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func utf16Name(s string) []byte {
	var b []byte
	for _, u := range utf16.Encode([]rune(s)) {
		b = binary.LittleEndian.AppendUint16(b, u)
	}
	return append(b, 0, 0)
}

type testFile struct {
	name   string
	data   string // content of a file with a stream
	noData bool   // empty stream
	empty  bool   // empty file (not a directory) among empty streams
	anti   bool
	attrib uint32
}

// buildCopy writes a solid Copy archive by hand, for what 7zz cannot be
// made to produce: anti-items, padding, contradictory attributes.
func buildCopy(files []testFile, extraFileProps []byte) []byte {
	var packed []byte
	var sizes [][]byte
	var crcs []byte
	var emptyStream, emptyFile, anti []bool
	var names, attrs []byte
	n := 0
	for _, f := range files {
		names = append(names, utf16Name(f.name)...)
		attrs = binary.LittleEndian.AppendUint32(attrs, f.attrib)
		emptyStream = append(emptyStream, f.noData)
		if f.noData {
			emptyFile = append(emptyFile, f.empty)
			anti = append(anti, f.anti)
			continue
		}
		packed = append(packed, f.data...)
		sizes = append(sizes, num(uint64(len(f.data))))
		crcs = binary.LittleEndian.AppendUint32(crcs, crc32.ChecksumIEEE([]byte(f.data)))
		n++
	}
	bits := func(v []bool) []byte {
		b := make([]byte, (len(v)+7)/8)
		for i, x := range v {
			if x {
				b[i/8] |= 0x80 >> (i % 8)
			}
		}
		return b
	}
	prop := func(id byte, data []byte) []byte { return cat([]byte{id}, num(uint64(len(data))), data) }
	h := []byte{idHeader}
	if n > 0 {
		h = cat(h, []byte{idMainStreamsInfo, idPackInfo}, num(0), num(1), []byte{idSize}, num(uint64(len(packed))), []byte{idEnd},
			[]byte{idUnpackInfo, idFolder}, num(1), []byte{0, 1, 0x01, 0x00}, []byte{idCodersUnpackSize}, num(uint64(len(packed))), []byte{idEnd},
			[]byte{idSubStreamsInfo, idNumUnpackStream}, num(uint64(n)), []byte{idSize}, cat(sizes[:n-1]...),
			[]byte{idCRC, 1}, crcs, []byte{idEnd}, []byte{idEnd})
	}
	h = cat(h, []byte{idFilesInfo}, num(uint64(len(files))),
		prop(idEmptyStream, bits(emptyStream)), prop(idEmptyFile, bits(emptyFile)), prop(idAnti, bits(anti)),
		extraFileProps,
		prop(idName, cat([]byte{0}, names)), prop(idWinAttributes, cat([]byte{1, 0}, attrs)),
		[]byte{idEnd, idEnd})
	return archive(packed, h)
}

const unixExt = 0x8000

func TestHandBuilt(t *testing.T) {
	files := []testFile{
		{name: "d", noData: true, attrib: 0x10},
		{name: "d/a", data: "alpha", attrib: unixExt | 0o100640<<16},
		{name: "gone", noData: true, anti: true, empty: true},
		{name: "gone-dir", noData: true, anti: true},
		{name: "e", noData: true, empty: true, attrib: 0x01},
		{name: "d/b", data: "beta"},
		{name: "setuid", data: "x", attrib: unixExt | 0o104755<<16},
		{name: "fifo", noData: true, empty: true, attrib: unixExt | 0o010644<<16},
		{name: "reparse", data: "rp", attrib: 0x400},
	}
	// kDummy padding and an mtime vector, both skipped.
	extra := cat([]byte{idDummy}, num(5), make([]byte, 5), []byte{0x14}, num(2+8*9), []byte{1, 0}, make([]byte, 8*9))
	items, err := readAll(buildCopy(files, extra), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := []item{
		{Entry{Name: "d", IsDir: true, Mode: fs.ModeDir | 0o755}, ""},
		{Entry{Name: "d/a", Size: 5, Mode: 0o640}, "alpha"},
		{Entry{Name: "gone", Mode: 0o644, Anti: true}, ""},
		{Entry{Name: "gone-dir", IsDir: true, Mode: fs.ModeDir | 0o755, Anti: true}, ""},
		{Entry{Name: "e", Mode: 0o444}, ""},
		{Entry{Name: "d/b", Size: 4, Mode: 0o644}, "beta"},
		{Entry{Name: "setuid", Size: 1, Mode: fs.ModeSetuid | 0o755}, "x"},
		{Entry{Name: "fifo", Mode: fs.ModeNamedPipe | 0o644}, ""},
		{Entry{Name: "reparse", Size: 2, Mode: fs.ModeIrregular | 0o644}, "rp"},
	}
	if !equalItems(items, want) {
		t.Errorf("got  %+v\nwant %+v", items, want)
	}

	// An archive with nothing in it has a zero-length header.
	if items, err := readAll(archive(nil, nil), 0); err != nil || len(items) != 0 {
		t.Errorf("empty archive: %v, %v", items, err)
	}
	// Only directories: no streams at all.
	if items, err := readAll(buildCopy([]testFile{{name: "x", noData: true}}, nil), 0); err != nil || len(items) != 1 || !items[0].IsDir {
		t.Errorf("directory-only archive: %+v, %v", items, err)
	}
}

// TestContradictions: attributes that disagree with the structure, and
// names that are not UTF-16, are refused so that an extractor looking at one
// of IsDir and Mode cannot be misled.
func TestContradictions(t *testing.T) {
	for _, c := range []struct {
		name  string
		files []testFile
	}{
		{"file with directory mode", []testFile{{name: "f", data: "x", attrib: unixExt | 0o040755<<16}}},
		{"empty file with directory mode", []testFile{{name: "f", noData: true, empty: true, attrib: unixExt | 0o040755<<16}}},
		{"directory with symlink mode", []testFile{{name: "d", noData: true, attrib: unixExt | 0o120777<<16}}},
		{"directory with file mode", []testFile{{name: "d", noData: true, attrib: unixExt | 0o100644<<16}}},
		{"unpaired surrogate", []testFile{{name: string(rune(0xD800)) + "x", data: "x"}}},
	} {
		b := buildCopy(c.files, nil)
		if c.name == "unpaired surrogate" {
			// utf16.Encode replaced the surrogate; put it back.
			i := bytes.Index(b, []byte{0xFD, 0xFF, 'x', 0})
			b[i], b[i+1] = 0x00, 0xD8
			hdr := b[32+1:]
			binary.LittleEndian.PutUint32(b[28:], crc32.ChecksumIEEE(hdr))
			binary.LittleEndian.PutUint32(b[8:], crc32.ChecksumIEEE(b[12:32]))
		}
		if _, err := readAll(b, 1<<20); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", c.name, err)
		}
	}
}

// allocated runs f and returns the bytes it allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHugeDeclarations: counts and sizes far beyond the file are refused
// before anything proportional to them is allocated.
func TestHugeDeclarations(t *testing.T) {
	const tera = 1 << 40
	streams := func(parts ...[]byte) []byte {
		return cat([]byte{idHeader, idMainStreamsInfo}, cat(parts...), make([]byte, 64))
	}
	pack := cat([]byte{idPackInfo}, num(0), num(1), []byte{idSize}, num(10), []byte{idEnd})
	folder := cat([]byte{idUnpackInfo, idFolder}, num(1), []byte{0, 1, 0x01, 0x00}, []byte{idCodersUnpackSize}, num(10), []byte{idEnd})
	cases := []struct {
		name   string
		header []byte
		size   int // bytes of zero padding between signature and header
	}{
		{"2^40 files", cat([]byte{idHeader, idFilesInfo}, num(tera), make([]byte, 64)), 0},
		{"MaxEntries+1 files", cat([]byte{idHeader, idFilesInfo}, num(MaxEntries+1), make([]byte, 64)), 0},
		{"more files than header bytes", cat([]byte{idHeader, idFilesInfo}, num(50_000), make([]byte, 64)), 0},
		{"huge name block", cat([]byte{idHeader, idFilesInfo}, num(1), []byte{idName}, num(1<<50), make([]byte, 64)), 0},
		{"name block of 2^64-1", cat([]byte{idHeader, idFilesInfo}, num(1), []byte{idName}, num(1<<64-1), make([]byte, 64)), 0},
		{"huge empty-stream vector", cat([]byte{idHeader, idFilesInfo}, num(10), []byte{idEmptyStream}, num(tera), make([]byte, 64)), 0},
		{"2^40 pack streams", streams([]byte{idPackInfo}, num(0), num(tera)), 0},
		{"pack stream of 2^63", streams([]byte{idPackInfo}, num(0), num(1), []byte{idSize}, num(1<<63), []byte{idEnd}, []byte{idEnd}), 0},
		{"pack position 2^64-1", streams([]byte{idPackInfo}, num(1<<64-1), num(1), []byte{idSize}, num(1), []byte{idEnd}, []byte{idEnd}), 0},
		{"2^40 folders", streams(pack, []byte{idUnpackInfo, idFolder}, num(tera)), 0},
		{"2^40 coders", streams(pack, []byte{idUnpackInfo, idFolder}, num(1), []byte{0}, num(tera)), 0},
		{"2^40 coder streams", streams(pack, []byte{idUnpackInfo, idFolder}, num(1), []byte{0}, num(1), []byte{0x11, 0x00}, num(tera), num(1)), 0},
		{"coder properties of 2^40", streams(pack, []byte{idUnpackInfo, idFolder}, num(1), []byte{0}, num(1), []byte{0x21, 0x21}, num(tera)), 0},
		{"2^40 substreams", streams(pack, folder, []byte{idSubStreamsInfo, idNumUnpackStream}, num(tera)), 10},
		{"MaxEntries substreams in a tiny header", streams(pack, folder, []byte{idSubStreamsInfo, idNumUnpackStream}, num(MaxEntries), []byte{idSize}), 10},
		{"encoded header of 2^40 bytes", cat([]byte{idEncodedHeader}, pack, []byte{idUnpackInfo, idFolder}, num(1), []byte{0}, num(1), []byte{0x01, 0x00}, []byte{idCodersUnpackSize}, num(tera), []byte{idEnd, idEnd}), 10},
		{"LZMA dictionary beyond the limit", cat([]byte{idHeader, idMainStreamsInfo}, pack, []byte{idUnpackInfo, idFolder}, num(1), []byte{0}, num(1), []byte{0x23, 3, 1, 1, 5, 0x5D, 0, 0, 0, 0xF0}, []byte{idCodersUnpackSize}, num(tera), []byte{idEnd, idEnd, idEnd}), 10},
		{"LZMA2 dictionary beyond the limit", cat([]byte{idHeader, idMainStreamsInfo}, pack, []byte{idUnpackInfo, idFolder}, num(1), []byte{0}, num(1), []byte{0x21, 0x21, 1, 40}, []byte{idCodersUnpackSize}, num(tera), []byte{idEnd, idEnd, idEnd}), 10},
	}
	for _, c := range cases {
		b := archive(make([]byte, c.size), c.header)
		var err error
		n := allocated(func() { _, err = readAll(b, 1<<20) })
		if err == nil {
			t.Errorf("%s: no error", c.name)
		}
		if n > 16<<10 {
			t.Errorf("%s: allocated %d bytes", c.name, n)
		}
		t.Logf("%s: %v (%d bytes allocated)", c.name, err, n)
	}

	// The signature header's own sizes.
	b := archive(nil, []byte{idHeader, idEnd})
	binary.LittleEndian.PutUint64(b[20:], tera)
	binary.LittleEndian.PutUint32(b[8:], crc32.ChecksumIEEE(b[12:32]))
	if _, err := readAll(b, 0); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "limit") {
		t.Errorf("header of 2^40 bytes: %v", err)
	}
	binary.LittleEndian.PutUint64(b[12:], 1<<64-1)
	binary.LittleEndian.PutUint64(b[20:], 2)
	binary.LittleEndian.PutUint32(b[8:], crc32.ChecksumIEEE(b[12:32]))
	if _, err := readAll(b, 0); !errors.Is(err, ErrFormat) {
		t.Errorf("header offset 2^64-1: %v", err)
	}
}

// TestBomb: a folder whose declared size is far larger than what its data
// decodes to ends in an error, and one that does decode to a lot is read
// only as far as the caller reads.
func TestBomb(t *testing.T) {
	// 10 bytes of Copy data claiming 2^40 bytes of content.
	h := cat([]byte{idHeader, idMainStreamsInfo, idPackInfo}, num(0), num(1), []byte{idSize}, num(10), []byte{idEnd},
		[]byte{idUnpackInfo, idFolder}, num(1), []byte{0, 1, 0x01, 0x00}, []byte{idCodersUnpackSize}, num(1<<40), []byte{idEnd}, []byte{idEnd},
		[]byte{idFilesInfo}, num(1), []byte{idName}, num(1+4), []byte{0}, utf16Name("a"), []byte{idEnd, idEnd})
	if _, err := readAll(archive(make([]byte, 10), h), 1<<20); !errors.Is(err, ErrFormat) {
		t.Errorf("Copy data shorter than its size: %v", err)
	}
}

// eofReaderAt returns io.EOF with a read that reaches the end, as
// io.ReaderAt allows, and fails reads beyond failAt.
type eofReaderAt struct {
	b      []byte
	failAt int64
}

var errDisk = errors.New("disk on fire")

func (e *eofReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > e.failAt {
		return 0, errDisk
	}
	n, err := bytes.NewReader(e.b).ReadAt(p, off)
	if err == nil && off+int64(n) == int64(len(e.b)) {
		err = io.EOF
	}
	return n, err
}

func TestReaderAtBehaviour(t *testing.T) {
	for name, b := range seeds(t) {
		want, err := readAll(b, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readWith(&eofReaderAt{b: b, failAt: 1 << 62}, int64(len(b)))
		if err != nil || !equalItems(got, want) {
			t.Errorf("%s: io.EOF with the last complete read: %v", name, err)
		}
		// A failing disk is reported as itself, not as a corrupt archive.
		for at := int64(0); at < int64(len(b)); at += 7 {
			_, err := readWith(&eofReaderAt{b: b, failAt: at}, int64(len(b)))
			if err != nil && (!errors.Is(err, errDisk) || errors.Is(err, ErrFormat)) {
				t.Errorf("%s: read failing past %d: %v", name, at, err)
			}
		}
	}
}

func readWith(ra io.ReaderAt, size int64) ([]item, error) {
	r, err := NewReader(ra, size)
	if err != nil {
		return nil, err
	}
	var items []item
	for {
		e, rd, err := r.Next()
		if err == io.EOF {
			return items, nil
		}
		if err != nil {
			return nil, err
		}
		c, err := io.ReadAll(rd)
		if err != nil {
			return nil, err
		}
		items = append(items, item{*e, string(c)})
	}
}

// encodedCopy is an encoded header whose one folder is layer, stored
// (Copy) at pack position at.
func encodedCopy(at uint64, layer []byte) []byte {
	n := num(uint64(len(layer)))
	return cat([]byte{idEncodedHeader, idPackInfo}, num(at), num(1), []byte{idSize}, n, []byte{idEnd},
		[]byte{idUnpackInfo, idFolder}, num(1), []byte{0, 1, 0x01, 0x00}, []byte{idCodersUnpackSize}, n, []byte{idEnd}, []byte{idEnd})
}

// TestLimits: NewReaderLimits refuses an archive with more entries or
// more header than the caller allows, before it allocates for them,
// where NewReader reads it.
func TestLimits(t *testing.T) {
	files := make([]testFile, 20_000)
	for i := range files {
		files[i] = testFile{name: fmt.Sprintf("f%05d", i), noData: true, empty: true}
	}
	stored := buildCopy(files, nil)
	hdr := stored[32:] // no packed data: no file has any
	encoded := archive(hdr, encodedCopy(0, hdr))
	for _, b := range [][]byte{stored, encoded} {
		if items, err := readAll(b, 0); err != nil || len(items) != len(files) {
			t.Fatalf("with the default limits: %d entries, %v", len(items), err)
		}
	}
	size := int64(len(hdr))
	for _, c := range []struct {
		name string
		b    []byte
		lim  Limits
		want string
		most uint64 // bytes it may allocate
	}{
		// The header is read whole before its count of files.
		{"entries", stored, Limits{100, size}, "number of files: 20000 exceeds the limit of 100", uint64(size) + 16<<10},
		{"entries, header encoded", encoded, Limits{100, size}, "number of files: 20000 exceeds the limit of 100", uint64(size) + 16<<10},
		{"stored header", stored, Limits{MaxEntries, size - 1}, fmt.Sprintf("header of %d bytes exceeds the limit of %d", size, size-1), 16 << 10},
		{"decoded header", encoded, Limits{MaxEntries, size - 1}, fmt.Sprintf("decoded header of %d bytes exceeds the limit of %d", size, size-1), 16 << 10},
		{"limits above the caps", buildCopy(make([]testFile, MaxEntries+1), nil), Limits{math.MaxInt, 1 << 62}, "exceeds the limit of 100000", 0},
		{"negative limits", stored, Limits{-1, -1}, "exceeds the limit of 0", 16 << 10},
	} {
		var err error
		n := allocated(func() { _, err = NewReaderLimits(bytes.NewReader(c.b), int64(len(c.b)), c.lim) })
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
		if c.most > 0 && n > c.most {
			t.Errorf("%s: allocated %d bytes", c.name, n)
		}
	}
}

// heapAt records the live heap when a read starts at offset at.
type heapAt struct {
	*bytes.Reader
	at   int64
	live uint64
}

func (h *heapAt) ReadAt(p []byte, off int64) (int, error) {
	if off == h.at {
		h.live = liveHeap()
	}
	return h.Reader.ReadAt(p, off)
}

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestEncodedLayerReleased: a header encoded twice, its middle layer
// padded to 4 MiB, is decoded without the middle layer still held while
// the header under it decodes.
func TestEncodedLayerReleased(t *testing.T) {
	plain := buildCopy([]testFile{{name: "a", data: "alpha"}}, nil)
	data, hdr := plain[32:32+5], plain[32+5:]
	const pad = 4 << 20
	middle := cat(encodedCopy(5, hdr), make([]byte, pad))
	b := archive(cat(data, hdr, middle), encodedCopy(uint64(5+len(hdr)), middle))
	ra := &heapAt{Reader: bytes.NewReader(b), at: 32 + 5}
	before := liveHeap()
	items, err := readWith(ra, int64(len(b)))
	if err != nil || len(items) != 1 || items[0].content != "alpha" {
		t.Fatalf("read %+v, %v", items, err)
	}
	if ra.live == 0 {
		t.Fatal("the plain header was not read where expected")
	}
	if held := int64(ra.live) - int64(before); held > pad/2 {
		t.Errorf("%d bytes more live while the plain header decoded: the %d-byte layer above it is still held", held, len(middle))
	}
}
