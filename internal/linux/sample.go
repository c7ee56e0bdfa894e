package linux

import (
	"errors"
	"path/filepath"
)

// Reader reads the per-heartbeat facts through one reusable buffer. It is
// not safe for concurrent use; the heartbeat loop owns one.
type Reader struct {
	buf []byte

	statPath, meminfoPath, diskstatsPath, uptimePath, selfCgroupPath string
	blockDir, cgroupMount                                            string

	disks      map[string]bool // device name -> is a whole disk
	cgroupRel  []byte          // cgroup path last read from /proc/self/cgroup
	cgroup     cgroupFiles     // files of that cgroup
	cgroupRoot cgroupFiles     // files at the cgroup mount point itself
}

// NewReader returns a Reader over the roots of fsys.
func NewReader(fsys FS) *Reader {
	r := &Reader{
		statPath:       filepath.Join(fsys.Proc, "stat"),
		meminfoPath:    filepath.Join(fsys.Proc, "meminfo"),
		diskstatsPath:  filepath.Join(fsys.Proc, "diskstats"),
		uptimePath:     filepath.Join(fsys.Proc, "uptime"),
		selfCgroupPath: filepath.Join(fsys.Proc, "self", "cgroup"),
		blockDir:       filepath.Join(fsys.Sys, "block"),
		cgroupMount:    filepath.Join(fsys.Sys, "fs", "cgroup"),
		disks:          make(map[string]bool),
	}
	r.cgroupRoot = newCgroupFiles(r.cgroupMount)
	return r
}

// read reads path into the shared buffer. The result is only valid until
// the next read.
func (r *Reader) read(path string) ([]byte, error) {
	b, buf, err := readFile(path, r.buf)
	r.buf = buf
	return b, err
}

// Sample is one full reading of the host. Fields that could not be read are
// zero; Reader.Sample says which in its error.
type Sample struct {
	// CPU is cumulative; keep the previous Sample's CPU for CPUPercent.
	CPU CPUStat
	Mem MemInfo
	// CgroupLimit and CgroupUsed are set when CgroupOK: the process runs
	// in a cgroup v2 with a memory limit (see Reader.CgroupMemory).
	CgroupLimit, CgroupUsed uint64
	CgroupOK                bool
	Disk                    DiskUsage // filesystem of the data directory
	IO                      DiskIO    // cumulative, whole disks only
	Uptime                  uint64    // seconds since boot
}

// Memory returns the memory total and used to report: the cgroup's when the
// process is confined by a cgroup memory limit, else the host's. A limit
// above the host's RAM does not bind, so the total is the smaller of the two
// (as docker stats shows it).
func (s Sample) Memory() (total, used uint64) {
	if !s.CgroupOK {
		return s.Mem.Total, s.Mem.Used()
	}
	total = s.CgroupLimit
	if s.Mem.Total > 0 && s.Mem.Total < total {
		total = s.Mem.Total
	}
	return total, min(s.CgroupUsed, total)
}

// Sample reads everything a heartbeat reports, with dataDir the directory
// whose filesystem is reported as storage. A failing source does not stop
// the others: their values are returned together with the joined errors.
func (r *Reader) Sample(dataDir string) (Sample, error) {
	var s Sample
	var errs [6]error
	s.CPU, errs[0] = r.CPUStat()
	s.Mem, errs[1] = r.MemInfo()
	s.CgroupLimit, s.CgroupUsed, s.CgroupOK, errs[2] = r.CgroupMemory()
	s.Disk, errs[3] = Statfs(dataDir)
	s.IO, errs[4] = r.DiskStats()
	s.Uptime, errs[5] = r.Uptime()
	return s, errors.Join(errs[:]...)
}
