package linux

import (
	"errors"
	"fmt"
	"path/filepath"
	"unicode/utf8"
)

// maxValueLen bounds a single profile string (kernel release, CPU model, OS
// name) so that a malformed file cannot put megabytes into a heartbeat.
const maxValueLen = 256

var errEmpty = errors.New("empty")

// KernelRelease reads <proc>/sys/kernel/osrelease, the string uname -r
// prints.
func (fs FS) KernelRelease() (string, error) {
	path := filepath.Join(fs.Proc, "sys", "kernel", "osrelease")
	b, _, err := readFile(path, nil)
	if err != nil {
		return "", err
	}
	line, _ := nextLine(b)
	v := clip(trimSpace(line))
	if len(v) == 0 {
		return "", fmt.Errorf("%s: %w", path, errEmpty)
	}
	return v, nil
}

// clip converts a profile value to a string of at most maxValueLen bytes,
// cutting before a UTF-8 sequence rather than through it.
func clip(b []byte) string {
	if len(b) > maxValueLen {
		cut := maxValueLen
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		b = b[:cut]
	}
	return string(b)
}
