package pages

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// rawZip is a zip of n central directory headers for a member "a" of no
// bytes, each with a name, extra field and comment of the given lengths,
// after the one local header they all point at: what archive/zip keeps in
// memory for a few bytes of package each. It returns the zip without its
// end records, and where its directory starts.
func rawZip(n, name, extra, comment int) ([]byte, int) {
	var b bytes.Buffer
	le := func(v ...any) {
		for _, x := range v {
			binary.Write(&b, binary.LittleEndian, x)
		}
	}
	b.WriteString("PK\x03\x04")
	le(uint16(20), uint16(0), uint16(0), uint32(0), uint32(0), uint32(0), uint32(0), uint16(1), uint16(0))
	b.WriteString("a")
	off := b.Len()
	n1 := strings.Repeat("a", name)
	x := make([]byte, extra)
	c := strings.Repeat("c", comment)
	for range n {
		b.WriteString("PK\x01\x02")
		le(uint16(20), uint16(20), uint16(0), uint16(0), uint32(0), uint32(0), uint32(0), uint32(0))
		le(uint16(name), uint16(extra), uint16(comment), uint16(0), uint16(0), uint32(0o100644<<16), uint32(0))
		b.WriteString(n1)
		b.Write(x)
		b.WriteString(c)
	}
	return b.Bytes(), off
}

// zipEnd appends end records to the first size bytes of a zip's
// directory at offset: a zip64 end record and its locator before them
// when zip64 (the 32-bit fields then say to look there, as Go's writer
// does), and comment after them.
func zipEnd(b []byte, entries, size, offset uint64, zip64 bool, comment string) []byte {
	le16 := binary.LittleEndian.AppendUint16
	le32 := binary.LittleEndian.AppendUint32
	le64 := binary.LittleEndian.AppendUint64
	if zip64 {
		rec := uint64(len(b))
		b = append(b, "PK\x06\x06"...)
		b = le64(b, 44)
		b = le16(le16(b, 45), 45)
		b = le32(le32(b, 0), 0)
		b = le64(le64(b, entries), entries)
		b = le64(le64(b, size), offset)
		b = append(b, "PK\x06\x07"...)
		b = le32(le64(le32(b, 0), rec), 1)
		entries, size, offset = 0xffff, 0xffffffff, 0xffffffff
	}
	b = append(b, "PK\x05\x06"...)
	b = le16(le16(b, 0), 0)
	b = le16(le16(b, uint16(entries)), uint16(entries))
	b = le32(le32(b, uint32(size)), uint32(offset))
	b = le16(b, uint16(len(comment)))
	return append(b, comment...)
}

// reZip replaces the end record of a zip that has no comment with the
// records zipEnd makes, adjusted by change.
func reZip(b []byte, zip64 bool, comment string, change func(entries, size, offset *uint64)) []byte {
	end := b[len(b)-22:]
	entries := uint64(binary.LittleEndian.Uint16(end[10:]))
	size := uint64(binary.LittleEndian.Uint32(end[12:]))
	offset := uint64(binary.LittleEndian.Uint32(end[16:]))
	if change != nil {
		change(&entries, &size, &offset)
	}
	return zipEnd(append([]byte(nil), b[:len(b)-22]...), entries, size, offset, zip64, comment)
}

// site2Zip is a site of two files for zips whose end records lie.
var site2Zip = []member{{name: "index.html", body: "x"}, {name: "about.html", body: "y"}}

// reZipCase is ms zipped, its end record changed by change.
func reZipCase(ms []member, change func(entries, size, offset *uint64)) func(*testing.T) ([]byte, []member) {
	return func(t *testing.T) ([]byte, []member) { return reZip(zipBytes(t, ms), false, "", change), ms }
}

// extractAllocs extracts pkg under lim and returns the bytes the extraction
// allocated, the package's file already written, and its error.
func extractAllocs(t *testing.T, pkg []byte, lim limits) (uint64, error) {
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
	dest := t.TempDir()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = extract(f, int64(len(pkg)), dest, lim)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, err
}

// A zip whose central directory would cost the agent tens of MiB in
// archive/zip before any per-entry limit applies is refused from its end
// records and a walk of its headers, allocating a small fraction of that.
// Each directory is one archive/zip would read whole: the 16-bit entry
// count of the end record agrees with the headers there modulo 65,536,
// which is all archive/zip checks.
func TestZipDirectoryBombsRefusedCheaply(t *testing.T) {
	// 2,000,000 declared in a zip64 end record over 99,456 headers of 47
	// bytes: 4.7 MB of package.
	many, off := rawZip(2_000_000%65536+65536, 1, 0, 0)
	many = zipEnd(many, 2_000_000, uint64(len(many)-off), uint64(off), true, "")
	// 5,001 declared, as many as 1,000 files allow, over 70,537 headers.
	hidden, off2 := rawZip(5001+65536, 1, 0, 0)
	hidden = zipEnd(hidden, 5001, uint64(len(hidden)-off2), uint64(off2), false, "")
	// 40 headers with 192 KiB of name, extra field and comment each.
	fat, off3 := rawZip(40, 0xffff, 0xffff, 0xffff)
	fatDir := len(fat) - off3
	fat = zipEnd(fat, 40, uint64(fatDir), uint64(off3), false, "")
	for _, tc := range []struct {
		name string
		pkg  []byte
		lim  limits
		want string
	}{
		{"2,000,000 entries declared", many, limits{files: 1, total: 1, perFile: 1}, "lists 2000000 entries"},
		{"more entries than declared", hidden, limits{files: maxFiles, total: 1, perFile: 1}, "more than the 5001 entries its end record declares"},
		{"long names and extra fields", fat, limits{files: 40, total: 1, perFile: 1}, fmt.Sprintf("declares %d bytes for 40 entries", fatDir)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alloc, err := extractAllocs(t, tc.pkg, tc.lim)
			t.Logf("%d-byte package: %d bytes allocated", len(tc.pkg), alloc)
			if !errors.Is(err, ErrPackage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %.200v, want a refusal naming %q", err, tc.want)
			}
			// archive/zip takes some 250 bytes for each header and all of
			// the names, extra fields and comments: without checkZip these
			// cost 27, 19 and 14 MB.
			if alloc >= 4<<20 {
				t.Fatalf("refusing the %d-byte package allocated %d bytes", len(tc.pkg), alloc)
			}
		})
	}
}

// Zips with a comment, with the longest comment, and in zip64 (Go's
// records, and Info-ZIP's, which keeps the counts that fit in the 32-bit
// record) extract whole.
func TestZipCommentAndZip64Extract(t *testing.T) {
	ms := []member{{name: "site/", dir: true}, {name: "site/index.html", body: "<h1>hi</h1>"}, {name: "site/a/b.css", body: "b{}"}}
	plain := zipBytes(t, ms)
	cases := []struct {
		name string
		pkg  []byte
	}{
		{"comment", reZip(plain, false, "built by the release job", nil)},
		{"65,535-byte comment", reZip(plain, false, strings.Repeat("#", 0xffff), nil)},
		{"zip64", reZip(plain, true, "", nil)},
		{"zip64 with a comment", reZip(plain, true, "zip64", nil)},
	}
	if _, err := exec.LookPath("zip"); err == nil {
		src := t.TempDir()
		for _, m := range ms {
			p := filepath.Join(src, m.name)
			if m.dir {
				os.MkdirAll(p, 0o755)
				continue
			}
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, []byte(m.body), 0o644)
		}
		out := filepath.Join(t.TempDir(), "z64.zip")
		cmd := exec.Command("zip", "-q", "-r", "-fz", "-z", out, "site")
		cmd.Dir, cmd.Stdin = src, strings.NewReader("a comment from zip -z\n")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("zip -fz: %v %s", err, b)
		}
		cases = append(cases, struct {
			name string
			pkg  []byte
		}{"Info-ZIP zip64 with a comment", []byte(read(t, out))})
	} else {
		t.Log("zip is not installed (make deps): Info-ZIP's zip64 untested")
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dest, out, err := extractBytes(t, tc.pkg, ms)
			if err != nil {
				t.Fatal(err)
			}
			names := append([]string(nil), out.names...)
			sort.Strings(names)
			if strings.Join(names, " ") != "site/a/b.css site/index.html" {
				t.Fatalf("extracted %v", names)
			}
			for _, m := range ms {
				if !m.dir && read(t, filepath.Join(dest, m.name)) != m.body {
					t.Fatalf("%s differs", m.name)
				}
			}
		})
	}
}
