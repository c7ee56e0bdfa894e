package linux

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseUint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true},
		{"42", 42, true},
		{"4294967295", 4294967295, true},
		{"18446744073709551615", math.MaxUint64, true},
		{"18446744073709551616", 0, false},
		{"99999999999999999999999", 0, false},
		{"", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"12a", 0, false},
		{"1.5", 0, false},
	} {
		got, ok := parseUint([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseUint(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseHex(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0x41", 0x41, true},
		{"0xD08", 0xd08, true},
		{"0x", 0, false},
		{"41", 0, false},
		{"0xg1", 0, false},
		{"0x1ffffffffffffffff", 0, false},
	} {
		got, ok := parseHex([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseHex(%q) = %#x, %v; want %#x, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseStatOddFields(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     CPUStat
	}{
		{
			name: "each odd field is zero alone",
			in:   "cpu  1 -2 3 garbage 5 18446744073709551616 7 8 9 10\ncpu0 1 1 1 1 1 1 1 1 1 1\n",
			want: CPUStat{User: 1, System: 3, IOWait: 5, SoftIRQ: 7, Steal: 8, Guest: 9, GuestNice: 10},
		},
		{
			name: "2.6.10 kernel prints seven fields",
			in:   "cpu  10 20 30 40 50 60 70\n",
			want: CPUStat{User: 10, Nice: 20, System: 30, Idle: 40, IOWait: 50, IRQ: 60, SoftIRQ: 70},
		},
		{
			name: "extra future fields ignored",
			in:   "intr 1 2\ncpu\t1 2 3 4 5 6 7 8 9 10 11 12\n",
			want: CPUStat{1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
		},
	} {
		got, err := parseStat([]byte(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("%s: parseStat = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "cpu0 1 2 3 4\n", "cpux 1 2\n", "intr 1\n"} {
		if _, err := parseStat([]byte(in)); err == nil {
			t.Errorf("parseStat(%q): want an error for a missing aggregate line", in)
		}
	}
}

func TestCPUPercent(t *testing.T) {
	prev := CPUStat{User: 1000, Nice: 10, System: 500, Idle: 8000, IOWait: 100, IRQ: 5, SoftIRQ: 20, Steal: 3, Guest: 50}
	for _, tc := range []struct {
		name string
		cur  CPUStat
		want float64
	}{
		{
			// busy +75 (user 60 + system 15), idle +25 (idle 20 + iowait 5).
			name: "plain delta",
			cur:  CPUStat{User: 1060, Nice: 10, System: 515, Idle: 8020, IOWait: 105, IRQ: 5, SoftIRQ: 20, Steal: 3, Guest: 50},
			want: 75,
		},
		{
			// The 40 guest ticks are already inside user's +40: summing
			// every column would give 80/100 busy instead of 40/60.
			name: "guest not double counted",
			cur:  CPUStat{User: 1040, Nice: 10, System: 500, Idle: 8020, IOWait: 100, IRQ: 5, SoftIRQ: 20, Steal: 3, Guest: 90},
			want: 200.0 / 3,
		},
		{name: "zero delta", cur: prev, want: 0},
		{
			name: "everything went backwards (reboot)",
			cur:  CPUStat{User: 1, Idle: 2},
			want: 0,
		},
		{
			// Idle+iowait dropped by 10 (NO_HZ iowait quirk): it counts as
			// no idle time, never as negative.
			name: "idle went backwards",
			cur:  CPUStat{User: 1010, Nice: 10, System: 500, Idle: 7990, IOWait: 100, IRQ: 5, SoftIRQ: 20, Steal: 3, Guest: 50},
			want: 100,
		},
		{
			name: "saturated counters",
			cur:  CPUStat{User: math.MaxUint64, Nice: math.MaxUint64, Idle: math.MaxUint64, IOWait: math.MaxUint64},
			want: 100 * (math.MaxUint64 - 1538.0) / (math.MaxUint64 - 1538.0 + math.MaxUint64 - 8100.0),
		},
	} {
		got := CPUPercent(prev, tc.cur)
		if math.Abs(got-tc.want) > 1e-9 || got < 0 || got > 100 || math.IsNaN(got) {
			t.Errorf("%s: CPUPercent = %v; want %v", tc.name, got, tc.want)
		}
	}
	if got := CPUPercent(CPUStat{}, CPUStat{}); got != 0 {
		t.Errorf("CPUPercent(zero, zero) = %v; want 0", got)
	}
}

func TestParseMeminfoOddFields(t *testing.T) {
	in := "MemTotal:  1000 kB\n" +
		"MemFree:   -5 kB\n" + // garbage: Free alone is lost
		"MemAvailable: 600 MB\n" + // unknown unit: treated as absent
		"Buffers: 18014398509481984 kB\n" + // overflows as bytes
		"Cached:    100 kB\n" +
		"SReclaimable: 50 kB\n" +
		"HugePages_Total:   7\n" +
		"no colon line\n"
	got, err := parseMeminfo([]byte(in))
	want := MemInfo{Total: 1024000, Cached: 102400, SReclaimable: 51200}
	if err != nil || got != want {
		t.Fatalf("parseMeminfo = %+v, %v; want %+v", got, err, want)
	}
	// No MemAvailable: 1000 - (0 + 0 + 100 + 50) kB.
	if u := got.Used(); u != 850*1024 {
		t.Errorf("Used = %d; want %d", u, 850*1024)
	}

	// The fallback estimate is capped at Total, so Used is 0, not negative.
	m := MemInfo{Total: 100, Free: 80, Buffers: 10, Cached: 30, SReclaimable: 5}
	if u := m.Used(); u != 0 {
		t.Errorf("Used with estimate above total = %d; want 0", u)
	}
	// MemAvailable of 0 is a real value, not "missing".
	m = MemInfo{Total: 100, Free: 80, HasAvailable: true}
	if u := m.Used(); u != 100 {
		t.Errorf("Used with MemAvailable 0 = %d; want 100", u)
	}
	m = MemInfo{Total: 100, Available: 200, HasAvailable: true}
	if u := m.Used(); u != 0 {
		t.Errorf("Used with MemAvailable > MemTotal = %d; want 0", u)
	}

	got, err = parseMeminfo([]byte("MemFree: 5 kB\nMemTotal: x kB\n"))
	if err == nil || got.Free != 5*1024 {
		t.Errorf("parseMeminfo without a valid MemTotal = %+v, %v; want Free kept and an error", got, err)
	}
}

func TestParseDiskstats(t *testing.T) {
	all := func([]byte) bool { return true }
	in := "" +
		"   8       0 sda 1 0 10 0 1 0 20 0 0 0\n" + // 13 fields: skipped
		"   8       1 sda1 1 0\n" + // 2.6.24-style partition line: skipped
		"   8      16 sdb 1 0 100 0 1 0 200 0 0 0 0\n" + // 14 fields, as before 4.18: counted
		"   8      32 sdc 1 0 garbage 0 1 0 300 0 0 0 0 0 0 0 0 0 0\n" + // read lost, write kept
		"   8      48 sdd 1 0 40 0 1 0 -1 0 0 0 0\n" + // write lost, read kept
		"   9       0 md0 1 0 1000 0 1 0 1000 0 0 0 0\n" + // stacked on sdb/sdc: skipped
		" 253       0 dm-0 1 0 1000 0 1 0 1000 0 0 0 0\n" +
		"   7       0 loop0 1 0 1000 0 1 0 1000 0 0 0 0\n" +
		"   1       0 ram0 1 0 1000 0 1 0 1000 0 0 0 0\n" +
		" 254       0 zram0 1 0 1000 0 1 0 1000 0 0 0 0\n" +
		"   8      64 sde 1 0 36028797018963968 0 1 0 2 0 0 0 0\n" // 2^55 sectors = 2^64 bytes: dropped
	got := parseDiskstats([]byte(in), all)
	want := DiskIO{ReadBytes: (100 + 40) * 512, WriteBytes: (200 + 300 + 2) * 512}
	if got != want {
		t.Errorf("parseDiskstats = %+v; want %+v", got, want)
	}

	// The sum saturates rather than wraps.
	big := "8 0 sda 0 0 36028797018963967 0 0 0 0 0 0 0 0\n8 16 sdb 0 0 36028797018963967 0 0 0 0 0 0 0 0\n"
	if got := parseDiskstats([]byte(big), all); got.ReadBytes != math.MaxUint64 {
		t.Errorf("saturating sum = %d; want MaxUint64", got.ReadBytes)
	}
}

func TestWholeDiskLookup(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"sys/block/cciss!c0d0", "sys/block/sda/sda1", "sys/block/md127"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A regular file named like a disk is not a disk.
	if err := os.WriteFile(filepath.Join(root, "sys/block/notdir"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := NewReader(NewFS(root))
	for name, want := range map[string]bool{
		"cciss/c0d0": true, "sda": true, "sda1": false, "notdir": false,
		".": false, "..": false, "": false, "../block": false, "sd\x00a": false,
	} {
		for pass := range 2 { // the second pass is answered from the cache
			if got := r.isWholeDisk([]byte(name)); got != want {
				t.Errorf("pass %d: isWholeDisk(%q) = %v; want %v", pass, name, got, want)
			}
		}
	}

	// The cache is bounded.
	for i := range 3 * maxCachedDisks {
		r.isWholeDisk([]byte("sdx" + strings.Repeat("a", i%50) + string(rune('a'+i%26))))
	}
	if len(r.disks) > maxCachedDisks {
		t.Errorf("cache holds %d names; bound is %d", len(r.disks), maxCachedDisks)
	}
}

func TestParseUptime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"350735.47 234388.90\n", 350735, true},
		{"12", 12, true},
		{"0.99 0.50", 0, true},
		{"18446744073709551615.99 1", math.MaxUint64, true},
		{"", 0, false},
		{"\n", 0, false},
		{"-1.00 2.00", 0, false},
		{"abc 1", 0, false},
		{".5 1", 0, false},
	} {
		got, err := parseUptime([]byte(tc.in))
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("parseUptime(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseCPUInfo(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     CPUInfo
	}{
		{
			name: "arm64 kernel: implementer and part only",
			in: "processor\t: 0\nBogoMIPS\t: 108.00\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU part\t: 0xd08\n\n" +
				"processor\t: 1\nCPU implementer\t: 0x41\nCPU part\t: 0xd08\n",
			want: CPUInfo{Model: "ARM Cortex-A72", Processors: 2},
		},
		{
			name: "part not in the table",
			in:   "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n",
			want: CPUInfo{Model: "ARM 0x41 part 0xd0c", Processors: 1},
		},
		{
			name: "known part number from another implementer",
			in:   "processor\t: 0\nCPU implementer\t: 0x51\nCPU part\t: 0xd03\n",
			want: CPUInfo{Model: "ARM 0x51 part 0xd03", Processors: 1},
		},
		{
			name: "ARM kernel before 3.8: capital Processor is the model",
			in:   "Processor\t: ARMv7 Processor rev 10 (v7l)\nprocessor\t: 0\nprocessor\t: 1\nHardware\t: Freescale i.MX 6Quad\n",
			want: CPUInfo{Model: "ARMv7 Processor rev 10 (v7l)", Hardware: "Freescale i.MX 6Quad", Processors: 2},
		},
		{
			name: "Hardware when there is no model",
			in:   "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xc07\nHardware\t: Allwinner sun8i Family\n",
			want: CPUInfo{Model: "Allwinner sun8i Family", Hardware: "Allwinner sun8i Family", Processors: 1},
		},
		{
			name: "MIPS without cpu model falls back to system type",
			in:   "system type\t\t: MediaTek MT7621 ver:1 eco:3\nprocessor\t\t: 0\n",
			want: CPUInfo{Model: "MediaTek MT7621 ver:1 eco:3", Hardware: "MediaTek MT7621 ver:1 eco:3", Processors: 1},
		},
		{
			name: "first non-empty model wins",
			in:   "processor\t: 0\nmodel name\t:\nprocessor\t: 1\nmodel name\t: Intel(R) Core(TM) i5\nmodel name\t: other\n",
			want: CPUInfo{Model: "Intel(R) Core(TM) i5", Processors: 2},
		},
		{name: "empty", in: "", want: CPUInfo{}},
		{name: "garbage part", in: "CPU implementer: 0x41\nCPU part: zz\n", want: CPUInfo{}},
	} {
		if got := parseCPUInfo([]byte(tc.in)); got != tc.want {
			t.Errorf("%s: parseCPUInfo = %+v; want %+v", tc.name, got, tc.want)
		}
	}

	long := "model name\t: " + strings.Repeat("é", 200) + "\n"
	if got := parseCPUInfo([]byte(long)).Model; len(got) > maxValueLen || got != strings.Repeat("é", maxValueLen/2) {
		t.Errorf("long model clipped to %d bytes %q; want %d whole runes", len(got), got, maxValueLen/2)
	}
}

func TestParseOSRelease(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     OSRelease
	}{
		{
			name: "double quotes with escapes",
			in:   `PRETTY_NAME="My \"Box\" \$HOME \\ \q"` + "\nVERSION_ID=\"1.0\"\n",
			want: OSRelease{Name: `My "Box" $HOME \ \q`, VersionID: "1.0"},
		},
		{
			name: "single quotes are literal",
			in:   `PRETTY_NAME='It\'s'` + "\nVERSION_ID='3'\n",
			want: OSRelease{Name: `It\s`, VersionID: "3"},
		},
		{
			name: "unquoted with backslash escape",
			in:   "NAME=Alpine\\ Linux\nVERSION_ID=3.19.1\n",
			want: OSRelease{Name: "Alpine Linux", VersionID: "3.19.1"},
		},
		{
			name: "NAME when PRETTY_NAME is missing or empty",
			in:   "NAME=\"Fedora Linux\"\nPRETTY_NAME=\"\"\n",
			want: OSRelease{Name: "Fedora Linux"},
		},
		{
			name: "concatenation, comments, blank lines, CRLF, unterminated quote",
			in:   "# PRETTY_NAME=\"no\"\n\n  PRETTY_NAME=\"Open\"'Wrt' \r\nVERSION_ID=\"23.05\n=x\nFOO\n",
			want: OSRelease{Name: "OpenWrt", VersionID: "23.05"},
		},
	} {
		if got := parseOSRelease([]byte(tc.in)); got != tc.want {
			t.Errorf("%s: parseOSRelease = %+v; want %+v", tc.name, got, tc.want)
		}
	}
}

func TestOSReleaseMissing(t *testing.T) {
	root := t.TempDir()
	_, err := NewFS(root).OSRelease()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "etc", "os-release")) ||
		!strings.Contains(err.Error(), filepath.Join(root, "usr", "lib", "os-release")) {
		t.Errorf("OSRelease with neither file: %v; want an error naming both", err)
	}
}

func TestParseCgroupV2Path(t *testing.T) {
	for in, want := range map[string]string{
		"12:memory:/x\n0::/system.slice/a.service\n": "/system.slice/a.service",
		"0::/\n":                 "/",
		"0::/a/..b/c\n":          "/a/..b/c",
		"0::/a/../../etc\n":      "",
		"0::..\n":                "",
		"0::\n":                  "",
		"0::relative\n":          "",
		"0::/a\x00b\n":           "",
		"1:name=systemd:/init\n": "",
		"":                       "",
		"0::/a/b/\n0::/second\n": "/a/b/",
		"0::/with space/x (y)\n": "/with space/x (y)",
	} {
		got, ok := parseCgroupV2Path([]byte(in))
		if string(got) != want || ok != (want != "") {
			t.Errorf("parseCgroupV2Path(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

// writeTree creates files (path -> content) under a new temporary root.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCgroupMemory(t *testing.T) {
	const leaf = "sys/fs/cgroup/app/"
	for _, tc := range []struct {
		name        string
		files       map[string]string
		limit, used uint64
		ok, err     bool
	}{
		{
			name:  "no memory.stat: usage as is",
			files: map[string]string{"proc/self/cgroup": "0::/app\n", leaf + "memory.max": "1000\n", leaf + "memory.current": "400\n"},
			limit: 1000, used: 400, ok: true,
		},
		{
			name: "inactive_file above usage is ignored",
			files: map[string]string{"proc/self/cgroup": "0::/app\n", leaf + "memory.max": "1000\n", leaf + "memory.current": "400\n",
				leaf + "memory.stat": "anon 1\ninactive_file 500\n"},
			limit: 1000, used: 400, ok: true,
		},
		{
			// Container without its own cgroup namespace: the host path is
			// not mounted, its own cgroup is at the mount root.
			name: "falls back to the mount root",
			files: map[string]string{"proc/self/cgroup": "0::/docker/0123abcd\n",
				"sys/fs/cgroup/memory.max": "2000\n", "sys/fs/cgroup/memory.current": "900\n",
				"sys/fs/cgroup/memory.stat": "inactive_file 100\n"},
			limit: 2000, used: 800, ok: true,
		},
		{name: "cgroup v1 only", files: map[string]string{"proc/self/cgroup": "4:memory:/x\n"}},
		{name: "no /proc/self/cgroup", files: map[string]string{"proc/stat": "cpu 1\n"}},
		{name: "no memory.max anywhere", files: map[string]string{"proc/self/cgroup": "0::/app\n", leaf + "cgroup.procs": "1\n"}},
		{
			name:  "memory.max garbage",
			files: map[string]string{"proc/self/cgroup": "0::/app\n", leaf + "memory.max": "lots\n", leaf + "memory.current": "1\n"},
			err:   true,
		},
		{
			name:  "memory.current missing",
			files: map[string]string{"proc/self/cgroup": "0::/app\n", leaf + "memory.max": "1000\n"},
			err:   true,
		},
		{
			name:  "memory.current max",
			files: map[string]string{"proc/self/cgroup": "0::/app\n", leaf + "memory.max": "1000\n", leaf + "memory.current": "max\n"},
			err:   true,
		},
	} {
		r := NewReader(NewFS(writeTree(t, tc.files)))
		limit, used, ok, err := r.CgroupMemory()
		if limit != tc.limit || used != tc.used || ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("%s: CgroupMemory = %d, %d, %v, %v; want %d, %d, %v, err=%v",
				tc.name, limit, used, ok, err, tc.limit, tc.used, tc.ok, tc.err)
		}
	}
}

func TestMissingFiles(t *testing.T) {
	root := t.TempDir()
	r := NewReader(NewFS(root))

	// Legitimately absent: a kernel without block devices or cgroups.
	if io, err := r.DiskStats(); err != nil || io != (DiskIO{}) {
		t.Errorf("DiskStats without the file = %+v, %v; want zero, nil", io, err)
	}
	if _, _, ok, err := r.CgroupMemory(); ok || err != nil {
		t.Errorf("CgroupMemory without files = %v, %v; want false, nil", ok, err)
	}

	// Required: the error names the file.
	for name, read := range map[string]func() error{
		"stat":    func() error { _, err := r.CPUStat(); return err },
		"meminfo": func() error { _, err := r.MemInfo(); return err },
		"uptime":  func() error { _, err := r.Uptime(); return err },
	} {
		err := read()
		if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "proc", name)) {
			t.Errorf("%s: error %v does not name the file", name, err)
		}
	}

	// Sample still returns what it could read, and every error.
	_, err := r.Sample(filepath.Join(root, "no-such-dir"))
	for _, part := range []string{"stat", "meminfo", "uptime", "no-such-dir"} {
		if err == nil || !strings.Contains(err.Error(), part) {
			t.Errorf("Sample error %v does not mention %s", err, part)
		}
	}
}

func TestParseErrorsNameTheFile(t *testing.T) {
	root := writeTree(t, map[string]string{
		"proc/stat":    "intr 1\n",
		"proc/meminfo": "MemFree: 1 kB\n",
		"proc/uptime":  "soon\n",
	})
	r := NewReader(NewFS(root))
	_, e1 := r.CPUStat()
	_, e2 := r.MemInfo()
	_, e3 := r.Uptime()
	for i, err := range []error{e1, e2, e3} {
		name := []string{"stat", "meminfo", "uptime"}[i]
		if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "proc", name)) {
			t.Errorf("%s: error %v does not name the file", name, err)
		}
	}
}

func TestReadFileLimits(t *testing.T) {
	dir := t.TempDir()

	// Larger than the initial buffer: read whole, through growth.
	mid := strings.Repeat("line of text\n", 3*initialBufSize/13)
	p := filepath.Join(dir, "mid")
	if err := os.WriteFile(p, []byte(mid), 0o644); err != nil {
		t.Fatal(err)
	}
	got, buf, err := readFile(p, nil)
	if err != nil || string(got) != mid || len(buf) <= initialBufSize {
		t.Errorf("readFile(mid) = %d bytes, buf %d, %v; want %d bytes", len(got), len(buf), err, len(mid))
	}

	// Larger than the cap: cut at the last whole line within maxFileSize.
	line := strings.Repeat("x", 99) + "\n"
	big := strings.Repeat(line, maxFileSize/100+500)
	p = filepath.Join(dir, "big")
	if err := os.WriteFile(p, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	got, buf, err = readFile(p, buf)
	if err != nil || len(got) != maxFileSize/100*100 || got[len(got)-1] != '\n' || cap(buf) > maxFileSize {
		t.Errorf("readFile(big) = %d bytes, cap %d, %v; want %d bytes ending in a newline",
			len(got), cap(buf), err, maxFileSize/100*100)
	}

	// A directory is an error naming it, not a panic.
	if _, _, err := readFile(dir, nil); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("readFile(dir) error = %v", err)
	}
}
