package observability

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/internal/linux"
)

// copyFixture copies a fixture host tree so a test can change it.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	if err := os.CopyFS(dst, os.DirFS(fixtureRoot(name))); err != nil {
		t.Fatal(err)
	}
	return dst
}

func rewrite(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s lacks %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestHostMetricsFixtures(t *testing.T) {
	// Figures worked out in internal/linux/fixtures_test.go.
	cases := []struct {
		fixture                         string
		memTotal, memUsed               int64
		diskRead, diskWrite             int64
		cpuModel, osName, osVer, kernel string
		uptime                          int64
	}{
		{"x86-server", 536870912, 141557760, 60781969408, 264835244032,
			"AMD EPYC 7543P 32-Core Processor", "Debian GNU/Linux 12 (bookworm)", "12", "6.1.0-18-amd64", 944206},
		{"rpi-armv7", 944136 * 1024, 351133696, 4159209472, 6320987136,
			"ARMv7 Processor rev 4 (v7l)", "Raspbian GNU/Linux 12 (bookworm)", "12", "6.1.21-v7+", 35364},
		{"openwrt-mips", 61796352, 25935872, 2199028514304, 32768,
			"MIPS 24Kc V7.4", "OpenWrt 23.05.3", "23.05.3", "5.15.150", 297158},
	}
	for _, tc := range cases {
		t.Run(tc.fixture, func(t *testing.T) {
			clk := newClock()
			o := testOptions(t, clk)
			o.FS = linux.NewFS(fixtureRoot(tc.fixture))
			c := newCollector(t, o)
			r := c.Collect(context.Background())
			disk, err := linux.Statfs(o.DataDir)
			if err != nil {
				t.Fatal(err)
			}
			want := protocol.HostMetrics{
				CapturedAtUnix:    clk.Now().Unix(),
				CPUUsagePercent:   0, // first sample
				MemoryUsedBytes:   tc.memUsed,
				MemoryTotalBytes:  tc.memTotal,
				StorageUsedBytes:  int64(disk.Used),
				StorageTotalBytes: int64(disk.Total),
				DiskReadBytes:     tc.diskRead,
				DiskWriteBytes:    tc.diskWrite,
			}
			// Another process may write to the temp filesystem between the
			// two statfs calls: only the total is exact.
			if u := r.HostMetrics.StorageUsedBytes; u <= 0 || u > want.StorageTotalBytes {
				t.Errorf("storage used %d of %d", u, want.StorageTotalBytes)
			}
			want.StorageUsedBytes = r.HostMetrics.StorageUsedBytes
			if *r.HostMetrics != want {
				t.Errorf("host metrics\n %+v\nwant %+v", *r.HostMetrics, want)
			}
			hostname, _ := os.Hostname()
			wantProfile := protocol.Profile{
				Hostname: hostname, OSName: tc.osName, OSVersion: tc.osVer, KernelVersion: tc.kernel,
				Architecture: runtime.GOARCH, CPUModel: tc.cpuModel, CPUCores: runtime.NumCPU(),
				TotalMemoryBytes: tc.memTotal, TotalDiskBytes: int64(disk.Total),
				UptimeSeconds: tc.uptime, ReportedAtUnix: clk.Now().Unix(),
			}
			if r.Profile == nil || *r.Profile != wantProfile {
				t.Errorf("profile\n %+v\nwant %+v", r.Profile, wantProfile)
			}
		})
	}
}

func TestHostCPUPercent(t *testing.T) {
	root := copyFixture(t, "x86-server")
	clk := newClock()
	o := testOptions(t, clk)
	o.FS = linux.NewFS(root)
	c := newCollector(t, o)
	if r := c.Collect(context.Background()); r.HostMetrics.CPUUsagePercent != 0 {
		t.Fatalf("first sample %v%%, want 0", r.HostMetrics.CPUUsagePercent)
	}
	// 100 ticks of user time and 300 of idle since the first sample.
	rewrite(t, filepath.Join(root, "proc", "stat"), "cpu  4705332 3120 1523490 371284512 ", "cpu  4705432 3120 1523490 371284812 ")
	if r := c.Collect(context.Background()); r.HostMetrics.CPUUsagePercent != 25 {
		t.Fatalf("second sample %v%%, want 25", r.HostMetrics.CPUUsagePercent)
	}
}

// TestProfileOnlyOnChange sends the profile until a beat carrying it is
// acknowledged, then only when it changes, across restarts.
func TestProfileOnlyOnChange(t *testing.T) {
	root := copyFixture(t, "x86-server")
	clk := newClock()
	o := testOptions(t, clk)
	o.FS = linux.NewFS(root)
	c := newCollector(t, o)

	r := c.Collect(context.Background())
	if r.Profile == nil {
		t.Fatal("no profile in the first beat")
	}
	c.Nack(r)
	clk.Advance(3 * time.Second)
	r = c.Collect(context.Background())
	if r.Profile == nil {
		t.Fatal("profile not sent again after a failed beat")
	}
	c.Ack(r)
	clk.Advance(3 * time.Second)
	if r = c.Collect(context.Background()); r.Profile != nil {
		t.Fatalf("profile sent again: %+v", r.Profile)
	}
	c.Ack(r)

	// Uptime moves on every beat without changing the fingerprint.
	rewrite(t, filepath.Join(root, "proc", "uptime"), "944206", "944999")
	c.Close()
	c = newCollector(t, o)
	if r = c.Collect(context.Background()); r.Profile != nil {
		t.Fatalf("profile sent after a restart: %+v", r.Profile)
	}
	c.Ack(r)

	// The cgroup limit changes the memory the profile reports.
	rewrite(t, filepath.Join(root, "sys", "fs", "cgroup", "system.slice", "openflare-agent.service", "memory.max"), "536870912", "1073741824")
	if r = c.Collect(context.Background()); r.Profile == nil || r.Profile.TotalMemoryBytes != 1073741824 {
		t.Fatalf("changed profile %+v", r.Profile)
	}
	c.Ack(r)
	if r = c.Collect(context.Background()); r.Profile != nil {
		t.Fatalf("profile sent again: %+v", r.Profile)
	}

	// Slow facts are read again after staticRefresh.
	rewrite(t, filepath.Join(root, "proc", "sys", "kernel", "osrelease"), "6.1.0-18-amd64", "6.1.0-21-amd64")
	if r = c.Collect(context.Background()); r.Profile != nil {
		t.Fatalf("kernel re-read before the refresh: %+v", r.Profile)
	}
	clk.Advance(staticRefresh)
	if r = c.Collect(context.Background()); r.Profile == nil || r.Profile.KernelVersion != "6.1.0-21-amd64" {
		t.Fatalf("profile after the kernel upgrade: %+v", r.Profile)
	}
}

func TestFingerprintIgnoresUptime(t *testing.T) {
	p := protocol.Profile{Hostname: "a", UptimeSeconds: 1, ReportedAtUnix: 2}
	q := p
	q.UptimeSeconds, q.ReportedAtUnix = 100, 200
	if fingerprint(p) != fingerprint(q) {
		t.Error("uptime and report time change the fingerprint")
	}
	q.Hostname = "b"
	if fingerprint(p) == fingerprint(q) {
		t.Error("hostname does not change the fingerprint")
	}
	if len(fingerprint(p)) != 64 {
		t.Errorf("fingerprint %q is not hex SHA-256", fingerprint(p))
	}
}
