package linux

import (
	"bytes"
	"os"

	"golang.org/x/sys/unix"
)

const (
	// maxFileSize bounds how much of any one file is read, so a broken or
	// hostile /proc cannot make the agent allocate without limit. The largest
	// file read here in practice, /proc/cpuinfo on a many-core server, is a
	// few hundred KiB.
	maxFileSize = 1 << 20

	// initialBufSize holds /proc/stat, /proc/meminfo and /proc/diskstats of a
	// small host in one read.
	initialBufSize = 8 << 10
)

// readFile reads path into buf, growing it (up to maxFileSize) when the file
// does not fit, and returns the content and the buffer to keep for the next
// call. It uses raw open/read/close instead of os.Open or os.ReadFile because
// those allocate a File, its finalizer and a fresh buffer on every call, and
// this runs on every heartbeat. A file longer than maxFileSize is cut at its
// last complete line so parsers never see half a record.
func readFile(path string, buf []byte) (data, grown []byte, err error) {
	var fd int
	for {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		// A PathError rather than fmt.Errorf: a missing optional file
		// (cgroup, diskstats) is the common case on some hosts and should
		// cost one small allocation per beat, not a formatted string.
		return nil, buf, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)

	if cap(buf) == 0 {
		buf = make([]byte, initialBufSize)
	}
	buf = buf[:cap(buf)]
	n := 0
	for {
		if n == len(buf) {
			if len(buf) >= maxFileSize {
				data = buf[:n]
				if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
					data = data[:i+1]
				}
				return data, buf, nil
			}
			bigger := make([]byte, min(2*len(buf), maxFileSize))
			copy(bigger, buf[:n])
			buf = bigger
		}
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, buf, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m <= 0 {
			return buf[:n], buf, nil
		}
		n += m
	}
}
