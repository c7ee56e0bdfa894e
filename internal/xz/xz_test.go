package xz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"openflare/testing/hostexec"
	"openflare/testing/xztest"
)

// compress writes data to a temporary file and returns what xz makes of it.
func compress(t testing.TB, data []byte, args ...string) []byte {
	t.Helper()
	xz := xztest.Path(t)
	in := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, stderr bytes.Buffer
	err := hostexec.Run(t, func() *exec.Cmd {
		cmd := exec.Command(xz, append(append([]string{"-c", "-k"}, args...), in)...)
		cmd.Stdout, cmd.Stderr = &out, &stderr
		return cmd
	})
	if err != nil {
		t.Fatalf("xz %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.Bytes()
}

func decode(f []byte) ([]byte, error) {
	r, err := NewReader(bytes.NewReader(f))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func mustDecode(t *testing.T, f, want []byte) {
	t.Helper()
	got, err := decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("decoded %d bytes, differ from the %d-byte original", len(got), len(want))
	}
}

func TestPresets(t *testing.T) {
	data := xztest.Sample(1<<20, 1)
	for _, p := range []string{"-0", "-1", "-2", "-3", "-4", "-5", "-6", "-7", "-8", "-9", "-0e", "-6e", "-9e"} {
		t.Run(p, func(t *testing.T) {
			mustDecode(t, compress(t, data, p), data)
		})
	}
}

func TestBlocks(t *testing.T) {
	data := xztest.Sample(600000, 2)
	for _, args := range [][]string{
		{"-6", "-T1", "--block-size=16KiB"},
		{"-6", "-T2", "--block-size=16KiB"}, // threaded: sizes in block headers
		{"-1", "--block-list=1,100,5000,0"},
		{"-3", "-T2", "--block-size=200000"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			f := compress(t, data, args...)
			if n := countBlocks(t, f); n < 3 {
				t.Fatalf("xz made %d blocks; the test wants several", n)
			}
			mustDecode(t, f, data)
		})
	}
}

// countBlocks reads the number of blocks from the index.
func countBlocks(t *testing.T, f []byte) int {
	backward := (int(binary.LittleEndian.Uint32(f[len(f)-8:])) + 1) * 4
	idx := f[len(f)-12-backward:]
	n, _, err := vli(idx[1:])
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

func TestChecks(t *testing.T) {
	data := xztest.Sample(300000, 3)
	for _, c := range []string{"none", "crc32", "crc64", "sha256"} {
		t.Run(c, func(t *testing.T) {
			f := compress(t, data, "--check="+c, "--block-size=100000")
			mustDecode(t, f, data)
			// The check covers the data: break it and expect a mismatch.
			if c == "none" {
				return
			}
			if _, err := decode(breakCheck(t, f)); err == nil || !strings.Contains(err.Error(), "mismatch") {
				t.Fatalf("flipped check: err = %v", err)
			}
		})
	}
}

func TestUnsupportedCheck(t *testing.T) {
	f := compress(t, []byte("data"), "--check=crc32")
	f[7] = 0x02 // a 4-byte check this package does not know
	binary.LittleEndian.PutUint32(f[8:12], crc32.ChecksumIEEE(f[6:8]))
	if _, err := decode(f); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "0x02") {
		t.Fatalf("check type 2: err = %v", err)
	}
}

// breakCheck flips a bit in the check field of the first block.
func breakCheck(t *testing.T, f []byte) []byte {
	f = append([]byte{}, f...)
	size := map[byte]int{1: 4, 4: 8, 10: 32}[f[7]&0x0F]
	// Find the first block's end from the index's first record.
	backward := (int(binary.LittleEndian.Uint32(f[len(f)-8:])) + 1) * 4
	idx := f[len(f)-12-backward:]
	_, rest, _ := vli(idx[1:])
	unpadded, _, _ := vli(rest)
	// Block padding sits between the compressed data and the check.
	f[12+int(unpadded+3)&^3-size] ^= 0x10
	return f
}

func TestConcatenated(t *testing.T) {
	a := xztest.Sample(200000, 4)
	b := []byte(strings.Repeat("second stream ", 10000))
	fa := compress(t, a, "-6", "--check=crc32")
	fb := compress(t, b, "-2", "--check=sha256")
	fe := compress(t, nil)
	want := append(append([]byte{}, a...), b...)
	cat := append(append([]byte{}, fa...), fb...)
	mustDecode(t, cat, want)
	// Stream padding (multiples of 4 zero bytes) between and after streams,
	// and an empty stream in the middle.
	var padded []byte
	padded = append(padded, fa...)
	padded = append(padded, make([]byte, 8)...)
	padded = append(padded, fe...)
	padded = append(padded, fb...)
	padded = append(padded, make([]byte, 4)...)
	mustDecode(t, padded, want)
	// The xz tool agrees with that reading.
	xz := xztest.Path(t)
	out, err := hostexec.Output(t, func() *exec.Cmd {
		cmd := exec.Command(xz, "-dc")
		cmd.Stdin = bytes.NewReader(padded)
		return cmd
	})
	if err != nil || !bytes.Equal(out, want) {
		t.Fatalf("xz -d on the padded file: %v", err)
	}
	// Padding not a multiple of 4 is invalid.
	if _, err := decode(append(append([]byte{}, cat...), 0, 0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("2 bytes of padding: err = %v", err)
	}
	if _, err := decode(append(append([]byte{}, cat...), 0, 0, 0, 0, 1, 2, 3, 4)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("garbage after padding: err = %v", err)
	}
}

func TestEmpty(t *testing.T) {
	mustDecode(t, compress(t, nil), []byte{})
	mustDecode(t, compress(t, nil, "--check=none"), []byte{})
	if _, err := decode(nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("zero-byte input: err = %v", err)
	}
	if _, err := decode([]byte("not xz at all")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("non-xz input: err = %v", err)
	}
}

func TestLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("20 MiB round trip skipped in -short mode")
	}
	data := xztest.Sample(20<<20, 5)
	// A 1 MiB dictionary makes the window wrap about 20 times.
	f := compress(t, data, "-2", "-T1")
	r, err := NewReader(bytes.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	// Odd read sizes cross chunk and window boundaries at random places.
	var got bytes.Buffer
	buf := make([]byte, 100003)
	rnd := rand.New(rand.NewPCG(5, 5))
	for {
		n, err := r.Read(buf[:1+rnd.IntN(len(buf))])
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatal("20 MiB file decodes differently")
	}
}

func TestUnsupportedFilters(t *testing.T) {
	data := xztest.Sample(50000, 6)
	for _, c := range []struct {
		args []string
		id   string
	}{
		{[]string{"--x86", "--lzma2"}, "0x04"},
		{[]string{"--delta=dist=4", "--lzma2"}, "0x03"},
		{[]string{"--arm", "--lzma2"}, "0x07"},
	} {
		f := compress(t, data, c.args...)
		_, err := decode(f)
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.id) {
			t.Errorf("%v: err = %v, want ErrUnsupported naming filter %s", c.args, err, c.id)
		}
	}
}

// rewriteDict sets the dictionary byte of the first block's LZMA2 filter and
// fixes the header CRC, as a hostile file would.
func rewriteDict(t *testing.T, f []byte, prop byte) []byte {
	f = append([]byte{}, f...)
	h := f[12:]
	size := (int(h[0]) + 1) * 4
	if h[1] != 0 || h[2] != 0x21 || h[3] != 1 {
		t.Fatalf("unexpected block header % x", h[:size])
	}
	h[4] = prop
	binary.LittleEndian.PutUint32(h[size-4:], crc32.ChecksumIEEE(h[:size-4]))
	return f
}

func TestHugeDictionary(t *testing.T) {
	f := compress(t, []byte("small"), "-T1")
	mustDecode(t, rewriteDict(t, f, 20), []byte("small")) // 2 MiB: fine
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := decode(rewriteDict(t, f, 40)) // 4 GiB - 1
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "4294967295") {
		t.Fatalf("4 GiB dictionary: err = %v, want a refusal naming the size", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Fatalf("refusing a 4 GiB dictionary allocated %d bytes", d)
	}
	if _, err := decode(rewriteDict(t, f, 41)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("dictionary byte 41: err = %v", err)
	}
}

// TestBombStoppable reads the start of a file that expands enormously and
// checks that memory follows what was read, not what is declared.
func TestBombStoppable(t *testing.T) {
	// 128 MiB of zeros, threaded so that block headers declare sizes, with
	// a 64 MiB dictionary.
	var zeros bytes.Buffer
	zeros.Grow(128 << 20)
	zeros.Write(make([]byte, 128<<20))
	f := compress(t, zeros.Bytes(), "--lzma2=preset=0,dict=64MiB", "-T2", "--block-size=64MiB")
	zeros = bytes.Buffer{}
	t.Logf("128 MiB of zeros: %d bytes of xz", len(f))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, err := NewReader(bytes.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, io.LimitReader(r, 1<<20))
	if err != nil || n != 1<<20 {
		t.Fatalf("read %d, %v", n, err)
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 8<<20 {
		t.Fatalf("reading 1 MiB allocated %d bytes", d)
	}
}

func TestTruncated(t *testing.T) {
	data := xztest.Sample(5000, 7)
	first := compress(t, data, "--block-size=2000", "--check=crc64")
	f := append(first, compress(t, data[:100], "--check=crc32")...)
	for i := 0; i < len(f); i++ {
		if i == len(first) {
			continue // a complete first stream is a valid file
		}
		err := xztest.Within(t, fmt.Sprintf("cut at %d", i), func() error {
			_, err := decode(f[:i])
			return err
		})
		if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("cut at %d/%d: err = %v", i, len(f), err)
		}
	}
}

func TestBitFlips(t *testing.T) {
	data := xztest.Sample(20000, 8)
	for _, check := range []string{"crc32", "crc64", "sha256"} {
		f := compress(t, data, "--block-size=7000", "--check="+check)
		r := rand.New(rand.NewPCG(8, 8))
		for i := 0; i < 1500; i++ {
			bad := append([]byte{}, f...)
			pos := r.IntN(len(bad))
			bad[pos] ^= 1 << r.IntN(8)
			err := xztest.Within(t, fmt.Sprintf("flip at %d", pos), func() error {
				_, err := decode(bad)
				return err
			})
			if err == nil {
				t.Fatalf("%s: flipping a bit at %d/%d went unnoticed", check, pos, len(f))
			}
		}
	}
}

func TestCRC64(t *testing.T) {
	if got := crc64Update(0, []byte("123456789")); got != 0x995DC9BBDF1939FA {
		t.Fatalf("CRC64 of 123456789 = %#x", got)
	}
	tab := crc64.MakeTable(crc64.ECMA)
	data := xztest.Sample(10000, 9)
	for n := 0; n < 300; n++ {
		if a, b := crc64Update(0, data[:n]), crc64.Checksum(data[:n], tab); a != b {
			t.Fatalf("length %d: %#x, hash/crc64 says %#x", n, a, b)
		}
	}
	// Incremental updates agree with one pass.
	c := crc64Update(0, data[:3333])
	c = crc64Update(c, data[3333:])
	if c != crc64.Checksum(data, tab) {
		t.Fatal("incremental CRC64 differs")
	}
}

func TestVLI(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		want uint64
		ok   bool
	}{
		{[]byte{0}, 0, true},
		{[]byte{0x7F}, 127, true},
		{[]byte{0x80, 0x01}, 128, true},
		{[]byte{0x80, 0x00}, 0, false}, // redundant zero byte
		{[]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F}, 1<<63 - 1, true},
		{[]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}, 0, false},
		{[]byte{0x80}, 0, false},
	} {
		v, _, err := vli(c.in)
		if (err == nil) != c.ok || (c.ok && v != c.want) {
			t.Errorf("% x: %d, %v", c.in, v, err)
		}
	}
}
