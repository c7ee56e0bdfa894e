package linux

import (
	"math"
	"syscall"
	"testing"
)

func TestDiskUsage(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		blocks, bfree, bavail, frsze uint64
		want                         DiskUsage
	}{
		{
			// ext4 on a 32 GiB SD card: 5% reserved for root, so Avail <
			// Free and Used (as df shows it) excludes the reserve.
			name:   "ext4 with root reserve",
			blocks: 7733248, bfree: 5242880, bavail: 4856064, frsze: 4096,
			want: DiskUsage{Total: 31675383808, Free: 21474836480, Avail: 19890438144, Used: 10200547328},
		},
		{
			// OpenWrt overlay on jffs2 with 4 KiB fragments.
			name:   "router overlay",
			blocks: 1024, bfree: 900, bavail: 900, frsze: 4096,
			want: DiskUsage{Total: 4194304, Free: 3686400, Avail: 3686400, Used: 507904},
		},
		{
			name:   "full",
			blocks: 100, bfree: 0, bavail: 0, frsze: 512,
			want: DiskUsage{Total: 51200, Used: 51200},
		},
		{
			name:   "free above total is capped",
			blocks: 10, bfree: 20, bavail: 30, frsze: 1,
			want: DiskUsage{Total: 10, Free: 10, Avail: 10, Used: 0},
		},
		{
			name:   "products saturate",
			blocks: math.MaxUint64, bfree: math.MaxUint64 / 2, bavail: 1, frsze: 4096,
			want: DiskUsage{Total: math.MaxUint64, Free: math.MaxUint64, Avail: 4096, Used: 0},
		},
	} {
		if got := diskUsage(tc.blocks, tc.bfree, tc.bavail, tc.frsze); got != tc.want {
			t.Errorf("%s: diskUsage = %+v; want %+v", tc.name, got, tc.want)
		}
	}
}

func TestStatfsRealFilesystem(t *testing.T) {
	dir := t.TempDir()
	got, err := Statfs(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Independent computation through the standard library's syscall.
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	frsize := uint64(st.Frsize)
	if wantTotal := st.Blocks * frsize; got.Total != wantTotal {
		t.Errorf("Total = %d; want Blocks %d × Frsize %d = %d", got.Total, st.Blocks, frsize, wantTotal)
	}
	// Free space moves while other processes write; allow 256 MiB of drift.
	const drift = 256 << 20
	near := func(a, b uint64) bool { return max(a, b)-min(a, b) <= drift }
	if wantFree := st.Bfree * frsize; !near(got.Free, wantFree) {
		t.Errorf("Free = %d; want about %d", got.Free, wantFree)
	}
	if wantAvail := st.Bavail * frsize; !near(got.Avail, wantAvail) {
		t.Errorf("Avail = %d; want about %d", got.Avail, wantAvail)
	}
	if got.Total == 0 || got.Used != got.Total-got.Free || got.Avail > got.Total {
		t.Errorf("inconsistent usage %+v", got)
	}

	if _, err := Statfs(dir + "/missing"); err == nil {
		t.Error("Statfs of a missing path: want an error")
	}
}
