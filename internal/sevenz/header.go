package sevenz

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf16"
	"unicode/utf8"
)

// Property IDs from 7zFormat.txt.
const (
	idEnd                   = 0x00
	idHeader                = 0x01
	idArchiveProperties     = 0x02
	idAdditionalStreamsInfo = 0x03
	idMainStreamsInfo       = 0x04
	idFilesInfo             = 0x05
	idPackInfo              = 0x06
	idUnpackInfo            = 0x07
	idSubStreamsInfo        = 0x08
	idSize                  = 0x09
	idCRC                   = 0x0A
	idFolder                = 0x0B
	idCodersUnpackSize      = 0x0C
	idNumUnpackStream       = 0x0D
	idEmptyStream           = 0x0E
	idEmptyFile             = 0x0F
	idAnti                  = 0x10
	idName                  = 0x11
	idWinAttributes         = 0x15
	idEncodedHeader         = 0x17
	idDummy                 = 0x19
)

// Limits on what a folder may declare. 7-Zip itself never writes more than
// four coders (BCJ2 + three LZMA); the caps only keep hostile counts from
// turning into big allocations or quadratic bind-pair checks.
const (
	maxCoders        = 32
	maxCoderStreams  = 32
	maxCoderIDSize   = 8 // the ID size field has 4 bits, 7-Zip uses at most 4 bytes
	maxCoderPropSize = 1 << 16
)

// buf is a cursor over a header held in memory. Every read checks the bytes
// that remain, so a declared count can be compared with what could possibly
// follow before anything is allocated for it.
type buf struct {
	b       []byte
	off     int // offset of b[0] in the header, for error messages
	entries int // Limits.Entries: the most items any count may declare
}

func (h *buf) pos() int { return h.off }

func (h *buf) readByte(what string) (byte, error) {
	if len(h.b) == 0 {
		return 0, corrupt("header truncated reading %s", what)
	}
	c := h.b[0]
	h.b = h.b[1:]
	h.off++
	return c, nil
}

func (h *buf) readBytes(n uint64, what string) ([]byte, error) {
	if n > uint64(len(h.b)) {
		return nil, corrupt("header truncated reading %s (%d bytes declared, %d left)", what, n, len(h.b))
	}
	p := h.b[:n:n]
	h.b = h.b[n:]
	h.off += int(n)
	return p, nil
}

func (h *buf) readUint32(what string) (uint32, error) {
	p, err := h.readBytes(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p), nil
}

// readNumber decodes 7z's variable-length UINT64: the count of leading one
// bits in the first byte is the number of little-endian bytes that follow,
// and the first byte's remaining low bits are the most significant ones.
func (h *buf) readNumber(what string) (uint64, error) {
	first, err := h.readByte(what)
	if err != nil {
		return 0, err
	}
	var v uint64
	mask := byte(0x80)
	for i := 0; i < 8; i++ {
		if first&mask == 0 {
			return v | uint64(first&(mask-1))<<(8*i), nil
		}
		c, err := h.readByte(what)
		if err != nil {
			return 0, err
		}
		v |= uint64(c) << (8 * i)
		mask >>= 1
	}
	return v, nil
}

// readCount reads a number that counts items each taking at least minBytes
// of what remains of the header, and refuses it if it exceeds limit or
// could not fit. That is what lets callers allocate for it.
func (h *buf) readCount(what string, limit uint64, minBytes int) (int, error) {
	n, err := h.readNumber(what)
	if err != nil {
		return 0, err
	}
	if n > limit {
		return 0, corrupt("%s: %d exceeds the limit of %d", what, n, limit)
	}
	if minBytes > 0 && n > uint64(len(h.b))/uint64(minBytes) {
		return 0, corrupt("%s: %d declared but only %d header bytes left", what, n, len(h.b))
	}
	return int(n), nil
}

// readSize reads a byte count that must fit in an int64.
func (h *buf) readSize(what string) (uint64, error) {
	n, err := h.readNumber(what)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt64 {
		return 0, corrupt("%s: %d is out of range", what, n)
	}
	return n, nil
}

// skipData skips a property this reader does not use: a size, then that
// many bytes.
func (h *buf) skipData(what string) error {
	n, err := h.readNumber(what + " size")
	if err != nil {
		return err
	}
	_, err = h.readBytes(n, what)
	return err
}

// readBits reads a bit vector of n items, most significant bit first.
func (h *buf) readBits(n int, what string) ([]bool, error) {
	nb := (uint64(n) + 7) / 8
	p, err := h.readBytes(nb, what)
	if err != nil {
		return nil, err
	}
	v := make([]bool, n)
	for i := range v {
		v[i] = p[i/8]&(0x80>>(i%8)) != 0
	}
	return v, nil
}

// readOptionalBits reads the "AllAreDefined" byte and, when it is zero, the
// bit vector that follows it.
func (h *buf) readOptionalBits(n int, what string) ([]bool, error) {
	all, err := h.readByte(what)
	if err != nil {
		return nil, err
	}
	if all == 0 {
		return h.readBits(n, what)
	}
	v := make([]bool, n)
	for i := range v {
		v[i] = true
	}
	return v, nil
}

// digests is the Digests structure: a CRC for some of n streams.
type digests struct {
	defined []bool
	crc     []uint32
}

func (h *buf) readDigests(n int, what string) (digests, error) {
	// n is bounded by the caller; still check that n bits fit before
	// allocating two slices of n.
	if uint64(n) > uint64(len(h.b))*8 {
		return digests{}, corrupt("%s: %d digests declared but only %d header bytes left", what, n, len(h.b))
	}
	def, err := h.readOptionalBits(n, what)
	if err != nil {
		return digests{}, err
	}
	d := digests{defined: def, crc: make([]uint32, n)}
	for i := range def {
		if def[i] {
			if d.crc[i], err = h.readUint32(what); err != nil {
				return digests{}, err
			}
		}
	}
	return d, nil
}

func (h *buf) expect(id byte, what string) error {
	c, err := h.readByte(what)
	if err != nil {
		return err
	}
	if c != id {
		return corrupt("expected property 0x%02x (%s) at header offset %d, found 0x%02x", id, what, h.off-1, c)
	}
	return nil
}

type coder struct {
	id     []byte
	numIn  int
	numOut int
	props  []byte
}

type bindPair struct{ in, out int }

type folder struct {
	coders      []coder
	bindPairs   []bindPair
	packed      []int    // folder in-stream indexes fed by pack streams, in pack-stream order
	unpackSizes []uint64 // one per coder out-stream
	hasCRC      bool
	crc         uint32
	firstPack   int // index of the folder's first pack stream in streamsInfo.packSizes
	numInTotal  int
	numOutTotal int
}

// mainOut is the index of the folder's final out-stream: the one no bind
// pair consumes.
func (f *folder) mainOut() int {
	for i := 0; i < f.numOutTotal; i++ {
		bound := false
		for _, bp := range f.bindPairs {
			if bp.out == i {
				bound = true
				break
			}
		}
		if !bound {
			return i
		}
	}
	return -1 // unreachable after readFolder's checks
}

func (f *folder) unpackSize() uint64 { return f.unpackSizes[f.mainOut()] }

type streamsInfo struct {
	packPos   uint64
	packSizes []uint64
	folders   []folder
	// Per folder: how many substreams (files) it holds.
	numSub []int
	// Per substream, in folder order.
	subSizes  []uint64
	subHasCRC []bool
	subCRC    []uint32
}

func (h *buf) readPackInfo(si *streamsInfo) error {
	var err error
	if si.packPos, err = h.readSize("pack position"); err != nil {
		return err
	}
	// Each pack stream has a size of at least one byte in the header.
	n, err := h.readCount("number of pack streams", uint64(h.entries), 1)
	if err != nil {
		return err
	}
	si.packSizes = make([]uint64, n)
	for {
		id, err := h.readByte("pack info property")
		if err != nil {
			return err
		}
		switch id {
		case idEnd:
			return nil
		case idSize:
			for i := range si.packSizes {
				if si.packSizes[i], err = h.readSize("pack size"); err != nil {
					return err
				}
			}
		case idCRC:
			// Pack-stream CRCs are optional and 7-Zip does not write them;
			// the unpacked data has its own.
			if _, err := h.readDigests(n, "pack stream CRCs"); err != nil {
				return err
			}
		default:
			if err := h.skipData("pack info property"); err != nil {
				return err
			}
		}
	}
}

// readFolder reads one Folder. budget counts the coders and coder streams
// all folders may still declare: the header size alone would allow
// millions of coders with up to maxCoderStreams streams each.
func (h *buf) readFolder(f *folder, budget *int) error {
	nc, err := h.readCount("number of coders", maxCoders, 1)
	if err != nil {
		return err
	}
	if nc == 0 {
		return corrupt("folder with no coders at header offset %d", h.pos())
	}
	if *budget -= nc; *budget < 0 {
		return corrupt("too many coders in the archive")
	}
	f.coders = make([]coder, nc)
	for i := range f.coders {
		c := &f.coders[i]
		flags, err := h.readByte("coder flags")
		if err != nil {
			return err
		}
		if flags&0xC0 != 0 {
			return corrupt("coder flags 0x%02x: alternative methods are not defined", flags)
		}
		// Copied, as are the properties below: a reference into the header
		// would keep all of it alive as long as the folder, for the whole
		// extraction or while the next layer of an encoded header decodes.
		id, err := h.readBytes(uint64(flags&0x0F), "coder ID")
		if err != nil {
			return err
		}
		c.id = bytes.Clone(id)
		if len(c.id) > maxCoderIDSize {
			return corrupt("coder ID of %d bytes", len(c.id))
		}
		c.numIn, c.numOut = 1, 1
		if flags&0x10 != 0 {
			if c.numIn, err = h.readCount("coder in-streams", maxCoderStreams, 0); err != nil {
				return err
			}
			if c.numOut, err = h.readCount("coder out-streams", maxCoderStreams, 0); err != nil {
				return err
			}
			if c.numOut != 1 {
				// 7-Zip's own reader has the same restriction.
				return corrupt("coder %x with %d out-streams", c.id, c.numOut)
			}
		}
		if flags&0x20 != 0 {
			n, err := h.readNumber("coder properties size")
			if err != nil {
				return err
			}
			if n > maxCoderPropSize {
				return corrupt("coder properties of %d bytes", n)
			}
			props, err := h.readBytes(n, "coder properties")
			if err != nil {
				return err
			}
			c.props = bytes.Clone(props)
		}
		f.numInTotal += c.numIn
		f.numOutTotal += c.numOut
		if *budget -= c.numIn; *budget < 0 {
			return corrupt("too many coder streams in the archive")
		}
	}
	// Each out-stream but the last feeds a bind pair; at least one
	// in-stream must be left over to read packed data from.
	if f.numInTotal < f.numOutTotal {
		return corrupt("folder with %d in-streams and %d out-streams", f.numInTotal, f.numOutTotal)
	}
	f.bindPairs = make([]bindPair, f.numOutTotal-1)
	for i := range f.bindPairs {
		in, err := h.readNumber("bind pair in-index")
		if err != nil {
			return err
		}
		out, err := h.readNumber("bind pair out-index")
		if err != nil {
			return err
		}
		if in >= uint64(f.numInTotal) || out >= uint64(f.numOutTotal) {
			return corrupt("bind pair %d->%d out of range", in, out)
		}
		for _, bp := range f.bindPairs[:i] {
			if bp.in == int(in) || bp.out == int(out) {
				return corrupt("bind pair %d->%d reuses a stream", in, out)
			}
		}
		f.bindPairs[i] = bindPair{int(in), int(out)}
	}
	numPacked := f.numInTotal - len(f.bindPairs)
	if numPacked > 1 && numPacked > len(h.b) {
		return corrupt("%d packed streams declared but only %d header bytes left", numPacked, len(h.b))
	}
	f.packed = make([]int, numPacked)
	if numPacked == 1 {
		for i := 0; i < f.numInTotal; i++ {
			bound := false
			for _, bp := range f.bindPairs {
				if bp.in == i {
					bound = true
				}
			}
			if !bound {
				f.packed[0] = i
				break
			}
		}
	} else {
		for i := range f.packed {
			idx, err := h.readNumber("packed stream index")
			if err != nil {
				return err
			}
			if idx >= uint64(f.numInTotal) {
				return corrupt("packed stream index %d out of range", idx)
			}
			f.packed[i] = int(idx)
		}
	}
	return nil
}

func (h *buf) readUnpackInfo(si *streamsInfo) error {
	if err := h.expect(idFolder, "folder list"); err != nil {
		return err
	}
	// A folder takes at least a coder count, flags and a size in the header.
	nf, err := h.readCount("number of folders", uint64(h.entries), 3)
	if err != nil {
		return err
	}
	ext, err := h.readByte("folder external flag")
	if err != nil {
		return err
	}
	if ext != 0 {
		return unsupported("folders stored outside the header")
	}
	si.folders = make([]folder, nf)
	pack := 0
	// Coders and coder in-streams over all folders.
	budget := 4 * h.entries
	for i := range si.folders {
		f := &si.folders[i]
		if err := h.readFolder(f, &budget); err != nil {
			return fmt.Errorf("folder %d: %w", i, err)
		}
		f.firstPack = pack
		pack += len(f.packed)
		if pack > len(si.packSizes) {
			return corrupt("folders use %d pack streams, only %d declared", pack, len(si.packSizes))
		}
	}
	if err := h.expect(idCodersUnpackSize, "coder unpack sizes"); err != nil {
		return err
	}
	for i := range si.folders {
		f := &si.folders[i]
		f.unpackSizes = make([]uint64, f.numOutTotal)
		for j := range f.unpackSizes {
			if f.unpackSizes[j], err = h.readSize("unpack size"); err != nil {
				return err
			}
		}
	}
	for {
		id, err := h.readByte("unpack info property")
		if err != nil {
			return err
		}
		switch id {
		case idEnd:
			return nil
		case idCRC:
			d, err := h.readDigests(nf, "folder CRCs")
			if err != nil {
				return err
			}
			for i := range si.folders {
				si.folders[i].hasCRC, si.folders[i].crc = d.defined[i], d.crc[i]
			}
		default:
			if err := h.skipData("unpack info property"); err != nil {
				return err
			}
		}
	}
}

func (h *buf) readSubStreamsInfo(si *streamsInfo) error {
	nf := len(si.folders)
	si.numSub = make([]int, nf)
	for i := range si.numSub {
		si.numSub[i] = 1
	}
	id, err := h.readByte("substreams property")
	if err != nil {
		return err
	}
	total := uint64(nf)
	if id == idNumUnpackStream {
		total = 0
		for i := range si.numSub {
			// No per-item byte bound: a folder may hold many files whose
			// sizes follow; the running total is capped instead.
			n, err := h.readCount("number of substreams", uint64(h.entries), 0)
			if err != nil {
				return err
			}
			si.numSub[i] = n
			total += uint64(n)
			if total > uint64(h.entries) {
				return corrupt("more than %d substreams", h.entries)
			}
		}
		if id, err = h.readByte("substreams property"); err != nil {
			return err
		}
	}
	for id != idEnd && id != idSize && id != idCRC {
		if err := h.skipData("substreams property"); err != nil {
			return err
		}
		if id, err = h.readByte("substreams property"); err != nil {
			return err
		}
	}
	haveSizes := id == idSize
	// Every substream but a folder's last has its size in the header, so
	// that many bytes must remain.
	if haveSizes && total-uint64(countNonZero(si.numSub)) > uint64(len(h.b)) {
		return corrupt("%d substream sizes declared but only %d header bytes left", total, len(h.b))
	}
	si.subSizes = make([]uint64, 0, total)
	for i, n := range si.numSub {
		if n == 0 {
			continue
		}
		if n > 1 && !haveSizes {
			return corrupt("folder %d holds %d substreams but their sizes are missing", i, n)
		}
		folderSize := si.folders[i].unpackSize()
		var sum uint64
		for j := 1; j < n; j++ {
			s, err := h.readSize("substream size")
			if err != nil {
				return err
			}
			sum += s
			if sum < s || sum > folderSize {
				return corrupt("substream sizes of folder %d exceed its unpack size %d", i, folderSize)
			}
			si.subSizes = append(si.subSizes, s)
		}
		si.subSizes = append(si.subSizes, folderSize-sum)
	}
	if haveSizes {
		if id, err = h.readByte("substreams property"); err != nil {
			return err
		}
	}

	si.subHasCRC = make([]bool, total)
	si.subCRC = make([]uint32, total)
	// A folder with one substream and a folder CRC has its substream's CRC
	// already; the Digests list covers the rest.
	numDigests := 0
	k := 0
	for i, n := range si.numSub {
		if n == 1 && si.folders[i].hasCRC {
			si.subHasCRC[k], si.subCRC[k] = true, si.folders[i].crc
		} else {
			numDigests += n
		}
		k += n
	}
	for id != idEnd {
		if id == idCRC {
			d, err := h.readDigests(numDigests, "substream CRCs")
			if err != nil {
				return err
			}
			k, j := 0, 0
			for i, n := range si.numSub {
				if n == 1 && si.folders[i].hasCRC {
					k++
					continue
				}
				for m := 0; m < n; m++ {
					si.subHasCRC[k], si.subCRC[k] = d.defined[j], d.crc[j]
					k++
					j++
				}
			}
		} else if err := h.skipData("substreams property"); err != nil {
			return err
		}
		if id, err = h.readByte("substreams property"); err != nil {
			return err
		}
	}
	return nil
}

func countNonZero(v []int) int {
	n := 0
	for _, x := range v {
		if x != 0 {
			n++
		}
	}
	return n
}

// readStreamsInfo reads a StreamsInfo structure, whose optional parts come
// in a fixed order.
func (h *buf) readStreamsInfo() (*streamsInfo, error) {
	si := &streamsInfo{}
	id, err := h.readByte("streams info property")
	if err != nil {
		return nil, err
	}
	if id == idPackInfo {
		if err := h.readPackInfo(si); err != nil {
			return nil, fmt.Errorf("pack info: %w", err)
		}
		if id, err = h.readByte("streams info property"); err != nil {
			return nil, err
		}
	}
	if id == idUnpackInfo {
		if err := h.readUnpackInfo(si); err != nil {
			return nil, fmt.Errorf("unpack info: %w", err)
		}
		if id, err = h.readByte("streams info property"); err != nil {
			return nil, err
		}
	}
	if id == idSubStreamsInfo {
		if len(si.folders) == 0 {
			return nil, corrupt("substreams info without folders")
		}
		if err := h.readSubStreamsInfo(si); err != nil {
			return nil, fmt.Errorf("substreams info: %w", err)
		}
		if id, err = h.readByte("streams info property"); err != nil {
			return nil, err
		}
	} else if len(si.folders) > 0 {
		// Without SubStreamsInfo each folder is one stream.
		n := len(si.folders)
		si.numSub = make([]int, n)
		si.subSizes = make([]uint64, n)
		si.subHasCRC = make([]bool, n)
		si.subCRC = make([]uint32, n)
		for i := range si.folders {
			f := &si.folders[i]
			si.numSub[i] = 1
			si.subSizes[i] = f.unpackSize()
			si.subHasCRC[i], si.subCRC[i] = f.hasCRC, f.crc
		}
	}
	if id != idEnd {
		return nil, corrupt("unexpected property 0x%02x in streams info at header offset %d", id, h.pos()-1)
	}
	return si, nil
}

// fileInfo is one FilesInfo item before it is turned into an Entry.
type fileInfo struct {
	name      string
	hasStream bool
	emptyFile bool
	anti      bool
	hasAttrib bool
	attrib    uint32
}

func (h *buf) readFilesInfo() ([]fileInfo, error) {
	// Every file needs at least two bytes of name (the terminator).
	n, err := h.readCount("number of files", uint64(h.entries), 2)
	if err != nil {
		return nil, err
	}
	files := make([]fileInfo, n)
	for i := range files {
		files[i].hasStream = true
	}
	var emptyStreams []int // indexes of files with no stream
	haveNames := false
	for {
		id, err := h.readByte("file property")
		if err != nil {
			return nil, err
		}
		if id == idEnd {
			break
		}
		size, err := h.readNumber("file property size")
		if err != nil {
			return nil, err
		}
		data, err := h.readBytes(size, fmt.Sprintf("file property 0x%02x", id))
		if err != nil {
			return nil, err
		}
		p := &buf{b: data, off: h.off - len(data)}
		switch id {
		case idEmptyStream:
			if emptyStreams != nil {
				return nil, corrupt("repeated empty-stream property")
			}
			bits, err := p.readBits(n, "empty-stream flags")
			if err != nil {
				return nil, err
			}
			emptyStreams = make([]int, 0, n)
			for i, b := range bits {
				if b {
					files[i].hasStream = false
					emptyStreams = append(emptyStreams, i)
				}
			}
		case idEmptyFile, idAnti:
			what := "empty-file flags"
			if id == idAnti {
				what = "anti-item flags"
			}
			bits, err := p.readBits(len(emptyStreams), what)
			if err != nil {
				return nil, err
			}
			for j, b := range bits {
				if id == idEmptyFile {
					files[emptyStreams[j]].emptyFile = b
				} else {
					files[emptyStreams[j]].anti = b
				}
			}
		case idName:
			if haveNames {
				return nil, corrupt("repeated names property")
			}
			haveNames = true
			if err := p.readNames(files); err != nil {
				return nil, err
			}
		case idWinAttributes:
			def, err := p.readOptionalBits(n, "attributes")
			if err != nil {
				return nil, err
			}
			ext, err := p.readByte("attributes external flag")
			if err != nil {
				return nil, err
			}
			if ext != 0 {
				return nil, unsupported("attributes stored outside the header")
			}
			for i, d := range def {
				if d {
					if files[i].attrib, err = p.readUint32("attributes"); err != nil {
						return nil, err
					}
					files[i].hasAttrib = true
				}
			}
		default:
			// Times, kDummy padding, kStartPos and anything newer carry
			// nothing an extractor of static sites needs.
		}
	}
	if n > 0 && !haveNames {
		return nil, corrupt("files without names")
	}
	return files, nil
}

// readNames decodes the kName property: an external flag, then one
// NUL-terminated UTF-16LE name per file.
func (h *buf) readNames(files []fileInfo) error {
	ext, err := h.readByte("names external flag")
	if err != nil {
		return err
	}
	if ext != 0 {
		return unsupported("names stored outside the header")
	}
	if len(h.b)%2 != 0 {
		return corrupt("names property of odd length %d", len(h.b))
	}
	units := make([]uint16, 0, 64)
	out := make([]byte, 0, 64)
	for i := range files {
		units = units[:0]
		for {
			if len(h.b) < 2 {
				return corrupt("names end after %d of %d files", i, len(files))
			}
			u := binary.LittleEndian.Uint16(h.b)
			h.b = h.b[2:]
			h.off += 2
			if u == 0 {
				break
			}
			if len(units) >= MaxNameLen {
				return corrupt("name of file %d longer than %d UTF-16 units", i, MaxNameLen)
			}
			units = append(units, u)
		}
		out = out[:0]
		for j := 0; j < len(units); j++ {
			r := rune(units[j])
			if utf16.IsSurrogate(r) {
				if j+1 < len(units) {
					r = utf16.DecodeRune(r, rune(units[j+1]))
					j++
				} else {
					r = utf8.RuneError
				}
				if r == utf8.RuneError {
					return corrupt("name of file %d is not valid UTF-16", i)
				}
			}
			out = utf8.AppendRune(out, r)
		}
		files[i].name = string(out)
	}
	if len(h.b) != 0 {
		return corrupt("%d bytes left after the names of %d files", len(h.b), len(files))
	}
	return nil
}
