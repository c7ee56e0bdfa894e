package pages

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// benchPackage writes a package of n MiB (half text, half random, in 1 MiB
// files) to dir in the given format, streaming, and returns its path.
func benchPackage(b *testing.B, dir, format string, n int) string {
	b.Helper()
	path := filepath.Join(dir, "site."+format)
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var w io.WriteCloser
	var cmd *exec.Cmd
	switch format {
	case "tar.gz":
		w = gzip.NewWriter(f)
	case "tar.xz":
		if _, err := exec.LookPath("xz"); err != nil {
			b.Skip("xz is not installed (make deps)")
		}
		cmd = exec.Command("xz", "-6", "-T1", "-c")
		cmd.Stdout = f
		if w, err = cmd.StdinPipe(); err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
	}
	tw := tar.NewWriter(w)
	rng := rand.New(rand.NewPCG(1, 2))
	text := []byte(strings.Repeat("<p>The quick brown fox jumps over the lazy dog.</p>\n", 1<<20/52+1))[:1<<20]
	buf := make([]byte, 1<<20)
	for i := 0; i < n; i++ {
		body := text
		if i%2 == 1 {
			for j := range buf {
				buf[j] = byte(rng.Uint32())
			}
			body = buf
		}
		tw.WriteHeader(&tar.Header{Name: "site/f" + strconv.Itoa(i), Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write(body)
	}
	tw.Close()
	w.Close()
	if cmd != nil {
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	return path
}

// peakRSS resets the process's peak RSS (VmHWM) and returns a function
// reading the peak since, in MiB.
func peakRSS() func() float64 {
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	return func() float64 {
		b, _ := os.ReadFile("/proc/self/status")
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				return kb / 1024
			}
		}
		return 0
	}
}

// Extraction of a 100 MiB package: throughput, and the peak RSS of the
// process while it runs (everything streams: it does not grow with the
// package). For tar.xz the `xz -d` command's time on the same file is
// reported beside it.
func BenchmarkExtract100MiB(b *testing.B) {
	for _, format := range []string{"tar.gz", "tar.xz"} {
		b.Run(format, func(b *testing.B) {
			dir := b.TempDir()
			pkg := benchPackage(b, dir, format, 100)
			fi, _ := os.Stat(pkg)
			b.SetBytes(100 << 20)
			b.ResetTimer()
			var peak float64
			for i := 0; i < b.N; i++ {
				dest := filepath.Join(dir, fmt.Sprint("out", i))
				os.Mkdir(dest, 0o755)
				f, _ := os.Open(pkg)
				read := peakRSS()
				if _, err := extract(f, fi.Size(), dest, limits{files: 1000, total: 8 << 30, perFile: 8 << 30}); err != nil {
					b.Fatal(err)
				}
				peak = max(peak, read())
				f.Close()
				b.StopTimer()
				os.RemoveAll(dest)
				b.StartTimer()
			}
			b.ReportMetric(peak, "peak-RSS-MiB")
			if format == "tar.xz" {
				b.StopTimer()
				start := time.Now()
				cmd := exec.Command("sh", "-c", "xz -d -T1 -c "+pkg+" > /dev/null")
				if err := cmd.Run(); err == nil {
					b.ReportMetric(float64(time.Since(start).Milliseconds()), "xz-d-ms")
				}
			}
		})
	}
}

// Extraction of 100 one-byte files, each in a chain of directories of its
// own as deep as the depth limit allows or less: the cost per directory
// stays the same whatever the depth, so a package costs what its names
// are long, never their square.
func BenchmarkExtractDeep(b *testing.B) {
	const files = 100
	for _, depth := range []int{8, 16, maxDepth} {
		b.Run(fmt.Sprint("depth-", depth), func(b *testing.B) {
			var ms []member
			for i := range files {
				ms = append(ms, member{name: fmt.Sprintf("c%d/%sindex.html", i, strings.Repeat("d/", depth-2)), body: "x"})
			}
			dir := b.TempDir()
			pkg := filepath.Join(dir, "site.tar")
			if err := os.WriteFile(pkg, tarBytes(b, ms), 0o644); err != nil {
				b.Fatal(err)
			}
			fi, err := os.Stat(pkg)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				dest := filepath.Join(dir, fmt.Sprint("out", i))
				os.Mkdir(dest, 0o755)
				f, _ := os.Open(pkg)
				if _, err := extract(f, fi.Size(), dest, limits{files: files, total: files, perFile: 1}); err != nil {
					b.Fatal(err)
				}
				f.Close()
				b.StopTimer()
				os.RemoveAll(dest)
				b.StartTimer()
			}
			dirs := files * (depth - 1)
			b.ReportMetric(float64(dirs), "dirs/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*dirs), "ns/dir")
		})
	}
}
