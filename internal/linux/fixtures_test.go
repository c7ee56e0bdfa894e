package linux

import (
	"path/filepath"
	"testing"
)

// fixture describes one testdata tree and the values worked out by hand from
// its files. Byte figures are the file's kB × 1024 or sectors × 512.
type fixture struct {
	name      string
	cpu       CPUStat
	mem       MemInfo
	memUsed   uint64
	io        DiskIO
	uptime    uint64
	cgroupOK  bool
	cgLimit   uint64
	cgUsed    uint64
	cpuinfo   CPUInfo
	osRelease OSRelease
	kernel    string
}

var fixtures = []fixture{
	{
		name: "x86-server",
		cpu: CPUStat{User: 4705332, Nice: 3120, System: 1523490, Idle: 371284512, IOWait: 81234,
			IRQ: 0, SoftIRQ: 40213, Steal: 5120, Guest: 812, GuestNice: 0},
		mem: MemInfo{
			Total:        16318412 * 1024, // 16710053888
			Free:         1987644 * 1024,
			Available:    11203948 * 1024,
			Buffers:      412876 * 1024,
			Cached:       8392120 * 1024,
			SReclaimable: 712384 * 1024,
			HasAvailable: true,
		},
		memUsed: 5237211136, // (16318412 - 11203948) kB
		// Whole disks nvme0n1 and sda only; loop0-3 and dm-0 (LUKS on sda2)
		// are virtual, nvme0n1p1-3, sda1 and sda2 are partitions.
		io: DiskIO{
			ReadBytes:  60781969408,  // (98234112 + 20480672) sectors
			WriteBytes: 264835244032, // (412398720 + 104857616) sectors
		},
		uptime:    944206,
		cgroupOK:  true,
		cgLimit:   536870912,
		cgUsed:    141557760, // memory.current 183500800 - inactive_file 41943040
		cpuinfo:   CPUInfo{Model: "AMD EPYC 7543P 32-Core Processor", Processors: 4},
		osRelease: OSRelease{Name: "Debian GNU/Linux 12 (bookworm)", VersionID: "12"},
		kernel:    "6.1.0-18-amd64",
	},
	{
		name: "rpi-armv7",
		cpu: CPUStat{User: 1617380, Nice: 4784, System: 377491, Idle: 12089133, IOWait: 15926,
			SoftIRQ: 14156},
		mem: MemInfo{
			Total:        944136 * 1024,
			Free:         212340 * 1024,
			Available:    601232 * 1024,
			Buffers:      48120 * 1024,
			Cached:       398124 * 1024,
			SReclaimable: 31234 * 1024,
			HasAvailable: true,
		},
		memUsed: 351133696, // (944136 - 601232) kB
		// mmcblk0 only: ram0-15, loop0-7 and zram0 are in /sys/block but
		// virtual, mmcblk0p1 and mmcblk0p2 are partitions.
		io: DiskIO{
			ReadBytes:  4159209472, // 8123456 sectors
			WriteBytes: 6320987136, // 12345678 sectors
		},
		uptime: 35364,
		// Raspberry Pi kernels boot with cgroup_disable=memory: no memory.max.
		cgroupOK:  false,
		cpuinfo:   CPUInfo{Model: "ARMv7 Processor rev 4 (v7l)", Hardware: "BCM2835", Processors: 4},
		osRelease: OSRelease{Name: "Raspbian GNU/Linux 12 (bookworm)", VersionID: "12"},
		kernel:    "6.1.21-v7+",
	},
	{
		name: "openwrt-mips",
		cpu:  CPUStat{User: 181234, System: 312345, Idle: 29123456, SoftIRQ: 98765},
		// No MemAvailable line.
		mem: MemInfo{
			Total:        60348 * 1024,
			Free:         18124 * 1024,
			Buffers:      2048 * 1024,
			Cached:       12288 * 1024,
			SReclaimable: 2560 * 1024,
		},
		memUsed: 25935872, // 60348 - (18124 + 2048 + 12288 + 2560) kB
		// mtdblock0-5 are all whole devices. mtdblock3's sectors-written is
		// 18446744073709551615, which overflows as bytes and is dropped
		// alone (its 8168 sectors read still count); mtdblock4's
		// sectors-read is 4294967295, the last value before a 32-bit wrap.
		io: DiskIO{
			ReadBytes:  2199028514304, // (360+96+240+8168+4294967295+1408) sectors
			WriteBytes: 32768,         // 64 sectors (mtdblock5)
		},
		uptime:    297158,
		cgroupOK:  false, // memory.max is "max"
		cpuinfo:   CPUInfo{Model: "MIPS 24Kc V7.4", Hardware: "Atheros AR9330 rev 1", Processors: 1},
		osRelease: OSRelease{Name: "OpenWrt 23.05.3", VersionID: "23.05.3"}, // from usr/lib/os-release
		kernel:    "5.15.150",
	},
}

func fixtureFS(name string) FS {
	return NewFS(filepath.Join("testdata", name))
}

func TestFixtures(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			fsys := fixtureFS(fx.name)
			r := NewReader(fsys)

			cpu, err := r.CPUStat()
			if err != nil || cpu != fx.cpu {
				t.Errorf("CPUStat = %+v, %v; want %+v", cpu, err, fx.cpu)
			}
			mem, err := r.MemInfo()
			if err != nil || mem != fx.mem {
				t.Errorf("MemInfo = %+v, %v; want %+v", mem, err, fx.mem)
			}
			if got := mem.Used(); got != fx.memUsed {
				t.Errorf("MemInfo.Used = %d; want %d", got, fx.memUsed)
			}
			io, err := r.DiskStats()
			if err != nil || io != fx.io {
				t.Errorf("DiskStats = %+v, %v; want %+v", io, err, fx.io)
			}
			up, err := r.Uptime()
			if err != nil || up != fx.uptime {
				t.Errorf("Uptime = %d, %v; want %d", up, err, fx.uptime)
			}
			limit, used, ok, err := r.CgroupMemory()
			if err != nil || ok != fx.cgroupOK || limit != fx.cgLimit || used != fx.cgUsed {
				t.Errorf("CgroupMemory = %d, %d, %v, %v; want %d, %d, %v, nil",
					limit, used, ok, err, fx.cgLimit, fx.cgUsed, fx.cgroupOK)
			}
			ci, err := fsys.CPUInfo()
			if err != nil || ci != fx.cpuinfo {
				t.Errorf("CPUInfo = %+v, %v; want %+v", ci, err, fx.cpuinfo)
			}
			osr, err := fsys.OSRelease()
			if err != nil || osr != fx.osRelease {
				t.Errorf("OSRelease = %+v, %v; want %+v", osr, err, fx.osRelease)
			}
			k, err := fsys.KernelRelease()
			if err != nil || k != fx.kernel {
				t.Errorf("KernelRelease = %q, %v; want %q", k, err, fx.kernel)
			}

			// A second pass goes through the caches (whole-disk answers,
			// cgroup paths) and must agree with the first.
			dir := t.TempDir()
			s, err := r.Sample(dir)
			if err != nil {
				t.Fatalf("Sample: %v", err)
			}
			if s.CPU != fx.cpu || s.Mem != fx.mem || s.IO != fx.io || s.Uptime != fx.uptime ||
				s.CgroupOK != fx.cgroupOK || s.CgroupLimit != fx.cgLimit || s.CgroupUsed != fx.cgUsed {
				t.Errorf("Sample = %+v; disagrees with the single readers", s)
			}
			if s.Disk.Total == 0 || s.Disk.Used+s.Disk.Free != s.Disk.Total {
				t.Errorf("Sample.Disk = %+v for %s", s.Disk, dir)
			}
		})
	}
}

func TestSampleMemoryPrefersCgroup(t *testing.T) {
	s, err := NewReader(fixtureFS("x86-server")).Sample(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if total, used := s.Memory(); total != 536870912 || used != 141557760 {
		t.Errorf("x86 Memory() = %d, %d; want the cgroup's 536870912, 141557760", total, used)
	}
	s, err = NewReader(fixtureFS("openwrt-mips")).Sample(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if total, used := s.Memory(); total != 61796352 || used != 25935872 {
		t.Errorf("openwrt Memory() = %d, %d; want meminfo's 61796352, 25935872", total, used)
	}
}

func TestSampleMemoryLimitAboveRAM(t *testing.T) {
	s := Sample{
		Mem:         MemInfo{Total: 1 << 30, Available: 1 << 29, HasAvailable: true},
		CgroupLimit: 4 << 30, CgroupUsed: 2 << 30, CgroupOK: true,
	}
	if total, used := s.Memory(); total != 1<<30 || used != 1<<30 {
		t.Errorf("Memory() = %d, %d; want total capped at RAM and used at total", total, used)
	}
}
