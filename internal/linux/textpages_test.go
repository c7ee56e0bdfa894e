package linux

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Only the executable's read-only mappings are taken: never its data,
// another file's mapping, or anonymous memory.
func TestExecutableRanges(t *testing.T) {
	maps := `00400000-0079d000 r-xp 00000000 fd:01 1234 /usr/bin/openflare-agent
0079d000-00b6e000 r--p 0039d000 fd:01 1234 /usr/bin/openflare-agent
00b6e000-00bc1000 rw-p 0076e000 fd:01 1234 /usr/bin/openflare-agent
00bc1000-00c00000 rw-p 00000000 00:00 0
c000000000-c000400000 rw-p 00000000 00:00 0
7f0000000000-7f0000010000 r--p 00000000 fd:01 99 /data/etc/openflare/waf_geo.bin
7ffd1000-7ffd3000 r-xp 00000000 00:00 0 [vdso]
`
	got := executableRanges([]byte(maps))
	want := [][2]uintptr{{0x400000, 0x79d000}, {0x79d000, 0xb6e000}}
	if !slices.Equal(got, want) {
		t.Fatalf("ranges %x, want %x", got, want)
	}
	if got := executableRanges([]byte("garbage\n\n00400000 r-xp 0 fd:01 1 /x\n")); len(got) != 0 {
		t.Fatalf("malformed lines gave %x", got)
	}
}

// The process's file-backed resident pages shrink, and it runs on.
func TestDropExecutablePages(t *testing.T) {
	before := rssFile(t)
	if err := DropExecutablePages(); err != nil {
		t.Fatal(err)
	}
	if after := rssFile(t); after >= before {
		t.Fatalf("RssFile %d kB before, %d kB after", before, after)
	}
}

func rssFile(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatal("no RssFile line")
	return 0
}

// The file pages statm counts are the ones status reports.
func TestFileResident(t *testing.T) {
	n, err := FileResident()
	if err != nil {
		t.Fatal(err)
	}
	if kib := rssFile(t); n <= 0 || n/1024 > int64(kib)*2 || int64(kib) > n/1024*2 {
		t.Fatalf("FileResident %d B, RssFile %d kB", n, kib)
	}
}
