package linux

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DiskIO is the block I/O of the host since boot, in bytes, summed over whole
// disks.
type DiskIO struct {
	ReadBytes, WriteBytes uint64
}

// sectorSize is the unit of the /proc/diskstats sector columns. It is 512
// whatever the device's real sector size (see the kernel's iostats.rst).
const sectorSize = 512

// maxCachedDisks bounds the whole-disk cache so a host that keeps creating
// block devices with fresh names cannot grow it forever.
const maxCachedDisks = 256

// virtualPrefixes name block devices whose I/O is either not disk I/O (loop
// files, RAM disks, compressed swap in RAM) or is already counted on the
// disks beneath them (device-mapper and md RAID are stacked devices: a read
// from md0 is also a read from its member sda, so counting both double
// counts). They are skipped even though they appear in /sys/block.
var virtualPrefixes = [...]string{"loop", "ram", "zram", "dm-", "md"}

// parseDiskstats sums sectors read and written over the lines of
// /proc/diskstats whose device is a whole disk according to whole, skipping
// virtual devices first. Partitions are left to whole to reject: the kernel
// counts a partition's I/O on its disk as well, and upstream's counting of
// both doubled every figure. Lines with fewer than the 14 columns every
// kernel since 2.6.25 prints are skipped, as is a sector count that is not a
// valid number or would overflow once scaled to bytes; the rest of its line
// still counts.
func parseDiskstats(b []byte, whole func(name []byte) bool) DiskIO {
	var io DiskIO
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		var name, read, written []byte
		n := 0
		for rest := line; n < 14; n++ {
			var f []byte
			f, rest = nextField(rest)
			if len(f) == 0 {
				break
			}
			switch n {
			case 2:
				name = f
			case 5:
				read = f
			case 9:
				written = f
			}
		}
		if n < 14 || isVirtualDisk(name) || !whole(name) {
			continue
		}
		io.ReadBytes = addSat(io.ReadBytes, sectorsToBytes(read))
		io.WriteBytes = addSat(io.WriteBytes, sectorsToBytes(written))
	}
	return io
}

func isVirtualDisk(name []byte) bool {
	for _, p := range virtualPrefixes {
		if len(name) >= len(p) && string(name[:len(p)]) == p {
			return true
		}
	}
	return false
}

// sectorsToBytes returns 0 for a sector count that is not a number or whose
// byte count does not fit in a uint64 (a kernel printing (u64)-1).
func sectorsToBytes(f []byte) uint64 {
	s, ok := parseUint(f)
	if !ok {
		return 0
	}
	v, _ := mulOK(s, sectorSize)
	return v
}

// DiskStats reads <proc>/diskstats. A kernel built without block device
// support has no such file; that yields zero I/O, not an error.
//
// A device counts when <sys>/block/<name> exists: sysfs lists exactly the
// whole disks there (partitions live below their disk), so sda, nvme0n1 and
// mmcblk0 count while sda1, nvme0n1p1 and mmcblk0p1 do not. On OpenWrt every
// mtdblockN is its own whole device in /sys/block: each is a separate MTD
// partition with no parent block device also counting its I/O, so all of them
// are summed.
func (r *Reader) DiskStats() (DiskIO, error) {
	b, err := r.read(r.diskstatsPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return DiskIO{}, nil
		}
		return DiskIO{}, err
	}
	return parseDiskstats(b, r.isWholeDisk), nil
}

// isWholeDisk checks <sys>/block/<name>, remembering the answer per name:
// the set of disks rarely changes and the stat would otherwise cost a path
// allocation per device per beat.
func (r *Reader) isWholeDisk(name []byte) bool {
	if v, ok := r.disks[string(name)]; ok {
		return v
	}
	key := string(name)
	v := false
	// A name that could climb out of <sys>/block is never a disk.
	if key != "" && key != "." && key != ".." {
		// sysfs spells "cciss/c0d0" as "cciss!c0d0".
		fi, err := os.Stat(filepath.Join(r.blockDir, strings.ReplaceAll(key, "/", "!")))
		v = err == nil && fi.IsDir()
	}
	if len(r.disks) >= maxCachedDisks {
		clear(r.disks)
	}
	r.disks[key] = v
	return v
}
