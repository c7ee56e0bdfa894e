// Package xz decodes the .xz container format (version 1.0.x of the
// specification): one or more streams, optionally separated and followed by
// stream padding, each holding blocks and an index.
//
// Supported: the LZMA2 filter alone (the chain xz uses by default) and the
// None, CRC32, CRC64 and SHA-256 checks, all verified, as are block sizes
// declared in block headers, block padding and the index. Other filters
// (BCJ, delta, ...) and check types are refused with an error naming them.
// LZMA2 dictionaries above lzma.MaxDict are refused.
//
// The reader is streaming and allocates nothing in proportion to sizes
// declared in headers or the index: a caller guarding against decompression
// bombs only has to stop reading. Memory is one LZMA2 dictionary (growing
// with the data, at most lzma.MaxDict) plus small fixed buffers.
package xz

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"openflare/internal/lzma"
)

// ErrCorrupt is wrapped by errors caused by invalid data; it is the same
// value as lzma.ErrCorrupt, so one errors.Is covers both layers.
var ErrCorrupt = lzma.ErrCorrupt

// ErrUnsupported is wrapped by errors for valid .xz features this package
// does not implement (filters other than LZMA2, rare check types).
var ErrUnsupported = errors.New("unsupported")

var (
	headerMagic = []byte{0xFD, '7', 'z', 'X', 'Z', 0x00}
	footerMagic = []byte{'Y', 'Z'}
)

const (
	checkNone   = 0x00
	checkCRC32  = 0x01
	checkCRC64  = 0x04
	checkSHA256 = 0x0A

	filterLZMA2 = 0x21
)

func corrupt(format string, a ...any) error {
	return fmt.Errorf("xz: %w: %s", ErrCorrupt, fmt.Sprintf(format, a...))
}

// readErr turns a short read into corruption naming the part being read.
func readErr(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("xz: %w: %s truncated: %w", ErrCorrupt, what, io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("xz: reading %s: %w", what, err)
}

// NewReader reads the first stream header and returns a reader of the
// decompressed data of all streams in r.
func NewReader(r io.Reader) (io.Reader, error) {
	z := &reader{br: bufio.NewReaderSize(r, 64<<10)}
	var hdr [12]byte
	if _, err := io.ReadFull(z.br, hdr[:]); err != nil {
		return nil, readErr("stream header", err)
	}
	if err := z.streamHeader(hdr[:]); err != nil {
		return nil, err
	}
	return z, nil
}

type reader struct {
	br  *bufio.Reader
	err error

	flags     [2]byte // stream flags of the current stream
	checkSize int
	check     hash.Hash
	sum       [64]byte

	// The index is verified without storing it: the blocks read and the
	// records read are fed to the same digest and compared.
	blocks      uint64
	blockDigest hash.Hash

	// Current block; lz is nil between blocks.
	lz           io.Reader
	in           countReader
	headerSize   int64
	declaredComp int64 // -1: not in the header
	declaredUnc  int64 // -1: not in the header
	unc          int64
}

// countReader counts what the LZMA2 decoder reads and, when the block
// header declares a compressed size, stops it there.
type countReader struct {
	r     *bufio.Reader
	n     int64
	limit int64 // -1: none
}

func (c *countReader) Read(p []byte) (int, error) {
	if c.limit >= 0 {
		if c.n >= c.limit {
			return 0, io.EOF
		}
		if int64(len(p)) > c.limit-c.n {
			p = p[:c.limit-c.n]
		}
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (z *reader) Read(p []byte) (int, error) {
	for {
		if z.err != nil {
			return 0, z.err
		}
		if z.lz == nil {
			z.err = z.next()
			continue
		}
		n, err := z.lz.Read(p)
		if n > 0 {
			z.check.Write(p[:n])
			z.unc += int64(n)
			if z.declaredUnc >= 0 && z.unc > z.declaredUnc {
				z.err = corrupt("block larger than its declared uncompressed size %d", z.declaredUnc)
				return 0, z.err
			}
			return n, nil
		}
		switch {
		case err == io.EOF:
			z.err = z.endBlock()
		case err != nil:
			z.err = fmt.Errorf("xz: block %d: %w", z.blocks, err)
		}
	}
}

// streamHeader checks a stream header and prepares its check.
func (z *reader) streamHeader(h []byte) error {
	if !bytes.Equal(h[:6], headerMagic) {
		return fmt.Errorf("xz: %w: not an xz stream (bad magic bytes)", ErrCorrupt)
	}
	if crc32.ChecksumIEEE(h[6:8]) != binary.LittleEndian.Uint32(h[8:12]) {
		return corrupt("stream header CRC32 mismatch")
	}
	if h[6] != 0 || h[7]&0xF0 != 0 {
		return fmt.Errorf("xz: %w: stream flags %02x%02x use reserved bits", ErrUnsupported, h[6], h[7])
	}
	z.flags = [2]byte{h[6], h[7]}
	switch id := h[7] & 0x0F; id {
	case checkNone:
		z.check, z.checkSize = nopHash{}, 0
	case checkCRC32:
		z.check, z.checkSize = crc32.NewIEEE(), 4
	case checkCRC64:
		z.check, z.checkSize = &crc64Hash{}, 8
	case checkSHA256:
		z.check, z.checkSize = sha256.New(), 32
	default:
		return fmt.Errorf("xz: %w: check type 0x%02x (only None, CRC32, CRC64 and SHA-256 are verified)", ErrUnsupported, id)
	}
	z.blocks = 0
	z.blockDigest = sha256.New()
	return nil
}

// next reads what follows a stream header or a block: a block header, or
// the index, footer and then the next stream or the end.
func (z *reader) next() error {
	b, err := z.br.ReadByte()
	if err != nil {
		return readErr("block header", err)
	}
	if b == 0 {
		if err := z.index(); err != nil {
			return err
		}
		return z.nextStream()
	}
	return z.blockHeader(b)
}

func (z *reader) blockHeader(first byte) error {
	size := (int(first) + 1) * 4
	var buf [1024]byte
	h := buf[:size]
	h[0] = first
	if _, err := io.ReadFull(z.br, h[1:]); err != nil {
		return readErr("block header", err)
	}
	if crc32.ChecksumIEEE(h[:size-4]) != binary.LittleEndian.Uint32(h[size-4:]) {
		return corrupt("block %d header CRC32 mismatch", z.blocks)
	}
	flags := h[1]
	if flags&0x3C != 0 {
		return fmt.Errorf("xz: %w: block %d header flags 0x%02x use reserved bits", ErrUnsupported, z.blocks, flags)
	}
	f := h[2 : size-4]
	var err error
	z.declaredComp, z.declaredUnc = -1, -1
	if flags&0x40 != 0 {
		var v uint64
		if v, f, err = vli(f); err != nil || v == 0 {
			return corrupt("block %d header: invalid compressed size", z.blocks)
		}
		z.declaredComp = int64(v)
	}
	if flags&0x80 != 0 {
		var v uint64
		if v, f, err = vli(f); err != nil {
			return corrupt("block %d header: invalid uncompressed size", z.blocks)
		}
		z.declaredUnc = int64(v)
	}
	nfilters := int(flags&3) + 1
	var dictProp byte
	for i := 0; i < nfilters; i++ {
		var id, psize uint64
		if id, f, err = vli(f); err != nil {
			return corrupt("block %d header: invalid filter flags", z.blocks)
		}
		if psize, f, err = vli(f); err != nil || psize > uint64(len(f)) {
			return corrupt("block %d header: invalid filter properties size", z.blocks)
		}
		props := f[:psize]
		f = f[psize:]
		if id != filterLZMA2 {
			return fmt.Errorf("xz: %w: block %d uses filter 0x%02x (%s); only LZMA2 alone is supported",
				ErrUnsupported, z.blocks, id, filterName(id))
		}
		if i != nfilters-1 {
			return corrupt("block %d header: LZMA2 is not the last filter", z.blocks)
		}
		if len(props) != 1 {
			return corrupt("block %d header: LZMA2 properties of %d bytes", z.blocks, len(props))
		}
		dictProp = props[0]
	}
	for _, b := range f {
		if b != 0 {
			return corrupt("block %d header: non-zero padding", z.blocks)
		}
	}
	if dictProp&0xC0 != 0 || dictProp > 40 {
		return corrupt("block %d: invalid LZMA2 dictionary size byte 0x%02x", z.blocks, dictProp)
	}
	dict := uint32(0xFFFFFFFF)
	if dictProp < 40 {
		dict = (2 | uint32(dictProp)&1) << (dictProp/2 + 11)
	}
	z.in = countReader{r: z.br, limit: z.declaredComp}
	lz, err := lzma.NewReader2(&z.in, dict)
	if err != nil {
		return fmt.Errorf("xz: block %d: %w", z.blocks, err)
	}
	z.lz = lz
	z.headerSize = int64(size)
	z.unc = 0
	z.check.Reset()
	return nil
}

func filterName(id uint64) string {
	switch id {
	case 0x03:
		return "delta"
	case 0x04:
		return "x86 BCJ"
	case 0x05:
		return "PowerPC BCJ"
	case 0x06:
		return "IA-64 BCJ"
	case 0x07:
		return "ARM BCJ"
	case 0x08:
		return "ARM-Thumb BCJ"
	case 0x09:
		return "SPARC BCJ"
	case 0x0A:
		return "ARM64 BCJ"
	case 0x0B:
		return "RISC-V BCJ"
	}
	return "unknown filter"
}

// endBlock checks the sizes, padding and check of the block just decoded.
func (z *reader) endBlock() error {
	comp := z.in.n
	if z.declaredComp >= 0 && comp != z.declaredComp {
		return corrupt("block %d: compressed size %d, header says %d", z.blocks, comp, z.declaredComp)
	}
	if z.declaredUnc >= 0 && z.unc != z.declaredUnc {
		return corrupt("block %d: uncompressed size %d, header says %d", z.blocks, z.unc, z.declaredUnc)
	}
	var buf [3 + 64]byte
	pad := int(-comp & 3)
	tail := buf[:pad+z.checkSize]
	if _, err := io.ReadFull(z.br, tail); err != nil {
		return readErr("block padding and check", err)
	}
	for _, b := range tail[:pad] {
		if b != 0 {
			return corrupt("block %d: non-zero block padding", z.blocks)
		}
	}
	if !z.checkMatches(tail[pad:]) {
		return corrupt("block %d: %s mismatch", z.blocks, checkName(z.flags[1]&0x0F))
	}
	unpadded := z.headerSize + comp + int64(z.checkSize)
	z.record(z.blockDigest, uint64(unpadded), uint64(z.unc))
	z.blocks++
	z.lz = nil
	return nil
}

func checkName(id byte) string {
	switch id {
	case checkCRC32:
		return "CRC32"
	case checkCRC64:
		return "CRC64"
	case checkSHA256:
		return "SHA-256"
	}
	return "check"
}

func (z *reader) checkMatches(stored []byte) bool {
	switch h := z.check.(type) {
	case nopHash:
		return true
	case hash.Hash32:
		return binary.LittleEndian.Uint32(stored) == h.Sum32()
	case *crc64Hash:
		return binary.LittleEndian.Uint64(stored) == h.crc
	default:
		return bytes.Equal(stored, h.Sum(z.sum[:0]))
	}
}

func (z *reader) record(d hash.Hash, unpadded, unc uint64) {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], unpadded)
	binary.LittleEndian.PutUint64(b[8:], unc)
	d.Write(b[:])
}

// crcReader feeds what it reads to a CRC32 and counts it, for the index.
type crcReader struct {
	r   *bufio.Reader
	crc uint32
	n   int64
	b   [1]byte
}

func (c *crcReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.b[0] = b
		c.crc = crc32.Update(c.crc, crc32.IEEETable, c.b[:])
		c.n++
	}
	return b, err
}

// index reads the index (its indicator byte already consumed) and the
// stream footer, and compares them with the blocks read.
func (z *reader) index() error {
	cr := &crcReader{r: z.br, crc: crc32.Update(0, crc32.IEEETable, []byte{0}), n: 1}
	count, err := readVLI(cr)
	if err != nil {
		return fmt.Errorf("xz: index block count: %w", err)
	}
	if count != z.blocks {
		return corrupt("index lists %d blocks, the stream has %d", count, z.blocks)
	}
	d := sha256.New()
	for i := uint64(0); i < count; i++ {
		unpadded, err := readVLI(cr)
		if err != nil {
			return fmt.Errorf("xz: index record %d: %w", i, err)
		}
		unc, err := readVLI(cr)
		if err != nil {
			return fmt.Errorf("xz: index record %d: %w", i, err)
		}
		z.record(d, unpadded, unc)
	}
	if !bytes.Equal(d.Sum(nil), z.blockDigest.Sum(nil)) {
		return corrupt("index does not match the blocks")
	}
	for cr.n&3 != 0 {
		b, err := cr.ReadByte()
		if err != nil {
			return readErr("index padding", err)
		}
		if b != 0 {
			return corrupt("non-zero index padding")
		}
	}
	var tail [4 + 12]byte
	if _, err := io.ReadFull(z.br, tail[:]); err != nil {
		return readErr("index CRC32 and stream footer", err)
	}
	if binary.LittleEndian.Uint32(tail[:4]) != cr.crc {
		return corrupt("index CRC32 mismatch")
	}
	indexSize := cr.n + 4
	foot := tail[4:]
	if crc32.ChecksumIEEE(foot[4:10]) != binary.LittleEndian.Uint32(foot[:4]) {
		return corrupt("stream footer CRC32 mismatch")
	}
	if !bytes.Equal(foot[10:], footerMagic) {
		return corrupt("bad stream footer magic")
	}
	if foot[8] != z.flags[0] || foot[9] != z.flags[1] {
		return corrupt("stream footer flags differ from the header")
	}
	if backward := (int64(binary.LittleEndian.Uint32(foot[4:8])) + 1) * 4; backward != indexSize {
		return corrupt("stream footer gives index size %d, index is %d bytes", backward, indexSize)
	}
	return nil
}

// nextStream skips stream padding and reads the next stream header, or
// reports the end of the input.
func (z *reader) nextStream() error {
	var b [12]byte
	for {
		n, err := io.ReadFull(z.br, b[:4])
		if n == 0 && errors.Is(err, io.EOF) {
			return io.EOF
		}
		if err != nil {
			return readErr("stream padding", err)
		}
		if b[0]|b[1]|b[2]|b[3] != 0 {
			break
		}
	}
	if _, err := io.ReadFull(z.br, b[4:]); err != nil {
		return readErr("stream header", err)
	}
	return z.streamHeader(b[:])
}

// vli decodes a variable-length integer from the start of b.
func vli(b []byte) (uint64, []byte, error) {
	br := bytes.NewReader(b)
	v, err := readVLI(br)
	if err != nil {
		return 0, nil, err
	}
	return v, b[len(b)-br.Len():], nil
}

// readVLI reads the format's variable-length integer: 7 bits per byte, low
// first, at most 9 bytes, no redundant trailing zero byte.
func readVLI(r io.ByteReader) (uint64, error) {
	var v uint64
	for i := 0; i < 9; i++ {
		b, err := r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, fmt.Errorf("%w: integer truncated: %w", ErrCorrupt, io.ErrUnexpectedEOF)
			}
			return 0, err
		}
		if i > 0 && b == 0 {
			return 0, fmt.Errorf("%w: integer encoded with a redundant zero byte", ErrCorrupt)
		}
		v |= uint64(b&0x7F) << (7 * i)
		if b&0x80 == 0 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: integer longer than 9 bytes", ErrCorrupt)
}

type nopHash struct{}

func (nopHash) Write(p []byte) (int, error) { return len(p), nil }
func (nopHash) Sum(b []byte) []byte         { return b }
func (nopHash) Reset()                      {}
func (nopHash) Size() int                   { return 0 }
func (nopHash) BlockSize() int              { return 1 }

type crc64Hash struct{ crc uint64 }

func (h *crc64Hash) Write(p []byte) (int, error) { h.crc = crc64Update(h.crc, p); return len(p), nil }
func (h *crc64Hash) Sum(b []byte) []byte         { return binary.LittleEndian.AppendUint64(b, h.crc) }
func (h *crc64Hash) Reset()                      { h.crc = 0 }
func (h *crc64Hash) Size() int                   { return 8 }
func (h *crc64Hash) BlockSize() int              { return 8 }
