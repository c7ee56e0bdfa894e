package sevenz

import (
	"encoding/binary"
	"io"

	"openflare/internal/lzma"
)

const maxDict = lzma.MaxDict

// newLZMA starts an LZMA1 decoder with the dictionary in props replaced by
// dict, which lzmaDict has already bounded.
func newLZMA(r io.Reader, props []byte, dict uint32, size uint64) (io.Reader, error) {
	var p [5]byte
	p[0] = props[0]
	binary.LittleEndian.PutUint32(p[1:], dict)
	return lzma.NewReader(r, p[:], int64(size))
}

func newLZMA2(r io.Reader, dict uint32) (io.Reader, error) {
	return lzma.NewReader2(r, dict)
}
