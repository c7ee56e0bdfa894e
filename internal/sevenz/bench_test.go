package sevenz

import (
	"io"
	"os"
	"os/exec"
	"testing"
	"time"
)

// BenchmarkLZMA2 reads a ~20 MiB site packed with 7zz's defaults (LZMA2
// -mx5, solid) and reports the time `7zz t` (decoding without writing,
// single-threaded and with its default threads) takes for the same archive
// as ratios.
func BenchmarkLZMA2(b *testing.B) {
	need7zz(b)
	src := b.TempDir()
	makeTree(b, src, 20<<20)
	path := run7zz(b, src, "-mx5")
	st, _ := os.Stat(path)
	var total int64
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		r, err := NewReader(f, st.Size())
		if err != nil {
			b.Fatal(err)
		}
		total = 0
		for {
			_, rd, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, rd)
			if err != nil {
				b.Fatal(err)
			}
			total += n
		}
		f.Close()
	}
	ours := time.Since(start) / time.Duration(b.N)
	b.StopTimer()
	b.SetBytes(total)
	for _, mt := range []string{"-mmt=1", "-mmt=on"} {
		t0 := time.Now()
		const runs = 3
		for i := 0; i < runs; i++ {
			if out, err := exec.Command(sevenZip, "t", "-bd", mt, path).CombinedOutput(); err != nil {
				b.Fatalf("7zz t: %v\n%s", err, out)
			}
		}
		theirs := time.Since(t0) / runs
		b.ReportMetric(float64(ours)/float64(theirs), "x-7zz"+mt[4:])
	}
	b.ReportMetric(float64(st.Size())/(1<<20), "archive-MiB")
}
