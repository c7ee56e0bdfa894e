package rangefile

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
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
	buf = AppendV6(buf, 0x20010db8_00000000, 0, 0x20010db8_ffffffff, ^uint64(0))
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
