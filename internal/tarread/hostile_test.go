package tarread

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
)

type hostileCase struct {
	name    string
	archive []byte
	want    string // in the error
	cut     bool   // the error is io.ErrUnexpectedEOF
}

// set rewrites a field of the header at b[0:512] and its checksum.
func set(b []byte, at int, v string) []byte {
	b = bytes.Clone(b)
	copy(b[at:], v)
	fix(b)
	return b
}

// raw rewrites a field of a header, not its checksum.
func raw(b []byte, at int, v string) []byte {
	b = bytes.Clone(b)
	copy(b[at:], v)
	return b
}

func repeat(b []byte, n int) []byte { return bytes.Repeat(b, n) }

func hostile() []hostileCase {
	two := cat(ent("a", '0', "x"), ent("b", '0', "y"), end())
	badSum := bytes.Clone(two)
	badSum[1024] = 'c'
	negative := set(hdr("a", '0', 0), 124, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
	past62 := set(hdr("a", '0', 0), 124, "\x80\x00\x00\x00\x40\x00\x00\x00\x00\x00\x00\x01")
	past63 := set(hdr("a", '0', 0), 124, "\x80\x00\x00\x00\x80\x00\x00\x00\x00\x00\x00\x00")
	gnuSparse := set(hdr("s", 'S', 0), 257, "ustar  \x00")
	gnuSparse[482] = 1
	fix(gnuSparse)
	ext := make([]byte, blockSize)
	ext[504] = 1
	return []hostileCase{
		{"bad checksum", badSum, "tar: header checksum mismatch at offset 1024", false},
		{"checksum not a number", raw(hdr("a", '0', 0), 148, "12x4567\x00"), "header checksum mismatch at offset 0", false},
		{"checksum blank", raw(hdr("a", '0', 0), 148, "        "), "header checksum mismatch at offset 0", false},
		{"truncated header", two[:1024+100], "tar: archive cut short at offset 1124", true},
		{"truncated data", cat(hdr("a", '0', 1000), []byte(body1000[:300])), "cut short at offset 812", true},
		{"truncated skipped data", cat(hdr("c", '7', 1000), []byte(body1000[:300])), "cut short at offset 812", true},
		{"truncated zero block", cat(ent("a", '0', "x"), make([]byte, 100)), "cut short at offset 1124", true},
		{"negative size", negative, "member size out of range at offset 0: -1", false},
		{"garbage size", set(hdr("a", '0', 0), 124, "0000012x45\x00"), `tar: size field not a number at offset 0: "0000012x45\x00\x00"`, false},
		{"size with a space inside", set(hdr("a", '0', 0), 124, "00000 12345\x00"), "size field not a number", false},
		{"size past 2^62", past62, "member size out of range at offset 0: 4611686018427387905", false},
		{"size past int64", past63, "size field", false},
		{"pax size negative", cat(pax('x', rec("size", "-5")), ent("a", '0', "")), "member size out of range at offset 1024: -5", false},
		{"pax size not a number", cat(pax('x', rec("size", "12a")), ent("a", '0', "")), `tar: pax size not a number at offset 1024: "12a"`, false},
		{"pax header negative size", set(hdr("x", 'x', 0), 124, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"), "pax header size not within 1 MiB at offset 0: -1", false},
		{"endless pax chain", repeat(pax('x', rec("path", "p")), 1000), "tar: more than 64 extended headers in a row at offset 65536", false},
		{"endless long-name chain", repeat(ent("././@LongLink", 'L', "n"), 1000), "more than 64 extended headers in a row", false},
		{"endless global headers", repeat(pax('g', rec("comment", "c")), 1000), "more than 64 extended headers in a row", false},
		{"oversized pax header", hdr("x", 'x', 1<<20+1), "tar: pax header size not within 1 MiB at offset 0: 1048577", false},
		{"oversized global header", hdr("g", 'g', 1<<20+1), "not within 1 MiB", false},
		{"pax header cut short", cat(hdr("x", 'x', 100), []byte(body1000[:50])), "cut short at offset 562", true},
		{"pax length short", cat(pax('x', "10 path=abc\n"), ent("a", '0', "")), `tar: pax record of the wrong length at offset 0: "10 path=abc\n"`, false},
		{"pax length long", cat(pax('x', "99 path=a\n"), ent("a", '0', "")), "pax record of the wrong length", false},
		{"pax length 0", cat(pax('x', "0 path=x\n"), ent("a", '0', "")), "pax record of the wrong length", false},
		{"pax length not a number", cat(pax('x', "x path=y\n"), ent("a", '0', "")), "pax record of the wrong length", false},
		{"pax length missing", cat(pax('x', "path=abc\n"), ent("a", '0', "")), "pax record of the wrong length", false},
		{"pax record without a newline", cat(pax('x', "12 path=abc "), ent("a", '0', "")), "pax record of the wrong length", false},
		{"pax record without =", cat(pax('x', "9 pathab\n"), ent("a", '0', "")), `tar: pax record not key=value at offset 0: "9 pathab\n"`, false},
		{"pax record without key", cat(pax('x', "7 =abc\n"), ent("a", '0', "")), "pax record not key=value", false},
		{"pax garbage after records", cat(pax('x', rec("path", "p")+"\x00\x00"), ent("a", '0', "")), "pax record of the wrong length", false},
		{"malformed global header", cat(pax('g', "5 ab\n"), ent("a", '0', "")), "pax record not key=value", false},
		{"oversized GNU long name", hdr("././@LongLink", 'L', 64<<10+1), "tar: GNU long name size not within 64 KiB at offset 0: 65537", false},
		{"oversized GNU long link", hdr("././@LongLink", 'K', 64<<10+1), "GNU long name size not within 64 KiB", false},
		{"huge declared size with short data", cat(pax('x', rec("size", "1099511627776")), hdr("a", '0', 0), []byte("0123456789")), "cut short at offset 1546", true},
		{"endless sparse map", cat(gnuSparse, repeat(ext, 3000)), "tar: sparse map past 2048 blocks at offset 0", false},
		{"sparse map cut short", cat(gnuSparse, ext, ext[:100]), "cut short", true},
	}
}

// Hostile archives fail with an error that names the problem, and keep
// failing.
func TestHostile(t *testing.T) {
	for _, c := range hostile() {
		t.Run(c.name, func(t *testing.T) {
			_, err := readAll(c.archive)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if errors.Is(err, io.ErrUnexpectedEOF) != c.cut {
				t.Errorf("%v: errors.Is(io.ErrUnexpectedEOF) = %v", err, !c.cut)
			}
		})
	}
}

func TestErrorSticks(t *testing.T) {
	b := hostile()[0].archive
	r := NewReader(bytes.NewReader(b))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	_, err1 := r.Next()
	_, err2 := r.Next()
	n, err3 := r.Read(make([]byte, 10))
	if err1 == nil || err2 != err1 || err3 != err1 || n != 0 {
		t.Fatal(err1, err2, n, err3)
	}
}

// A declared size costs nothing until data arrives: a member of 2^62 bytes
// and a pax header of 1 MiB, each with 10 bytes behind it, are read in a
// few KiB.
func TestDeclaredSizeAllocatesNothing(t *testing.T) {
	huge := set(hdr("a", '0', 0), 124, "\x80\x00\x00\x00\x40\x00\x00\x00\x00\x00\x00\x00")
	for _, b := range [][]byte{
		cat(huge, []byte("0123456789")),
		cat(hdr("x", 'x', 1<<20), []byte("0123456789")),
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r := NewReader(bytes.NewReader(b))
		_, err := r.Next()
		if err == nil {
			var n int64
			n, err = io.Copy(io.Discard, r)
			if n != 10 {
				t.Errorf("%d bytes of data", n)
			}
		}
		runtime.ReadMemStats(&after)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("got %v", err)
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 64<<10 {
			t.Errorf("%d bytes allocated", d)
		}
	}
}
