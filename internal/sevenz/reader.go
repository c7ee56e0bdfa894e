package sevenz

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
)

// Caps applied to every archive; NewReaderLimits may lower the first two.
// They are far above what a static site needs and far below what would
// exhaust a router's memory.
const (
	// MaxEntries caps the files and directories in an archive, and with
	// them folders, pack streams and substreams.
	MaxEntries = 100_000
	// MaxHeaderSize caps the header as stored and, for an encoded header,
	// as decoded. Names are most of it: 100 000 paths of 80 characters
	// take 16 MB in UTF-16.
	MaxHeaderSize = 16 << 20
	// MaxNameLen caps one entry's name in UTF-16 code units.
	MaxNameLen = 4096
)

// Limits lower the caps above for one archive, for a caller that knows
// more about it than they can: a package whose file count is declared
// beforehand, for one. Values above the caps count as the caps.
type Limits struct {
	// Entries caps the files and directories, and with them folders, pack
	// streams and substreams; it is checked before anything is allocated
	// for them.
	Entries int
	// HeaderSize caps the header as stored and, for an encoded header, each
	// layer as decoded; both are checked before they are read.
	HeaderSize int64
}

// ErrFormat is wrapped by every error caused by the contents of the archive:
// corruption, truncation, a CRC mismatch, or a limit above being exceeded.
var ErrFormat = errors.New("invalid 7z archive")

// ErrUnsupported is wrapped by errors for valid archives that use what this
// reader does not implement, such as a method other than Copy, LZMA and
// LZMA2, a chain of coders (BCJ, BCJ2, Delta) or encryption.
var ErrUnsupported = errors.New("unsupported 7z feature")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}

// Entry describes one item of the archive.
type Entry struct {
	// Name is the path as stored, '/'-separated. It is not cleaned: it may
	// be absolute, contain "..", or be empty, and the caller must check it.
	Name string
	// Size is the length of the content; 0 for directories.
	Size int64
	// IsDir reports a directory. It follows the archive's structure (an
	// item without data that is not marked as an empty file), which is how
	// 7-Zip decides it too.
	IsDir bool
	// Mode comes from the attributes. With 7-Zip's Unix extension (attribute
	// bit 0x8000, st_mode in the high 16 bits) it carries the permission
	// bits and the file type: fs.ModeSymlink for a link stored with -snl
	// (whose content is then the link target), fs.ModeDevice, ModeNamedPipe
	// and so on. Otherwise it is 0755 for directories and 0644 (0444 when
	// read-only) for files, plus fs.ModeIrregular for a Windows reparse
	// point, whose content is not file data.
	Mode fs.FileMode
	// Anti marks an anti-item: an instruction to delete Name when the
	// archive is applied as an update, with no content.
	Anti bool
}

// Reader reads entries from a .7z archive in archive order.
type Reader struct {
	ra      io.ReaderAt
	si      *streamsInfo
	packOff []int64 // absolute offset of each pack stream
	files   []fileInfo

	next    int // index in files of the entry Next returns next
	sub     int // index of the next substream
	folder  int // index of the folder being read, or of the last one
	subLeft int // substreams of that folder not yet handed out
	fr      *folderReader
	cur     *entryReader
	br      *bufio.Reader
	err     error // sticky: the folder stream is unusable after an error
}

const signatureHeaderSize = 32

var signature = []byte{'7', 'z', 0xBC, 0xAF, 0x27, 0x1C}

// NewReader reads and checks the archive's headers. It refuses archives
// whose folders it could not decode (see ErrUnsupported) before returning,
// so that no content is extracted from an archive that would fail halfway.
func NewReader(ra io.ReaderAt, size int64) (*Reader, error) {
	return NewReaderLimits(ra, size, Limits{MaxEntries, MaxHeaderSize})
}

// NewReaderLimits is NewReader with lim in place of MaxEntries and
// MaxHeaderSize.
func NewReaderLimits(ra io.ReaderAt, size int64, lim Limits) (*Reader, error) {
	lim.Entries = max(0, min(lim.Entries, MaxEntries))
	lim.HeaderSize = max(0, min(lim.HeaderSize, MaxHeaderSize))
	r, err := newReader(ra, size, lim)
	if err != nil {
		return nil, fmt.Errorf("sevenz: %w", err)
	}
	return r, nil
}

func newReader(ra io.ReaderAt, size int64, lim Limits) (*Reader, error) {
	if size < signatureHeaderSize {
		return nil, corrupt("%d bytes is too short for a 7z archive", size)
	}
	var sh [signatureHeaderSize]byte
	if err := readFullAt(ra, sh[:], 0); err != nil {
		return nil, fmt.Errorf("reading signature header: %w", err)
	}
	if !bytes.Equal(sh[:6], signature) {
		return nil, corrupt("no 7z signature")
	}
	if sh[6] != 0 {
		return nil, unsupported("format version %d.%d", sh[6], sh[7])
	}
	if got, want := crc32.ChecksumIEEE(sh[12:32]), binary.LittleEndian.Uint32(sh[8:12]); got != want {
		return nil, corrupt("start header CRC %08x, want %08x", got, want)
	}
	nextOff := binary.LittleEndian.Uint64(sh[12:20])
	nextSize := binary.LittleEndian.Uint64(sh[20:28])
	nextCRC := binary.LittleEndian.Uint32(sh[28:32])

	r := &Reader{ra: ra, si: &streamsInfo{}, folder: -1}
	if nextSize == 0 {
		// An archive with nothing in it has no header at all.
		return r, nil
	}
	avail := uint64(size - signatureHeaderSize)
	if nextSize > uint64(lim.HeaderSize) {
		return nil, corrupt("header of %d bytes exceeds the limit of %d", nextSize, lim.HeaderSize)
	}
	if nextOff > avail || nextSize > avail-nextOff {
		return nil, corrupt("header at %d+%d lies beyond the end of the %d-byte archive", nextOff, nextSize, size)
	}
	hdr := make([]byte, nextSize)
	if err := readFullAt(ra, hdr, int64(signatureHeaderSize+nextOff)); err != nil {
		return nil, fmt.Errorf("reading header: %w", err)
	}
	if got := crc32.ChecksumIEEE(hdr); got != nextCRC {
		return nil, corrupt("header CRC %08x, want %08x", got, nextCRC)
	}

	// 7-Zip writes one level of encoding; a few more are tolerated, but an
	// archive cannot make the reader loop.
	for round := 0; ; round++ {
		h := &buf{b: hdr, entries: lim.Entries}
		id, err := h.readByte("header type")
		if err != nil {
			return nil, err
		}
		if id == idHeader {
			if err := r.readHeader(h); err != nil {
				return nil, err
			}
			break
		}
		if id != idEncodedHeader {
			return nil, corrupt("header starts with property 0x%02x", id)
		}
		if round == 4 {
			return nil, corrupt("header encoded more than 4 times")
		}
		if hdr, err = r.decodeHeader(h, size, lim.HeaderSize); err != nil {
			return nil, fmt.Errorf("encoded header: %w", err)
		}
	}
	if err := r.check(size); err != nil {
		return nil, err
	}
	return r, nil
}

// readFullAt is ReadAt without the io.EOF that a ReaderAt may return along
// with a complete read at the end of its input.
func readFullAt(ra io.ReaderAt, p []byte, off int64) error {
	n, err := ra.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// decodeHeader reads the StreamsInfo of an encoded header and decodes the
// one stream it describes into memory. The stream's declared size is
// checked against limit before anything is decoded, and the decoder is
// never asked for more.
func (r *Reader) decodeHeader(h *buf, size, limit int64) ([]byte, error) {
	si, err := h.readStreamsInfo()
	if err != nil {
		return nil, err
	}
	if len(si.folders) != 1 || si.numSub[0] != 1 {
		return nil, corrupt("%d folders, want one folder with one stream", len(si.folders))
	}
	n := si.subSizes[0]
	if n > uint64(limit) {
		return nil, corrupt("decoded header of %d bytes exceeds the limit of %d", n, limit)
	}
	packOff, err := packOffsets(si, size)
	if err != nil {
		return nil, err
	}
	if err := checkFolder(si, packOff, 0); err != nil {
		return nil, err
	}
	fr, err := r.openFolder(si, packOff, 0)
	if err != nil {
		return nil, err
	}
	out := make([]byte, n)
	if _, err := io.ReadFull(fr, out); err != nil {
		return nil, err
	}
	// The folder reader checks the folder CRC; a substream CRC can only
	// differ from it in a crafted archive.
	if si.subHasCRC[0] && crc32.ChecksumIEEE(out) != si.subCRC[0] {
		return nil, corrupt("CRC mismatch")
	}
	return out, nil
}

func (r *Reader) readHeader(h *buf) error {
	id, err := h.readByte("header property")
	if err != nil {
		return err
	}
	if id == idArchiveProperties {
		for {
			t, err := h.readByte("archive property")
			if err != nil {
				return err
			}
			if t == 0 {
				break
			}
			if err := h.skipData("archive property"); err != nil {
				return err
			}
		}
		if id, err = h.readByte("header property"); err != nil {
			return err
		}
	}
	if id == idAdditionalStreamsInfo {
		return unsupported("additional streams (data stored outside the header)")
	}
	if id == idMainStreamsInfo {
		if r.si, err = h.readStreamsInfo(); err != nil {
			return fmt.Errorf("main streams info: %w", err)
		}
		if id, err = h.readByte("header property"); err != nil {
			return err
		}
	}
	if id == idFilesInfo {
		if r.files, err = h.readFilesInfo(); err != nil {
			return fmt.Errorf("files info: %w", err)
		}
		if id, err = h.readByte("header property"); err != nil {
			return err
		}
	}
	if id != idEnd {
		return corrupt("unexpected property 0x%02x in header at offset %d", id, h.pos()-1)
	}
	return nil
}

// packOffsets returns the absolute offset of every pack stream after
// checking that they all lie within the archive.
func packOffsets(si *streamsInfo, size int64) ([]int64, error) {
	avail := uint64(size - signatureHeaderSize)
	if si.packPos > avail {
		return nil, corrupt("packed data at %d lies beyond the end of the %d-byte archive", si.packPos, size)
	}
	off := make([]int64, len(si.packSizes))
	pos := si.packPos
	for i, n := range si.packSizes {
		if n > avail-pos {
			return nil, corrupt("pack stream %d at %d+%d lies beyond the end of the %d-byte archive", i, pos, n, size)
		}
		off[i] = int64(signatureHeaderSize + pos)
		pos += n
	}
	return off, nil
}

// check validates what NewReader parsed: that files and substreams match,
// every folder that holds files can be decoded, and attributes agree with
// the structure.
func (r *Reader) check(size int64) error {
	si := r.si
	var err error
	if r.packOff, err = packOffsets(si, size); err != nil {
		return err
	}
	for i, n := range si.numSub {
		if n == 0 {
			continue
		}
		if err := checkFolder(si, r.packOff, i); err != nil {
			return err
		}
	}
	withData := 0
	for i := range r.files {
		if r.files[i].hasStream {
			withData++
		}
	}
	if withData != len(si.subSizes) {
		return corrupt("%d files have data but the archive holds %d streams", withData, len(si.subSizes))
	}
	for i := range r.files {
		f := &r.files[i]
		if _, err := f.mode(); err != nil {
			return err
		}
	}
	return nil
}

// Method IDs this reader decodes.
var (
	methodCopy  = []byte{0x00}
	methodLZMA  = []byte{0x03, 0x01, 0x01}
	methodLZMA2 = []byte{0x21}
)

// methodNames name the IDs from 7-Zip's Methods.txt that an archive is
// likely to carry, so that a refusal says what was found.
var methodNames = map[string]string{
	"00":       "Copy",
	"03":       "Delta",
	"04":       "BCJ x86",
	"0a":       "ARM64",
	"0b":       "RISC-V",
	"21":       "LZMA2",
	"030101":   "LZMA",
	"03030103": "BCJ x86",
	"0303011b": "BCJ2",
	"03030205": "PPC",
	"03030401": "IA64",
	"03030501": "ARM",
	"03030701": "ARM Thumb",
	"03030805": "SPARC",
	"030401":   "PPMd",
	"040108":   "Deflate",
	"040109":   "Deflate64",
	"040202":   "BZip2",
	"04f71101": "Zstandard",
	"06f10701": "AES-256",
}

func methodName(id []byte) string {
	hex := fmt.Sprintf("%x", id)
	if name, ok := methodNames[hex]; ok {
		return name + " (" + hex + ")"
	}
	return "method " + hex
}

// checkFolder refuses folder i unless it is one Copy, LZMA or LZMA2 coder
// whose properties and pack stream make sense.
func checkFolder(si *streamsInfo, packOff []int64, i int) error {
	f := &si.folders[i]
	if len(f.coders) != 1 || f.coders[0].numIn != 1 {
		names := ""
		for j, c := range f.coders {
			if j > 0 {
				names += " + "
			}
			names += methodName(c.id)
		}
		return unsupported("folder %d chains %d coders: %s; only a single Copy, LZMA or LZMA2 coder is supported", i, len(f.coders), names)
	}
	if f.firstPack >= len(packOff) {
		return corrupt("folder %d has no pack stream", i)
	}
	c := &f.coders[0]
	unpack := f.unpackSize()
	switch {
	case bytes.Equal(c.id, methodCopy):
		if si.packSizes[f.firstPack] != unpack {
			return corrupt("folder %d: stored (Copy) data of %d bytes for %d bytes of content", i, si.packSizes[f.firstPack], unpack)
		}
	case bytes.Equal(c.id, methodLZMA):
		if len(c.props) != 5 {
			return corrupt("folder %d: LZMA properties of %d bytes, want 5", i, len(c.props))
		}
		if _, err := lzmaDict(binary.LittleEndian.Uint32(c.props[1:]), unpack); err != nil {
			return fmt.Errorf("folder %d: %w", i, err)
		}
	case bytes.Equal(c.id, methodLZMA2):
		if len(c.props) != 1 {
			return corrupt("folder %d: LZMA2 properties of %d bytes, want 1", i, len(c.props))
		}
		d, err := lzma2DictSize(c.props[0])
		if err != nil {
			return fmt.Errorf("folder %d: %w", i, err)
		}
		if _, err := lzmaDict(d, unpack); err != nil {
			return fmt.Errorf("folder %d: %w", i, err)
		}
	default:
		return unsupported("folder %d uses %s; only Copy, LZMA and LZMA2 are supported", i, methodName(c.id))
	}
	return nil
}

// lzma2DictSize converts the LZMA2 coder's property byte: sizes are 2 or 3
// times a power of two, from 4 KiB (0) to 3 GiB (39); 40 means 4 GiB - 1.
func lzma2DictSize(p byte) (uint32, error) {
	if p > 40 {
		return 0, corrupt("LZMA2 dictionary property %d", p)
	}
	if p == 40 {
		return math.MaxUint32, nil
	}
	return (2 | uint32(p&1)) << (p/2 + 11), nil
}

// lzmaDict returns the dictionary to decode a stream of unpack bytes with.
// A match can reach no further back than the data decoded so far, so a
// dictionary larger than the content is never needed: shrinking it keeps a
// small file from reserving 64 MiB (7-Zip's -mx9) on a router, and lets
// archives with dictionaries above the decoder's cap through when their
// content is small.
func lzmaDict(declared uint32, unpack uint64) (uint32, error) {
	d := uint64(declared)
	if unpack < d {
		d = unpack
	}
	if d < 4096 {
		d = 4096
	}
	if d > maxDict {
		return 0, unsupported("LZMA dictionary of %d bytes for %d bytes of content exceeds the %d-byte limit", declared, unpack, maxDict)
	}
	return uint32(d), nil
}

// openFolder starts decoding folder i of si.
func (r *Reader) openFolder(si *streamsInfo, packOff []int64, i int) (*folderReader, error) {
	f := &si.folders[i]
	c := &f.coders[0]
	src := &ioErrReader{r: io.NewSectionReader(r.ra, packOff[f.firstPack], int64(si.packSizes[f.firstPack]))}
	unpack := f.unpackSize()
	fr := &folderReader{idx: i, left: unpack, hasCRC: f.hasCRC, want: f.crc, src: src}
	var err error
	switch {
	case bytes.Equal(c.id, methodCopy):
		fr.dec = src
	case bytes.Equal(c.id, methodLZMA):
		// The LZMA1 decoder buffers its input itself.
		d, _ := lzmaDict(binary.LittleEndian.Uint32(c.props[1:]), unpack)
		fr.dec, err = newLZMA(src, c.props, d, unpack)
	case bytes.Equal(c.id, methodLZMA2):
		// The LZMA2 decoder reads chunk headers a few bytes at a time.
		if r.br == nil {
			r.br = bufio.NewReaderSize(src, 64<<10)
		}
		r.br.Reset(src)
		d, _ := lzma2DictSize(c.props[0])
		d, _ = lzmaDict(d, unpack)
		fr.dec, err = newLZMA2(r.br, d)
	}
	if err != nil {
		return nil, fr.wrap(err)
	}
	return fr, nil
}

// mode derives the entry's mode from its attributes and checks that they
// agree with the archive's structure, so that an extractor that looks at
// only one of IsDir and Mode is not misled.
func (f *fileInfo) mode() (fs.FileMode, error) {
	isDir := !f.hasStream && !f.emptyFile
	var m fs.FileMode
	switch {
	case f.hasAttrib && f.attrib&0x8000 != 0:
		st := f.attrib >> 16
		m = fs.FileMode(st & 0o777)
		if st&0o4000 != 0 {
			m |= fs.ModeSetuid
		}
		if st&0o2000 != 0 {
			m |= fs.ModeSetgid
		}
		if st&0o1000 != 0 {
			m |= fs.ModeSticky
		}
		switch st & 0xF000 {
		case 0x8000:
		case 0x0000:
			// No type: what a writer that sets only permissions leaves.
			if isDir {
				m |= fs.ModeDir
			}
		case 0x4000:
			m |= fs.ModeDir
		case 0xA000:
			m |= fs.ModeSymlink
		case 0x1000:
			m |= fs.ModeNamedPipe
		case 0x2000:
			m |= fs.ModeDevice | fs.ModeCharDevice
		case 0x6000:
			m |= fs.ModeDevice
		case 0xC000:
			m |= fs.ModeSocket
		default:
			m |= fs.ModeIrregular
		}
	case isDir:
		m = fs.ModeDir | 0o755
	default:
		m = 0o644
		if f.hasAttrib && f.attrib&0x01 != 0 { // FILE_ATTRIBUTE_READONLY
			m = 0o444
		}
		if f.hasAttrib && f.attrib&0x400 != 0 { // FILE_ATTRIBUTE_REPARSE_POINT
			m |= fs.ModeIrregular
		}
	}
	if m.IsDir() != isDir {
		what := "a directory"
		if !isDir {
			what = "not a directory"
		}
		return 0, corrupt("entry %.120q is %s but its attributes (%08x) say mode %v", f.name, what, f.attrib, m)
	}
	return m, nil
}

// Next returns the next entry and a reader for its content, valid until the
// following call to Next. Content is decoded while it is read; whatever the
// caller left unread is decoded and discarded by the next call when later
// entries share its folder (solid block), and skipped without decoding when
// they do not. Reaching the end of a content reader checks the entry's CRC.
// Next returns io.EOF after the last entry.
//
// Skipping an entry of a solid folder costs decoding it, and Size is what
// the archive declares: an extractor with a size budget should check Size
// before calling Next again, not only count what it reads.
func (r *Reader) Next() (*Entry, io.Reader, error) {
	if r.err != nil {
		return nil, nil, r.err
	}
	if r.cur != nil {
		if r.cur.left > 0 && r.subLeft > 0 {
			if _, err := io.Copy(io.Discard, r.cur); err != nil {
				r.err = err // names the entry already
				return nil, nil, r.err
			}
		}
		r.cur.err = errStale
		r.cur = nil
	}
	if r.next >= len(r.files) {
		return nil, nil, io.EOF
	}
	f := &r.files[r.next]
	r.next++
	m, _ := f.mode() // checked in NewReader
	e := &Entry{Name: f.name, IsDir: m.IsDir(), Mode: m, Anti: f.anti}
	if !f.hasStream {
		return e, bytes.NewReader(nil), nil
	}
	if r.subLeft == 0 {
		r.folder++
		for r.si.numSub[r.folder] == 0 {
			r.folder++ // check guarantees a folder with substreams remains
		}
		fr, err := r.openFolder(r.si, r.packOff, r.folder)
		if err != nil {
			r.err = fmt.Errorf("sevenz: %.120q: %w", f.name, err)
			return nil, nil, r.err
		}
		r.fr = fr
		r.subLeft = r.si.numSub[r.folder]
	}
	size := r.si.subSizes[r.sub]
	e.Size = int64(size) // sizes were range-checked when read
	r.cur = &entryReader{
		fr:     r.fr,
		name:   f.name,
		left:   size,
		hasCRC: r.si.subHasCRC[r.sub],
		want:   r.si.subCRC[r.sub],
	}
	r.sub++
	r.subLeft--
	return e, r.cur, nil
}

var errStale = errors.New("sevenz: entry reader used after Next")

// entryReader yields one substream of a folder.
type entryReader struct {
	fr     *folderReader
	name   string
	left   uint64
	crc    uint32
	hasCRC bool
	want   uint32
	err    error
}

func (e *entryReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.left == 0 {
		return 0, io.EOF
	}
	if uint64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.fr.Read(p)
	e.crc = crc32.Update(e.crc, crc32.IEEETable, p[:n])
	e.left -= uint64(n)
	if err != nil && err != io.EOF {
		// Also at the entry's last byte: the folder's own CRC may be what
		// failed.
		e.err = fmt.Errorf("sevenz: %.120q: %w", e.name, err)
		return n, e.err
	}
	if e.left == 0 {
		if e.hasCRC && e.crc != e.want {
			e.err = fmt.Errorf("sevenz: %.120q: %w", e.name, corrupt("CRC %08x, want %08x", e.crc, e.want))
			return n, e.err
		}
		return n, io.EOF
	}
	if err == io.EOF {
		// The folder reader reports this itself; only a broken invariant
		// gets here.
		e.err = fmt.Errorf("sevenz: %.120q: %w", e.name, corrupt("data ends %d bytes early", e.left))
		return n, e.err
	}
	return n, nil
}

// folderReader yields a folder's decoded data, checking its length and CRC.
type folderReader struct {
	idx    int
	dec    io.Reader
	src    *ioErrReader
	left   uint64
	crc    uint32
	hasCRC bool
	want   uint32
	err    error
	stuck  int
}

func (f *folderReader) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if f.left == 0 {
		return 0, io.EOF
	}
	if uint64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.dec.Read(p)
	if n < 0 || n > len(p) {
		f.err = fmt.Errorf("folder %d: decoder returned %d bytes for a %d-byte read", f.idx, n, len(p))
		return 0, f.err
	}
	if f.hasCRC {
		f.crc = crc32.Update(f.crc, crc32.IEEETable, p[:n])
	}
	f.left -= uint64(n)
	if f.left == 0 {
		if f.hasCRC && f.crc != f.want {
			f.err = corrupt("folder %d: CRC %08x, want %08x", f.idx, f.crc, f.want)
			return n, f.err
		}
		return n, nil
	}
	switch {
	case err == io.EOF:
		f.err = corrupt("folder %d: data ends %d bytes early", f.idx, f.left)
	case err != nil:
		f.err = f.wrap(err)
	case n == 0:
		// A decoder that keeps returning nothing would hang io.Copy.
		if f.stuck++; f.stuck > 100 {
			f.err = fmt.Errorf("folder %d: %w", f.idx, io.ErrNoProgress)
		}
	default:
		f.stuck = 0
	}
	if f.err != nil {
		return n, f.err
	}
	return n, nil
}

// wrap reports a decoder error as corruption unless reading the archive
// itself failed, which is the caller's I/O problem and not the archive's.
func (f *folderReader) wrap(err error) error {
	if f.src.err != nil {
		return fmt.Errorf("reading folder %d: %w", f.idx, f.src.err)
	}
	if errors.Is(err, ErrFormat) || errors.Is(err, ErrUnsupported) {
		return err
	}
	return fmt.Errorf("%w: folder %d: %w", ErrFormat, f.idx, err)
}

// ioErrReader remembers an error other than io.EOF from the archive.
type ioErrReader struct {
	r   io.Reader
	err error
}

func (e *ioErrReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}
