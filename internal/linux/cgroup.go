package linux

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

var errBadCgroupValue = errors.New("not a byte count")

// cgroupFiles names the memory files of one cgroup directory.
type cgroupFiles struct {
	max, current, stat string // memory.max, memory.current, memory.stat
}

func newCgroupFiles(dir string) cgroupFiles {
	return cgroupFiles{
		max:     filepath.Join(dir, "memory.max"),
		current: filepath.Join(dir, "memory.current"),
		stat:    filepath.Join(dir, "memory.stat"),
	}
}

// parseCgroupV2Path returns the path of the "0::<path>" line of
// /proc/<pid>/cgroup, the process's cgroup in the v2 hierarchy. It rejects a
// path that is not absolute or has a ".." element, so it can be joined under
// the cgroup mount without escaping it.
func parseCgroupV2Path(b []byte) ([]byte, bool) {
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		rest, ok := bytes.CutPrefix(line, []byte("0::"))
		if !ok {
			continue
		}
		if len(rest) == 0 || rest[0] != '/' || bytes.IndexByte(rest, 0) >= 0 {
			return nil, false
		}
		for p := rest; len(p) > 0; {
			var elem []byte
			elem, p, _ = bytes.Cut(p, []byte("/"))
			if string(elem) == ".." {
				return nil, false
			}
		}
		return rest, true
	}
	return nil, false
}

// parseCgroupBytes parses memory.max or memory.current. unlimited is true for
// the literal "max".
func parseCgroupBytes(b []byte) (v uint64, unlimited bool, err error) {
	line, _ := nextLine(b)
	line = trimSpace(line)
	if string(line) == "max" {
		return 0, true, nil
	}
	v, ok := parseUint(line)
	if !ok {
		return 0, false, errBadCgroupValue
	}
	return v, false, nil
}

// parseInactiveFile returns the inactive_file line of memory.stat.
func parseInactiveFile(b []byte) (uint64, bool) {
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		key, rest := nextField(line)
		if string(key) != "inactive_file" {
			continue
		}
		v, _ := nextField(rest)
		return parseUint(v)
	}
	return 0, false
}

// CgroupMemory reports the memory limit and usage of the cgroup v2 this
// process runs in, in bytes. ok is false, with a nil error, when there is
// no limit to prefer over /proc/meminfo: no cgroup v2 (or a hybrid setup
// whose memory controller is v1), memory.max absent or "max".
//
// The files are looked up at <sys>/fs/cgroup/<path>. If they are not there
// they are looked up at <sys>/fs/cgroup itself, which is where a container
// that was not given its own cgroup namespace sees its own cgroup while
// /proc/self/cgroup still shows the host's path for it.
//
// Only this process's own cgroup is consulted, not its ancestors: a limit set
// on a parent slice (say system.slice) is not a fact about the host's memory
// and would misreport a host agent as a small machine.
//
// used is memory.current minus inactive_file from memory.stat, as docker
// stats reports it: inactive page cache is reclaimed before the limit bites.
func (r *Reader) CgroupMemory() (limit, used uint64, ok bool, err error) {
	b, err := r.read(r.selfCgroupPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, 0, false, nil
		}
		return 0, 0, false, err
	}
	rel, found := parseCgroupV2Path(b)
	if !found {
		return 0, 0, false, nil
	}
	// Paths are rebuilt only when the process moved to another cgroup,
	// so the steady state costs no allocation here.
	if !bytes.Equal(rel, r.cgroupRel) {
		r.cgroupRel = append(r.cgroupRel[:0], rel...)
		r.cgroup = newCgroupFiles(filepath.Join(r.cgroupMount, string(rel)))
	}

	files := &r.cgroup
	limit, unlimited, err := r.readCgroupBytes(files.max)
	if errors.Is(err, fs.ErrNotExist) && files.max != r.cgroupRoot.max {
		files = &r.cgroupRoot
		limit, unlimited, err = r.readCgroupBytes(files.max)
	}
	if errors.Is(err, fs.ErrNotExist) || (err == nil && unlimited) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}

	used, unlimited, err = r.readCgroupBytes(files.current)
	if err == nil && unlimited {
		err = fmt.Errorf("%s: %w", files.current, errBadCgroupValue)
	}
	if err != nil {
		return 0, 0, false, err
	}

	// memory.stat is optional: without it usage includes reclaimable cache.
	if b, err := r.read(files.stat); err == nil {
		if inactive, ok := parseInactiveFile(b); ok && inactive < used {
			used -= inactive
		}
	}
	return limit, used, true, nil
}

// readCgroupBytes reads a single-number cgroup file, naming it in errors.
func (r *Reader) readCgroupBytes(path string) (v uint64, unlimited bool, err error) {
	b, err := r.read(path)
	if err != nil {
		return 0, false, err
	}
	v, unlimited, err = parseCgroupBytes(b)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", path, err)
	}
	return v, unlimited, nil
}
