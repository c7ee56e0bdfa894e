package xz

import (
	"bytes"
	"io"
	"os/exec"
	"testing"

	"openflare/testing/xztest"
)

func FuzzXZ(f *testing.F) {
	if _, err := exec.LookPath("xz"); err == nil {
		for _, args := range [][]string{{"-0"}, {"--check=crc32", "--block-size=100"}, {"--check=sha256"}, {"--check=none", "-T2", "--block-size=300"}} {
			for _, in := range [][]byte{nil, []byte("abc"), xztest.Sample(1000, 1)} {
				f.Add(compress(f, in, append(args, "--lzma2=preset=0,dict=64KiB")...))
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		// Valid files may expand without limit; callers stop reading, and
		// so does the fuzzer.
		io.Copy(io.Discard, io.LimitReader(r, 4<<20))
	})
}
