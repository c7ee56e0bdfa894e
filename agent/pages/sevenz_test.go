package pages

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// sevenZBytes is a 7z of ms, which may hold only directories and empty
// files, laid out as 7zz writes them but without times or attributes.
// With encoded, the header is stored as the Copy-coded stream of an
// encoded header: reading it then takes decoding it, as for 7zz's
// LZMA-compressed one, and the encoded header says how long it is.
func sevenZBytes(t *testing.T, ms []member, encoded bool) []byte {
	t.Helper()
	num := func(v int) []byte { return binary.LittleEndian.AppendUint64([]byte{0xff}, uint64(v)) }
	prop := func(id byte, data []byte) []byte { return slices.Concat([]byte{id}, num(len(data)), data) }
	empty := make([]byte, (len(ms)+7)/8) // empty files, not directories
	names := []byte{0}                   // not stored outside the header
	for i, m := range ms {
		if m.body != "" || m.link != "" {
			t.Fatalf("sevenZBytes: %s has content", m.name)
		}
		if !m.dir {
			empty[i/8] |= 0x80 >> (i % 8)
		}
		for _, c := range strings.TrimSuffix(m.name, "/") {
			names = binary.LittleEndian.AppendUint16(names, uint16(c))
		}
		names = append(names, 0, 0)
	}
	all := bytes.Repeat([]byte{0xff}, len(empty)) // no entry has a stream
	hdr := slices.Concat([]byte{0x01, 0x05}, num(len(ms)), prop(0x0e, all), prop(0x0f, empty), prop(0x11, names), []byte{0, 0})
	var packed []byte
	if encoded {
		packed, hdr = hdr, slices.Concat([]byte{0x17, 0x06}, num(0), num(1), []byte{0x09}, num(len(hdr)),
			[]byte{0, 0x07, 0x0b}, num(1), []byte{0, 1, 0x01, 0x00, 0x0c}, num(len(hdr)), []byte{0, 0})
	}
	sig := []byte{'7', 'z', 0xbc, 0xaf, 0x27, 0x1c, 0, 4, 0, 0, 0, 0}
	sig = binary.LittleEndian.AppendUint64(sig, uint64(len(packed)))
	sig = binary.LittleEndian.AppendUint64(sig, uint64(len(hdr)))
	sig = binary.LittleEndian.AppendUint32(sig, crc32.ChecksumIEEE(hdr))
	binary.LittleEndian.PutUint32(sig[8:], crc32.ChecksumIEEE(sig[12:]))
	return slices.Concat(sig, packed, hdr)
}

// emptyFiles is n empty files with names of pad+11 characters: 98,000 of
// 75 make a header of 14.9 MB, most of what 7zz writes for such a tree.
func emptyFiles(n, pad int) []member {
	ms := make([]member, n)
	for i := range ms {
		ms[i].name = fmt.Sprintf("%s%06d.html", strings.Repeat("x", pad), i)
	}
	return ms
}

// A 7z package is refused from its header once it holds more entries
// than the declared files and the directory limit allow, or more header
// than those entries may take, before the reader allocates for either:
// a header of 15 MB naming 98,000 empty files, compressed to a few dozen
// KB by 7zz, cost 29 MB of allocations for a package declaring one file.
func TestSevenZipHeaderLimits(t *testing.T) {
	declared := []member{{name: "index.html"}}
	lim := limits{files: 1}
	entries := lim.files + lim.dirs() + 1
	most := max7zHeader(entries)
	wide := func(n int) []member {
		ms := wideDirs(n)
		ms[0].body = ""
		return ms
	}
	for _, tc := range []struct {
		name    string
		ms      []member
		encoded bool
		want    string
	}{
		{"98,000 empty files, header encoded", emptyFiles(98_000, 64), true, fmt.Sprintf("decoded header of 14920544 bytes exceeds the limit of %d", most)},
		{"98,000 empty files, header stored", emptyFiles(98_000, 64), false, fmt.Sprintf("archive: header of 14920544 bytes exceeds the limit of %d", most)},
		{"20,000 empty files", emptyFiles(20_000, 0), true, fmt.Sprintf("number of files: 20000 exceeds the limit of %d", entries)},
		// Within the reader's limits, the directory limit refuses it.
		{"as many entries as allowed", wide(entries - 1), true, "past the limit of 32 directories"},
		{"one entry more", wide(entries), true, fmt.Sprintf("number of files: %d exceeds the limit of %d", entries+1, entries)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkg := sevenZBytes(t, tc.ms, tc.encoded)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, _, err := extractBytes(t, pkg, declared)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrPackage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a refusal naming %q", err, tc.want)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
				t.Fatalf("refusing the %d-byte package allocated %d bytes", len(pkg), n)
			}
		})
	}
}

// A member name of 64 KiB is quoted in errors shortened: they end up in
// the log and in the health event sent to the server.
func TestLongNamesShortenedInErrors(t *testing.T) {
	long := strings.Repeat("x", 64<<10)
	deep := strings.Repeat(strings.Repeat("d", 200)+"/", maxDepth-1) + "f"
	for _, tc := range []struct {
		name string
		ms   []member
		want string
	}{
		{"refused name", []member{{name: long + "\x01", body: "x"}}, "holds a control character"},
		{"file the system refuses", []member{{name: "a/" + long, body: "x"}}, "file name too long"},
		{"directory the system refuses", []member{{name: long + "/f", body: "x"}}, "file name too long"},
		{"name given twice", []member{{name: deep, body: "x"}, {name: deep, body: "x"}}, "appears twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := extractBytes(t, tarBytes(t, tc.ms), tc.ms)
			if !errors.Is(err, ErrPackage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %.300v, want a refusal naming %q", err, tc.want)
			}
			if len(err.Error()) > 400 {
				t.Fatalf("a %d-byte error: %.300s", len(err.Error()), err)
			}
		})
	}
}
