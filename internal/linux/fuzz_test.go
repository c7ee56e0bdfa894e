package linux

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// addFixtureSeeds seeds f with the named file of every fixture tree.
func addFixtureSeeds(f *testing.F, rel string) {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "*", rel))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzStat(f *testing.F) {
	addFixtureSeeds(f, "proc/stat")
	f.Add([]byte("cpu  18446744073709551615 1 -1 x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseStat(b)
		if err != nil && s != (CPUStat{}) {
			t.Fatalf("error %v with non-zero %+v", err, s)
		}
		for _, p := range []float64{CPUPercent(CPUStat{}, s), CPUPercent(s, CPUStat{}), CPUPercent(s, s)} {
			if math.IsNaN(p) || p < 0 || p > 100 {
				t.Fatalf("CPUPercent = %v for %+v", p, s)
			}
		}
	})
}

func FuzzMeminfo(f *testing.F) {
	addFixtureSeeds(f, "proc/meminfo")
	f.Add([]byte("MemTotal: 18446744073709551615 kB\nMemAvailable: 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, _ := parseMeminfo(b)
		if m.Used() > m.Total {
			t.Fatalf("Used %d > Total %d", m.Used(), m.Total)
		}
	})
}

func FuzzDiskstats(f *testing.F) {
	addFixtureSeeds(f, "proc/diskstats")
	f.Add([]byte("8 0 sda 0 0 36028797018963968 0 0 0 1 0 0 0 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		calls := 0
		io := parseDiskstats(b, func(name []byte) bool {
			calls++
			if len(name) == 0 || isVirtualDisk(name) {
				t.Fatalf("asked about %q", name)
			}
			return len(name)%2 == 0
		})
		if calls > bytes.Count(b, []byte("\n"))+1 {
			t.Fatalf("%d lookups for %d lines", calls, bytes.Count(b, []byte("\n"))+1)
		}
		if calls == 0 && io != (DiskIO{}) {
			t.Fatalf("counted %+v with no disk accepted", io)
		}
	})
}

func FuzzUptime(f *testing.F) {
	addFixtureSeeds(f, "proc/uptime")
	f.Add([]byte("1.2.3 4"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := parseUptime(b); err != nil && v != 0 {
			t.Fatalf("error %v with value %d", err, v)
		}
	})
}

func FuzzCPUInfo(f *testing.F) {
	addFixtureSeeds(f, "proc/cpuinfo")
	f.Add([]byte("processor: 0\nCPU implementer: 0x41\nCPU part: 0xd0c\n"))
	f.Add([]byte("Processor\t: ARMv6-compatible processor rev 7 (v6l)\nHardware: BCM2708\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ci := parseCPUInfo(b)
		if len(ci.Hardware) > maxValueLen || len(ci.Model) > maxValueLen {
			t.Fatalf("unbounded values: %d, %d bytes", len(ci.Model), len(ci.Hardware))
		}
		if ci.Processors < 0 || ci.Processors > bytes.Count(b, []byte("processor")) {
			t.Fatalf("%d processors", ci.Processors)
		}
	})
}

func FuzzOSRelease(f *testing.F) {
	addFixtureSeeds(f, "etc/os-release")
	addFixtureSeeds(f, "usr/lib/os-release")
	f.Add([]byte(`PRETTY_NAME="a\"b'c"'d"e'\` + "\nVERSION_ID=\\"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := parseOSRelease(b)
		if len(r.Name) > maxValueLen || len(r.VersionID) > maxValueLen {
			t.Fatalf("unbounded values: %d, %d bytes", len(r.Name), len(r.VersionID))
		}
	})
}

func FuzzCgroup(f *testing.F) {
	addFixtureSeeds(f, "proc/self/cgroup")
	f.Add([]byte("0::/a/../b\n"))
	f.Add([]byte("max\n"))
	f.Add([]byte("anon 1\ninactive_file 18446744073709551615\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, ok := parseCgroupV2Path(b); ok {
			if len(p) == 0 || p[0] != '/' || bytes.IndexByte(p, 0) >= 0 {
				t.Fatalf("accepted path %q", p)
			}
			for _, elem := range bytes.Split(p, []byte("/")) {
				if string(elem) == ".." {
					t.Fatalf("accepted path %q climbing out of the mount", p)
				}
			}
		}
		if v, unlimited, err := parseCgroupBytes(b); (err != nil || unlimited) && v != 0 {
			t.Fatalf("value %d with unlimited=%v err=%v", v, unlimited, err)
		}
		parseInactiveFile(b)
	})
}
