package xz

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"openflare/testing/xztest"
)

// BenchmarkXZDecode decodes a 16 MiB mixed file made with xz -6 and reports,
// besides MB/s, the ratio of its time per op to the xz tool's own
// decompression time of the same file (best of 3 runs of xz -d).
func BenchmarkXZDecode(b *testing.B) {
	data := xztest.Sample(16<<20, 31)
	f := compress(b, data, "-6", "-T1")
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := NewReader(bytes.NewReader(f))
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, r)
		if err != nil || n != int64(len(data)) {
			b.Fatal(n, err)
		}
	}
	b.StopTimer()
	ours := b.Elapsed() / time.Duration(b.N)
	if tool := xzTime(b, f); tool > 0 {
		b.ReportMetric(float64(ours)/float64(tool), "x-xz-time")
	}
}

func xzTime(b *testing.B, f []byte) time.Duration {
	p := filepath.Join(b.TempDir(), "bench.xz")
	if err := os.WriteFile(p, f, 0o600); err != nil {
		b.Fatal(err)
	}
	best := time.Duration(0)
	for i := 0; i < 3; i++ {
		cmd := exec.Command(xztest.Path(b), "-dc", "-T1", p)
		cmd.Stdout = io.Discard
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		if d := time.Since(start); best == 0 || d < best {
			best = d
		}
	}
	return best
}
