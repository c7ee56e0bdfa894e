package linux

import (
	"os"
	"testing"
)

func BenchmarkSample(b *testing.B) {
	for _, bc := range []struct {
		name string
		fsys FS
	}{
		{"fixture-x86", fixtureFS("x86-server")},
		{"real", Default()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if _, err := os.Stat(bc.fsys.Proc + "/stat"); err != nil {
				b.Skipf("no %s: %v", bc.fsys.Proc, err)
			}
			dir := b.TempDir()
			r := NewReader(bc.fsys)
			if _, err := r.Sample(dir); err != nil { // warms the caches
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Sample(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSampleAllocs guards the per-beat allocation budget: one per opened
// path (unix.Open copies it to a NUL-terminated buffer) and one for statfs.
func TestSampleAllocs(t *testing.T) {
	r := NewReader(fixtureFS("x86-server"))
	dir := t.TempDir()
	if _, err := r.Sample(dir); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := r.Sample(dir); err != nil {
			t.Fatal(err)
		}
	})
	if allocs >= 20 {
		t.Errorf("Sample allocates %v times; budget is under 20", allocs)
	}
}
