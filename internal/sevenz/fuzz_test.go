package sevenz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"testing"
)

// fixCRCs rewrites the signature header's two CRCs to match: a mutation
// would otherwise almost never get past them, and the fuzzer would spend its
// time on the first 32 bytes. TestByteFlips covers the CRCs themselves.
func fixCRCs(b []byte) {
	if len(b) < 32 || !bytes.Equal(b[:6], signature) {
		return
	}
	off := binary.LittleEndian.Uint64(b[12:])
	n := binary.LittleEndian.Uint64(b[20:])
	avail := uint64(len(b) - 32)
	if off <= avail && n <= avail-off {
		binary.LittleEndian.PutUint32(b[28:], crc32.ChecksumIEEE(b[32+off:32+off+n]))
	}
	binary.LittleEndian.PutUint32(b[8:], crc32.ChecksumIEEE(b[12:32]))
}

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
		fixCRCs(b)
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
