package rangefile

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A file written here reads back through ReadIndex, and its bytes are the
// documented layout (the Lua reader, waf/ranges.lua, reads them so).
func TestWriteAndReadIndex(t *testing.T) {
	label := strings.Repeat("a", LabelLen)
	buf, err := New("TESTFILE", label, 2, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	r0 := Record{ID: NumericID(1<<40 | 7), Enabled: true, N4: 1, Off4: len(buf)}
	buf = AppendV4(buf, 0x0a000000, 0x0affffff)
	r0.N6, r0.Off6 = 1, len(buf)
	buf = AppendV6(buf, Range{U128{0x20010db8_00000000, 0}, U128{0x20010db8_ffffffff, ^uint64(0)}})
	r0.Put(buf, 0)
	r1 := Record{}
	copy(r1.ID[:], "cUS")
	r1.Put(buf, 1)

	w := func(off int) uint32 { return binary.NativeEndian.Uint32(buf[off:]) }
	if string(buf[:8]) != "TESTFILE" || w(8) != 1 || w(12) != 0x01020304 || string(buf[16:80]) != label || w(80) != 2 || w(84) != 3 {
		t.Fatalf("header % x", buf[:88])
	}
	if w(88) != 7 || w(92) != 1<<8 || w(96) != 1 || w(100) != 1 || w(104) != uint32(r0.Off4) || w(108) != 1 || w(112) != uint32(r0.Off6) {
		t.Fatalf("record 0 % x", buf[88:120])
	}
	if w(r0.Off4) != 0x0a000000 || w(r0.Off4+4) != 0x0affffff || w(r0.Off6) != 0x20010db8 || w(r0.Off6+16) != 0x20010db8 || w(r0.Off6+28) != 0xffffffff {
		t.Fatalf("ranges % x", buf[r0.Off4:])
	}
	if len(buf) != HeaderSize+2*RecordSize+V4RangeSize+V6RangeSize {
		t.Fatalf("%d bytes", len(buf))
	}

	path := filepath.Join(t.TempDir(), "f.bin")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	x, err := ReadIndex(path, "TESTFILE", true)
	if err != nil || x.Label != label || x.Flags != 3 || len(x.IDs) != 2 || x.IDs[0] != NumericID(1<<40|7) || string(x.IDs[1][:3]) != "cUS" {
		t.Fatalf("index %+v, %v", x, err)
	}
	for _, c := range []struct {
		name  string
		bytes []byte
		magic string
	}{
		{"another magic", buf, "OTHERMAG"},
		{"truncated header", buf[:40], "TESTFILE"},
		{"records past the end", buf[:HeaderSize+RecordSize], "TESTFILE"},
	} {
		os.WriteFile(path, c.bytes, 0o644)
		if _, err := ReadIndex(path, c.magic, true); !errors.Is(err, ErrHeader) {
			t.Errorf("%s: %v, want ErrHeader", c.name, err)
		}
	}
	if _, err := New("SHORT", label, 0, 0, 0); err == nil {
		t.Error("a 5-byte magic was accepted")
	}
}

// Merge joins what overlaps or touches, across the halves of a U128 and up
// to the largest address, whatever the input order.
func TestMerge(t *testing.T) {
	top := ^uint64(0)
	r := func(loHi, loLo, hiHi, hiLo uint64) Range { return Range{U128{loHi, loLo}, U128{hiHi, hiLo}} }
	in := []Range{
		r(top, top, top, top),
		r(5, 0, 5, 9),
		r(0, 0, 0, 3),
		r(1, 0, 1, 0),
		r(0, 4, 0, top),
		r(5, 3, 5, 4),
		r(5, 11, 5, 20),
		r(0, 2, 0, 2),
		r(top, 0, top, top-1),
		r(5, 0, 5, 1),
		r(top, 5, top, 6),
	}
	want := []Range{
		r(0, 0, 1, 0),
		r(5, 0, 5, 9),
		r(5, 11, 5, 20),
		r(top, 0, top, top),
	}
	if got := Merge(in); !slices.Equal(got, want) {
		t.Errorf("merged %x, want %x", got, want)
	}
}

// BenchmarkMerge sorts and merges a group's worth of IPv6 networks in
// random order, a third of them overlapping or touching another.
func BenchmarkMerge(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	in := make([]Range, 100_000)
	for i := range in {
		lo := U128{0x20010db8_00000000 | rng.Uint64N(1<<20)<<16, 0}
		hi := U128{lo.Hi | rng.Uint64N(3), ^uint64(0)}
		in[i] = Range{lo, hi}
	}
	rs := make([]Range, len(in))
	b.ReportAllocs()
	for b.Loop() {
		copy(rs, in)
		Merge(rs)
	}
}
