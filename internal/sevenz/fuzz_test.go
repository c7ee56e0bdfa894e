package sevenz

import (
	"errors"
	"io"
	"testing"
)

// FuzzSevenZip feeds arbitrary bytes to the reader. The seeds are the
// testdata archives, so mutations reach the encoded header, the LZMA and
// LZMA2 decoders and the substream bookkeeping, not just the signature.
// The limits of readAll keep a mutated size from turning into minutes of
// decoding: what is bounded here is the reader's own work and memory.
func FuzzSevenZip(f *testing.F) {
	for _, b := range seeds(f) {
		f.Add(b)
	}
	f.Add(archive(nil, nil))
	f.Add(buildCopy([]testFile{
		{name: "d", noData: true},
		{name: "d/a", data: "alpha"},
		{name: "x", noData: true, empty: true, anti: true},
		{name: "d/b", data: "beta", attrib: unixExt | 0o120777<<16},
	}, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		items, err := readAll(b, 4<<20)
		if err == nil {
			for _, it := range items {
				if it.IsDir != it.Mode.IsDir() {
					t.Fatalf("%q: IsDir %v but mode %v", it.Name, it.IsDir, it.Mode)
				}
				if int64(len(it.content)) != it.Size {
					t.Fatalf("%q: %d bytes read, Size %d", it.Name, len(it.content), it.Size)
				}
			}
			return
		}
		if err.Error() == "output limit reached" {
			return
		}
		// Anything else the archive causes must say so.
		if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("error wraps neither ErrFormat nor ErrUnsupported: %v", err)
		}
	})
}
