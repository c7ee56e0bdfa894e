package linux

import (
	"os"
	"testing"
	"time"
)

// TestRealHost sanity-checks the readers against the machine running the
// tests. Only loose properties hold on an unknown host.
func TestRealHost(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skipf("no procfs: %v", err)
	}
	fsys := Default()
	r := NewReader(fsys)

	first, err := r.Sample(t.TempDir())
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	second, err := r.Sample(t.TempDir())
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	if first.Mem.Total == 0 {
		t.Error("MemTotal is 0")
	}
	if total, used := second.Memory(); total == 0 || used > total {
		t.Errorf("Memory() = %d, %d", total, used)
	}
	if p := CPUPercent(first.CPU, second.CPU); p < 0 || p > 100 {
		t.Errorf("CPUPercent over 50 ms = %v", p)
	}
	if second.Uptime < first.Uptime || second.Uptime == 0 {
		t.Errorf("uptime %d then %d", first.Uptime, second.Uptime)
	}
	if second.IO.ReadBytes < first.IO.ReadBytes {
		t.Errorf("disk reads went backwards: %d then %d", first.IO.ReadBytes, second.IO.ReadBytes)
	}
	if second.Disk.Total == 0 {
		t.Error("statfs total is 0")
	}

	ci, err := fsys.CPUInfo()
	if err != nil {
		t.Fatalf("CPUInfo: %v", err)
	}
	if ci.Processors < 1 {
		t.Errorf("CPUInfo = %+v: no processors", ci)
	}
	k, err := fsys.KernelRelease()
	if err != nil || k == "" {
		t.Errorf("KernelRelease = %q, %v", k, err)
	}
	t.Logf("cpu %q ×%d, kernel %s, mem %d/%d, io %+v, cgroup %v",
		ci.Model, ci.Processors, k, second.Mem.Used(), second.Mem.Total, second.IO, second.CgroupOK)
}
