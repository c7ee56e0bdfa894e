package lzma

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"openflare/testing/hostexec"
	"openflare/testing/xztest"
)

// runXZ pipes in through the xz tool, skipping the test when it is missing.
func runXZ(t testing.TB, in []byte, args ...string) []byte {
	t.Helper()
	xz := xztest.Path(t)
	var out, stderr bytes.Buffer
	err := hostexec.Run(t, func() *exec.Cmd {
		cmd := exec.Command(xz, args...)
		cmd.Stdin = bytes.NewReader(in)
		cmd.Stdout, cmd.Stderr = &out, &stderr
		return cmd
	})
	if err != nil {
		t.Fatalf("xz %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.Bytes()
}

// alone splits a .lzma file into properties, declared size and payload.
func alone(t testing.TB, f []byte) ([]byte, int64, []byte) {
	t.Helper()
	if len(f) < 13 {
		t.Fatalf(".lzma file of %d bytes", len(f))
	}
	return f[:5], int64(binary.LittleEndian.Uint64(f[5:13])), f[13:]
}

func readAll(r io.Reader, limit int64) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, limit))
}

func inputs() map[string][]byte {
	return map[string][]byte{
		"empty":  {},
		"one":    {'x'},
		"zeros":  make([]byte, 300000),
		"text":   []byte(strings.Repeat("hello, static world. ", 5000)),
		"mixed":  xztest.Sample(1<<20, 1),
		"random": xztest.Sample(1, 2)[:0:0],
	}
}

func TestLZMA1Alone(t *testing.T) {
	in := inputs()
	in["random"] = func() []byte {
		b := make([]byte, 200000)
		r := rand.New(rand.NewPCG(3, 4))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}()
	for name, data := range in {
		for _, preset := range []string{"-0", "-6", "-9e", "--lzma1=preset=6,lc=4,lp=0,pb=0", "--lzma1=preset=1,lc=0,lp=4,pb=4", "--lzma1=preset=6,lc=1,lp=3,pb=1"} {
			t.Run(name+preset, func(t *testing.T) {
				f := runXZ(t, data, "--format=lzma", preset, "-c")
				p, declared, payload := alone(t, f)
				if declared != -1 {
					t.Logf("xz declared size %d", declared)
				}
				for _, size := range []int64{-1, int64(len(data))} {
					r, err := NewReader(bytes.NewReader(payload), p, size)
					if err != nil {
						t.Fatal(err)
					}
					got, err := io.ReadAll(r)
					if err != nil {
						t.Fatalf("size %d: %v", size, err)
					}
					if !bytes.Equal(got, data) {
						t.Fatalf("size %d: output differs (%d bytes, want %d)", size, len(got), len(data))
					}
				}
			})
		}
	}
}

// firstChunk extracts the first LZMA2 chunk of a raw LZMA2 stream: it is an
// LZMA1 stream with a known size and no end marker.
func firstChunk(t *testing.T, raw []byte) (props byte, size int, payload []byte) {
	t.Helper()
	if len(raw) < 6 || raw[0] < 0xE0 {
		t.Fatalf("raw LZMA2 stream starts with %x", raw[:min(len(raw), 6)])
	}
	size = (int(raw[0]&0x1F)<<16 | int(raw[1])<<8 | int(raw[2])) + 1
	packed := (int(raw[3])<<8 | int(raw[4])) + 1
	return raw[5], size, raw[6 : 6+packed]
}

func TestLZMA1KnownSizeNoEndMarker(t *testing.T) {
	data := xztest.Sample(500000, 5)
	raw := runXZ(t, data, "--format=raw", "--lzma2=preset=6,dict=1MiB", "-c")
	pb, size, payload := firstChunk(t, raw)
	props := []byte{pb, 0, 0, 0x10, 0}
	r, err := NewReader(bytes.NewReader(payload), props, int64(size))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[:size]) {
		t.Fatalf("chunk decodes to %d bytes, differs from the input", len(got))
	}
	// Without a size and without an end marker the data is incomplete.
	r, _ = NewReader(bytes.NewReader(payload), props, -1)
	if _, err := io.ReadAll(r); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("size -1 without end marker: err = %v, want ErrCorrupt", err)
	}
	// A size beyond the data is truncation.
	r, _ = NewReader(bytes.NewReader(payload), props, int64(size)+1)
	if _, err := io.ReadAll(r); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("size+1: err = %v, want ErrCorrupt", err)
	}
}

func TestLZMA2Raw(t *testing.T) {
	for name, data := range inputs() {
		for _, opt := range []string{"preset=0", "preset=6", "preset=9e", "preset=6,lc=0,lp=4,pb=4", "preset=6,lc=3,lp=1,pb=1"} {
			t.Run(name+"/"+opt, func(t *testing.T) {
				raw := runXZ(t, data, "--format=raw", "--lzma2="+opt, "-c")
				r, err := NewReader2(bytes.NewReader(raw), 64<<20)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(r)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, data) {
					t.Fatalf("output differs (%d bytes, want %d)", len(got), len(data))
				}
			})
		}
	}
}

// TestLZMA2StopsAtEnd checks that the reader consumes exactly the chunk
// stream, leaving what follows for the container.
func TestLZMA2StopsAtEnd(t *testing.T) {
	data := xztest.Sample(200000, 9)
	raw := runXZ(t, data, "--format=raw", "--lzma2=preset=1", "-c")
	br := bytes.NewReader(append(append([]byte{}, raw...), "TRAILER"...))
	r, err := NewReader2(br, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(br)
	if string(rest) != "TRAILER" {
		t.Fatalf("left %q after the stream", rest)
	}
}

// TestLZMA2Uncompressed covers stored chunks, which xz emits for data that
// does not compress, interleaved with LZMA chunks.
func TestLZMA2Uncompressed(t *testing.T) {
	var buf bytes.Buffer
	buf.Write(xztest.Sample(100000, 11))
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 300000; i++ {
		buf.WriteByte(byte(r.Uint32()))
	}
	buf.Write(xztest.Sample(100000, 12))
	data := buf.Bytes()
	raw := runXZ(t, data, "--format=raw", "--lzma2=preset=6", "-c")
	stored := false
	for i := 0; i < len(raw) && raw[i] != 0; {
		c := raw[i]
		if c <= 2 {
			stored = true
			i += 3 + (int(raw[i+1])<<8 | int(raw[i+2])) + 1
			continue
		}
		hl := 5
		if c >= 0xC0 {
			hl = 6
		}
		i += hl + (int(raw[i+3])<<8 | int(raw[i+4])) + 1
	}
	if !stored {
		t.Fatal("xz produced no uncompressed chunk; the test data no longer covers them")
	}
	z, err := NewReader2(bytes.NewReader(raw), 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("output differs")
	}
}

func TestSmallReads(t *testing.T) {
	data := xztest.Sample(300000, 13)
	f := runXZ(t, data, "--format=lzma", "-6", "-c")
	p, _, payload := alone(t, f)
	r, err := NewReader(bytes.NewReader(payload), p, -1)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 7)
	for {
		n, err := r.Read(buf[:1+len(got)%7])
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatal("output differs")
	}
}

// TestSmallDictionary makes the window wrap many times.
func TestSmallDictionary(t *testing.T) {
	data := xztest.Sample(2<<20, 17)
	f := runXZ(t, data, "--format=lzma", "--lzma1=preset=6,dict=4KiB", "-c")
	p, _, payload := alone(t, f)
	for _, size := range []int64{-1, int64(len(data))} {
		r, err := NewReader(bytes.NewReader(payload), p, size)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("size %d: err %v, equal %v", size, err, bytes.Equal(got, data))
		}
	}
	raw := runXZ(t, data, "--format=raw", "--lzma2=preset=6,dict=4KiB", "-c")
	r, err := NewReader2(bytes.NewReader(raw), 4096)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("LZMA2: err %v, equal %v", err, bytes.Equal(got, data))
	}
}

func TestHugeDictionaryRefused(t *testing.T) {
	props := []byte{0x5D, 0xFF, 0xFF, 0xFF, 0xFF}
	_, err := NewReader(bytes.NewReader(nil), props, -1)
	if !errors.Is(err, ErrDictionaryTooLarge) || !strings.Contains(err.Error(), "4294967295") {
		t.Fatalf("4 GiB dictionary: err = %v, want a refusal naming the size", err)
	}
	if _, err := NewReader(bytes.NewReader(nil), props, 1<<40); err == nil {
		t.Fatal("4 GiB dictionary with a 1 TiB size accepted")
	}
	if _, err := NewReader2(bytes.NewReader(nil), 0xFFFFFFFF); err == nil || !strings.Contains(err.Error(), "4294967295") {
		t.Fatalf("LZMA2 4 GiB dictionary: err = %v", err)
	}
	if _, err := NewReader2(bytes.NewReader(nil), MaxDict+1); err == nil {
		t.Fatal("MaxDict+1 accepted")
	}
	// A known small size makes a large dictionary harmless: the window is
	// capped by the size.
	data := []byte("tiny")
	f := runXZ(t, data, "--format=lzma", "-c")
	p, _, payload := alone(t, f)
	p = append([]byte{}, p...)
	binary.LittleEndian.PutUint32(p[1:], 0xFFFFFFFF)
	r, err := NewReader(bytes.NewReader(payload), p, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r); err != nil || string(got) != "tiny" {
		t.Fatalf("got %q, %v", got, err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 10; i++ {
		NewReader(bytes.NewReader(nil), props, -1)
		NewReader2(bytes.NewReader(nil), 0xFFFFFFFF)
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<10 {
		t.Fatalf("10 refusals allocated %d bytes", d)
	}
}

func TestBadProps(t *testing.T) {
	if _, err := NewReader(bytes.NewReader(nil), []byte{225, 0, 0, 1, 0}, -1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("props byte 225: %v", err)
	}
	if _, err := NewReader(bytes.NewReader(nil), []byte{0x5D, 0, 0}, -1); err == nil {
		t.Fatal("3-byte props accepted")
	}
	// lc+lp > 4 is invalid in LZMA2.
	raw := []byte{0xE0, 0, 0, 0, 4, 0x5D + 9*2, 0, 0, 0, 0, 0, 0}
	r, _ := NewReader2(bytes.NewReader(raw), 4096)
	if _, err := io.ReadAll(r); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("lc+lp=5: %v", err)
	}
	for _, raw := range [][]byte{{0x03}, {0x7F}, {0x02, 0, 0, 'a'}, {0x80, 0, 0, 0, 0}, {0xA0, 0, 0, 0, 0}} {
		r, _ := NewReader2(bytes.NewReader(raw), 4096)
		if _, err := io.ReadAll(r); !errors.Is(err, ErrCorrupt) {
			t.Errorf("control %x: %v", raw, err)
		}
	}
	// A dictionary reset requires new properties before the next LZMA chunk.
	raw = []byte{0x01, 0, 0, 'a', 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	r, _ = NewReader2(bytes.NewReader(raw), 4096)
	if _, err := io.ReadAll(r); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("LZMA chunk without props after reset: %v", err)
	}
	// Stored chunks alone are a valid stream.
	raw = []byte{0x01, 0, 2, 'a', 'b', 'c', 0x02, 0, 0, 'd', 0x00}
	r, _ = NewReader2(bytes.NewReader(raw), 4096)
	if got, err := io.ReadAll(r); err != nil || string(got) != "abcd" {
		t.Fatalf("stored chunks: %q, %v", got, err)
	}
}

func TestTruncated(t *testing.T) {
	data := xztest.Sample(6000, 21)
	f := runXZ(t, data, "--format=lzma", "-6", "-c")
	p, _, payload := alone(t, f)
	raw := runXZ(t, data, "--format=raw", "--lzma2=preset=6", "-c")
	for i := 0; i < len(payload); i++ {
		for _, size := range []int64{-1, int64(len(data))} {
			err := xztest.Within(t, fmt.Sprintf("lzma cut at %d", i), func() error {
				r, err := NewReader(bytes.NewReader(payload[:i]), p, size)
				if err != nil {
					return err
				}
				_, err = readAll(r, 1<<20)
				return err
			})
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("LZMA1 cut at %d/%d (size %d): err = %v", i, len(payload), size, err)
			}
		}
	}
	for i := 0; i < len(raw); i++ {
		err := xztest.Within(t, fmt.Sprintf("lzma2 cut at %d", i), func() error {
			r, err := NewReader2(bytes.NewReader(raw[:i]), 1<<20)
			if err != nil {
				return err
			}
			_, err = readAll(r, 1<<20)
			return err
		})
		if !errors.Is(err, ErrCorrupt) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("LZMA2 cut at %d/%d: err = %v", i, len(raw), err)
		}
	}
}

func TestBitFlips(t *testing.T) {
	data := xztest.Sample(50000, 23)
	f := runXZ(t, data, "--format=lzma", "-6", "-c")
	p, _, payload := alone(t, f)
	raw := runXZ(t, data, "--format=raw", "--lzma2=preset=6", "-c")
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 1000; i++ {
		bad := append([]byte{}, payload...)
		pos := r.IntN(len(bad))
		bad[pos] ^= 1 << r.IntN(8)
		size := int64(-1)
		if i%2 == 0 {
			size = int64(len(data))
		}
		err := xztest.Within(t, fmt.Sprintf("lzma flip at %d", pos), func() error {
			z, err := NewReader(bytes.NewReader(bad), p, size)
			if err != nil {
				return err
			}
			got, err := readAll(z, 1<<20)
			if err == nil && bytes.Equal(got, data) {
				return nil
			}
			if err == nil {
				return errors.New("wrong output without error")
			}
			return nil
		})
		// Raw LZMA has no checksum: a flip may go unnoticed or decode to
		// other bytes. Only panics and hangs are failures here.
		_ = err

		bad = append(bad[:0], raw...)
		pos = r.IntN(len(bad))
		bad[pos] ^= 1 << r.IntN(8)
		xztest.Within(t, fmt.Sprintf("lzma2 flip at %d", pos), func() error {
			z, err := NewReader2(bytes.NewReader(bad), 1<<20)
			if err != nil {
				return err
			}
			_, err = readAll(z, 1<<20)
			return err
		})
	}
}

type stuckReader struct{}

func (stuckReader) Read([]byte) (int, error) { return 0, nil }

func TestNoProgressReader(t *testing.T) {
	r, err := NewReader(stuckReader{}, []byte{0x5D, 0, 0, 1, 0}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("err = %v, want io.ErrNoProgress", err)
	}
}
