package linux

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
)

// Process is what /proc/<pid> tells about one process.
type Process struct {
	PID   int
	PPID  int
	State byte // R, S, D, Z, ... from /proc/<pid>/stat
	// Cmdline is the argument vector joined with spaces. A daemon that
	// retitles itself (nginx: "nginx: worker process") shows its title.
	Cmdline string
}

// Zombie reports whether the process has exited and awaits its parent.
func (p Process) Zombie() bool { return p.State == 'Z' || p.State == 'X' }

// errBadStat is returned for a stat line without the "(comm) S ppid" shape.
var errBadStat = errors.New("malformed /proc/<pid>/stat")

// Process reads /proc/<pid>/stat and /proc/<pid>/cmdline.
func (fs FS) Process(pid int) (Process, error) {
	p, err := fs.stat(pid)
	if err != nil {
		return Process{}, err
	}
	return p, fs.cmdline(&p)
}

func (fs FS) stat(pid int) (Process, error) {
	b, err := os.ReadFile(filepath.Join(fs.Proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return Process{}, err
	}
	p := Process{PID: pid}
	p.State, p.PPID, err = parseProcStat(b)
	return p, err
}

func (fs FS) cmdline(p *Process) error {
	b, err := os.ReadFile(filepath.Join(fs.Proc, strconv.Itoa(p.PID), "cmdline"))
	if err != nil {
		return err
	}
	p.Cmdline = string(bytes.TrimRight(bytes.ReplaceAll(b, []byte{0}, []byte{' '}), " "))
	return nil
}

// parseProcStat reads the state and the parent pid of a stat line,
// "pid (comm) S ppid ...". comm may hold spaces and parentheses, so the
// fields are found after the last ')'.
func parseProcStat(b []byte) (state byte, ppid int, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+3 >= len(b) || b[i+1] != ' ' {
		return 0, 0, errBadStat
	}
	state = b[i+2]
	rest := b[i+3:]
	field, _ := nextField(rest)
	n, err := strconv.Atoi(string(field))
	if err != nil || n < 0 {
		return 0, 0, errBadStat
	}
	return state, n, nil
}

// childPIDs lists the children of ppid's main thread from the kernel's
// own list (/proc/<pid>/task/<pid>/children): one read where scanning
// /proc reads every process's stat, and this runs every millisecond while
// a reload settles. A single-threaded parent (nginx's master) forks from
// that thread. An error (a kernel built without CONFIG_PROC_CHILDREN)
// leaves the scan to the caller.
func (fs FS) childPIDs(ppid int) ([]int, error) {
	id := strconv.Itoa(ppid)
	b, err := os.ReadFile(filepath.Join(fs.Proc, id, "task", id, "children"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range bytes.Fields(b) {
		pid, err := strconv.Atoi(string(f))
		if err != nil || pid <= 0 {
			return nil, errBadChildren
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

var errBadChildren = errors.New("malformed /proc/<pid>/task/<pid>/children")

// PIDs lists the numeric entries of /proc.
func (fs FS) PIDs() ([]int, error) {
	entries, err := os.ReadDir(fs.Proc)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(entries))
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Children lists the live (non-zombie) processes whose parent is ppid.
func (fs FS) Children(ppid int) []Process {
	pids, err := fs.childPIDs(ppid)
	if err != nil {
		if pids, err = fs.PIDs(); err != nil {
			return nil
		}
	}
	var out []Process
	for _, pid := range pids {
		if pid == ppid {
			continue
		}
		// Only the children's command lines are read: this runs every
		// few milliseconds while a reload settles.
		p, err := fs.stat(pid)
		if err == nil && p.PPID == ppid && !p.Zombie() && fs.cmdline(&p) == nil {
			out = append(out, p)
		}
	}
	return out
}
