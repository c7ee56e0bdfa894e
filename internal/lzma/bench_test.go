package lzma

import (
	"bytes"
	"io"
	"testing"

	"openflare/testing/xztest"
)

func BenchmarkLZMA2Decode(b *testing.B) {
	data := xztest.Sample(16<<20, 31)
	raw := runXZ(b, data, "--format=raw", "--lzma2=preset=6", "-c", "-T1")
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := NewReader2(bytes.NewReader(raw), 8<<20)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			b.Fatal(err)
		}
	}
}
