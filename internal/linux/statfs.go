package linux

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// DiskUsage is the capacity of the filesystem holding a path, in bytes, as
// df(1) shows it: Used is Total minus Free, so blocks reserved for root count
// as neither used nor available.
type DiskUsage struct {
	Total, Free, Avail, Used uint64
}

// Statfs reports the filesystem holding path.
func Statfs(path string) (DiskUsage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return DiskUsage{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	// Block counts are in units of the fragment size. Bsize is only the
	// preferred I/O size and differs from it on some filesystems (upstream
	// multiplied by Bsize). Kernels before 2.6 leave Frsize 0.
	unit := int64(st.Frsize)
	if unit <= 0 {
		unit = int64(st.Bsize)
	}
	if unit <= 0 {
		return DiskUsage{}, fmt.Errorf("statfs %s: no block size", path)
	}
	return diskUsage(st.Blocks, st.Bfree, st.Bavail, uint64(unit)), nil
}

// diskUsage scales statfs block counts by the fragment size. Products stick
// at math.MaxUint64 rather than wrap, and Free and Avail are capped at Total
// so Used never underflows on a filesystem that reports nonsense.
func diskUsage(blocks, bfree, bavail, frsize uint64) DiskUsage {
	total := mulSat(blocks, frsize)
	free := min(mulSat(bfree, frsize), total)
	avail := min(mulSat(bavail, frsize), total)
	return DiskUsage{Total: total, Free: free, Avail: avail, Used: total - free}
}
