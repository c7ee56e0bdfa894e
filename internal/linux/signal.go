package linux

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
)

// errNoField is returned for a status file without the asked line.
var errNoField = errors.New("field missing from /proc/<pid>/status")

// SignalPending reports whether signal sig is queued for pid and not yet
// taken: for the whole process (ShdPnd) or its main thread (SigPnd), from
// /proc/<pid>/status.
func (fs FS) SignalPending(pid, sig int) (bool, error) {
	b, err := os.ReadFile(filepath.Join(fs.Proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return false, err
	}
	return signalPending(b, sig)
}

func signalPending(status []byte, sig int) (bool, error) {
	if sig < 1 || sig > 64 {
		return false, errors.New("no such signal")
	}
	found := 0
	for _, key := range []string{"SigPnd:", "ShdPnd:"} {
		i := bytes.Index(status, []byte("\n"+key))
		if i < 0 {
			continue
		}
		line, _, _ := bytes.Cut(status[i+1+len(key):], []byte("\n"))
		field, _ := nextField(line)
		mask, err := strconv.ParseUint(string(field), 16, 64)
		if err != nil {
			return false, errBadStat
		}
		found++
		if mask&(1<<(sig-1)) != 0 {
			return true, nil
		}
	}
	if found < 2 {
		return false, errNoField
	}
	return false, nil
}

// BlockedIn returns the system call pid is blocked in, from
// /proc/<pid>/syscall: blocked is false while it runs ("running") or
// waits outside a system call ("-1 ..."). Reading it takes the right to
// trace pid (root, or its own user while it is dumpable).
func (fs FS) BlockedIn(pid int) (nr int, blocked bool, err error) {
	b, err := os.ReadFile(filepath.Join(fs.Proc, strconv.Itoa(pid), "syscall"))
	if err != nil {
		return 0, false, err
	}
	return parseSyscall(b)
}

func parseSyscall(b []byte) (int, bool, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	field, _ := nextField(line)
	if string(field) == "running" {
		return 0, false, nil
	}
	nr, err := strconv.Atoi(string(field))
	if err != nil {
		return 0, false, errBadStat
	}
	return nr, nr >= 0, nil
}
