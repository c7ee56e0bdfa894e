package lzma

import (
	"bytes"
	"encoding/binary"
	"os/exec"
	"testing"

	"openflare/testing/xztest"
)

// fuzzLimit bounds the output of one fuzz input: valid streams can expand
// without limit, and the reader is streaming, so stopping is the caller's
// job, exactly as here.
const fuzzLimit = 256 << 10

func seeds(f *testing.F, args ...string) [][]byte {
	var out [][]byte
	if _, err := exec.LookPath("xz"); err != nil {
		return nil
	}
	for _, in := range [][]byte{nil, []byte("a"), []byte("abcabcabcabcabcabc hello hello hello"), xztest.Sample(5000, 1)} {
		out = append(out, runXZ(f, in, args...))
	}
	return out
}

func FuzzLZMA(f *testing.F) {
	for _, s := range seeds(f, "--format=lzma", "-c", "--lzma1=preset=1,dict=64KiB") {
		f.Add(s)
		// The same payload with the exact size instead of -1.
		size := len(s) // any; the fuzzer mutates it
		k := append([]byte{}, s...)
		binary.LittleEndian.PutUint64(k[5:13], uint64(size))
		f.Add(k)
	}
	f.Add([]byte{0x5D, 0, 0, 1, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 13 {
			return
		}
		size := int64(binary.LittleEndian.Uint64(data[5:13]))
		if size < -1 || size > 1<<40 {
			size = -1
		}
		r, err := NewReader(bytes.NewReader(data[13:]), data[:5], size)
		if err != nil {
			return
		}
		readAll(r, fuzzLimit)
	})
}

func FuzzLZMA2(f *testing.F) {
	for _, s := range seeds(f, "--format=raw", "--lzma2=preset=1,dict=64KiB", "-c") {
		f.Add(s)
	}
	f.Add([]byte{0x01, 0, 2, 'a', 'b', 'c', 0x02, 0, 0, 'd', 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader2(bytes.NewReader(data), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		readAll(r, fuzzLimit)
	})
}
