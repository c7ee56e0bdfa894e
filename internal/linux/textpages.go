package linux

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// DropExecutablePages takes the pages of this process's executable that
// are mapped read-only (its code and constant data) out of its resident
// set. They stay in the page cache, shared and reclaimable, and the ones
// the process still runs fault back in from there at first use; what
// start-up or a large apply touched once stops counting as the agent's
// memory. On a Go binary that is most of its RSS at rest (7 of 11 MiB).
// Writable mappings are never touched: dropping a private page that was
// written would lose the write. It reads the real /proc: it acts on the
// calling process.
func DropExecutablePages() error {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return err
	}
	for _, r := range executableRanges(maps) {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r[0], r[1]-r[0], unix.MADV_DONTNEED); errno != 0 {
			return errno
		}
	}
	return nil
}

// executableRanges are the [start, end) ranges of /proc/<pid>/maps text
// mapped read-only from the file of the first file mapping, the executable.
func executableRanges(maps []byte) [][2]uintptr {
	var exe []byte
	var out [][2]uintptr
	for line := range bytes.Lines(maps) {
		// start-end perms offset dev inode path
		f := bytes.Fields(line)
		if len(f) < 6 || bytes.Equal(f[4], []byte("0")) {
			continue
		}
		path := f[5]
		if exe == nil {
			exe = path
		}
		perms := f[1]
		if !bytes.Equal(path, exe) || len(perms) < 2 || perms[0] != 'r' || perms[1] == 'w' {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, [2]uintptr{uintptr(start), uintptr(end)})
	}
	return out
}

// FileResident is how many bytes of this process's resident set are
// pages of files (its executable's above all: RssFile, with shared
// memory, of which the agent has none), from /proc/self/statm.
func FileResident() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, err
	}
	// size resident shared text lib data dt, in pages
	_, rest := nextField(b)
	_, rest = nextField(rest)
	shared, _ := nextField(rest)
	n, ok := parseUint(shared)
	if !ok {
		return 0, fmt.Errorf("parse /proc/self/statm %q", b)
	}
	return int64(n) * int64(os.Getpagesize()), nil
}
