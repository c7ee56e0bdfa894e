package pages

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// archive/zip reads a zip's whole central directory into memory before it
// returns a single entry: a *zip.File of some 250 bytes for each header of
// 46, plus its name, extra field and comment. It reads headers for as long
// as there are any, whatever the end record counts (it compares 16 bits of
// the count, no more). Every limit of extract comes after that, so a
// package within the size cap could cost the agent gigabytes. checkZip
// reads the end records and walks the headers first, holding none of them.

// Record sizes (APPNOTE 4.3), without their variable fields.
const (
	zipEndLen    = 22 // end of central directory record; a comment follows
	zip64LocLen  = 20 // zip64 end of central directory locator
	zip64EndLen  = 56 // zip64 end of central directory record
	zipHeaderLen = 46 // central directory header; name, extra field and comment follow
)

var (
	sigZipEnd    = []byte("PK\x05\x06")
	sigZip64Loc  = []byte("PK\x06\x07")
	sigZip64End  = []byte("PK\x06\x06")
	sigZipHeader = []byte("PK\x01\x02")
)

// maxZipDirectory bounds the central directory of n entries: their
// headers and 1 KiB each of name, extra field and comment, plus 1 MiB
// for entries that take more. Real sites' names average under 100 bytes
// and their extra fields a few dozen; the 1 MiB holds a hundred paths as
// long as Linux resolves (PATH_MAX, 4 KiB) with Info-ZIP's Unicode path
// field repeating each, so a package with long names still reaches the
// checks that name what is wrong with them. At the largest declaration
// (1,000 files, 4,000 directories) it is 6.4 MB of directory, about 8 MB
// in archive/zip with the *zip.File structs: a quarter of the agent's
// default memory limit.
func maxZipDirectory(n uint64) uint64 {
	return 1<<20 + n*(zipHeaderLen+(1<<10))
}

// checkZip refuses a zip whose central directory holds more entries than
// lim allows or more bytes than maxZipDirectory, reading its end records
// as archive/zip does and walking its headers. It returns the length of
// the archive, up to the end of the end record's comment: archive/zip,
// given no more, can only find the end record checked here.
func checkZip(r io.ReaderAt, size int64, lim limits) (int64, error) {
	// The end record is the last signature with a record's length after
	// it in the last 64 KiB + 22 bytes: a comment is at most 65,535
	// bytes, and in one holding the signature archive/zip finds the
	// record there too.
	tail := make([]byte, min(size, zipEndLen+0xffff))
	tailAt := size - int64(len(tail))
	if _, err := r.ReadAt(tail, tailAt); err != nil && err != io.EOF {
		return 0, fmt.Errorf("read package: %w", err)
	}
	i := -1
	if len(tail) >= zipEndLen {
		i = bytes.LastIndex(tail[:len(tail)-zipEndLen+len(sigZipEnd)], sigZipEnd)
	}
	if i < 0 {
		return 0, fmt.Errorf("%w: zip: no end of central directory record in the last %d bytes", ErrPackage, len(tail))
	}
	rec := tail[i : i+zipEndLen]
	endAt := tailAt + int64(i)
	comment := int64(binary.LittleEndian.Uint16(rec[20:]))
	if endAt+zipEndLen+comment > size {
		return 0, fmt.Errorf("%w: zip: the end record at offset %d declares a comment of %d bytes, past the end of the %d-byte package", ErrPackage, endAt, comment, size)
	}
	entries := uint64(binary.LittleEndian.Uint16(rec[10:]))
	dirSize := uint64(binary.LittleEndian.Uint32(rec[12:]))
	dirAt := uint64(binary.LittleEndian.Uint32(rec[16:]))
	// The directory ends where the records after it start.
	dirEnd := endAt
	// archive/zip takes the zip64 record's numbers when one of these
	// fields holds its marker (for the size it tests 0xffff, not
	// 0xffffffff): on any other condition the numbers checked here could
	// differ from the ones it reads.
	if entries == 0xffff || dirSize == 0xffff || dirAt == 0xffffffff {
		at, err := zip64End(r, endAt)
		if err != nil {
			return 0, err
		}
		if at >= 0 {
			var rec64 [zip64EndLen]byte
			if _, err := r.ReadAt(rec64[:], at); err != nil {
				return 0, fmt.Errorf("read package: %w", err)
			}
			if !bytes.Equal(rec64[:4], sigZip64End) {
				return 0, fmt.Errorf("%w: zip: no zip64 end of central directory record at offset %d, where its locator points", ErrPackage, at)
			}
			entries = binary.LittleEndian.Uint64(rec64[32:])
			dirSize = binary.LittleEndian.Uint64(rec64[40:])
			dirAt = binary.LittleEndian.Uint64(rec64[48:])
			dirEnd = at
		}
	}
	// Each entry is a file, a directory or the archive's root, and a
	// sound archive names each once.
	if allowed := uint64(lim.files + lim.dirs() + 1); entries > allowed {
		return 0, fmt.Errorf("%w: zip: the central directory lists %d entries; %d files declared and the limit of %d directories allow at most %d", ErrPackage, entries, lim.files, lim.dirs(), allowed)
	}
	if most := maxZipDirectory(entries); dirSize > most {
		return 0, fmt.Errorf("%w: zip: the central directory declares %d bytes for %d entries, past the %d bytes allowed", ErrPackage, dirSize, entries, most)
	}
	// archive/zip reads from dirAt only when the directory ends where the
	// end records start; otherwise it guesses at data before the archive.
	if dirAt > uint64(dirEnd) || dirSize > uint64(dirEnd)-dirAt {
		return 0, fmt.Errorf("%w: zip: the central directory of %d bytes at offset %d runs past its end record at offset %d", ErrPackage, dirSize, dirAt, dirEnd)
	}
	if gap := uint64(dirEnd) - dirAt - dirSize; gap != 0 {
		return 0, fmt.Errorf("%w: zip: the central directory of %d bytes at offset %d ends %d bytes before its end record", ErrPackage, dirSize, dirAt, gap)
	}
	if err := walkZipHeaders(r, int64(dirAt), int64(dirSize), entries); err != nil {
		return 0, err
	}
	return endAt + zipEndLen + comment, nil
}

// zip64End returns the offset of the zip64 end record that the locator
// before the end record at endAt names, or -1 when there is no locator.
func zip64End(r io.ReaderAt, endAt int64) (int64, error) {
	locAt := endAt - zip64LocLen
	if locAt < 0 {
		return -1, nil
	}
	var loc [zip64LocLen]byte
	if _, err := r.ReadAt(loc[:], locAt); err != nil {
		return 0, fmt.Errorf("read package: %w", err)
	}
	if !bytes.Equal(loc[:4], sigZip64Loc) {
		return -1, nil
	}
	disk, disks := binary.LittleEndian.Uint32(loc[4:]), binary.LittleEndian.Uint32(loc[16:])
	if disk != 0 || disks != 1 {
		return 0, fmt.Errorf("%w: zip: the zip64 locator names disk %d of %d; only single-disk archives are supported", ErrPackage, disk, disks)
	}
	at := binary.LittleEndian.Uint64(loc[8:])
	if locAt < zip64EndLen || at > uint64(locAt-zip64EndLen) {
		return 0, fmt.Errorf("%w: zip: the zip64 locator at offset %d points at offset %d, where no zip64 end record fits before it", ErrPackage, locAt, at)
	}
	return int64(at), nil
}

// walkZipHeaders checks that the size bytes at off are exactly entries
// central directory headers, so that archive/zip, reading headers from
// off until it meets something else, reads those and stops at the end
// records.
func walkZipHeaders(r io.ReaderAt, off, size int64, entries uint64) error {
	br := bufio.NewReader(io.NewSectionReader(r, off, size))
	var h [zipHeaderLen]byte
	var n uint64
	for {
		if _, err := io.ReadFull(br, h[:]); err == io.EOF {
			break
		} else if err == io.ErrUnexpectedEOF {
			return fmt.Errorf("%w: zip: entry %d of the central directory is cut short by the directory's end at offset %d", ErrPackage, n+1, off+size)
		} else if err != nil {
			return fmt.Errorf("read package: %w", err)
		}
		n++
		if n > entries {
			return fmt.Errorf("%w: zip: the central directory holds more than the %d entries its end record declares", ErrPackage, entries)
		}
		if !bytes.Equal(h[:4], sigZipHeader) {
			return fmt.Errorf("%w: zip: entry %d of the central directory has no header signature (% x)", ErrPackage, n, h[:4])
		}
		rest := int(binary.LittleEndian.Uint16(h[28:])) + int(binary.LittleEndian.Uint16(h[30:])) + int(binary.LittleEndian.Uint16(h[32:]))
		if _, err := br.Discard(rest); err == io.EOF {
			return fmt.Errorf("%w: zip: entry %d of the central directory is cut short by the directory's end at offset %d", ErrPackage, n, off+size)
		} else if err != nil {
			return fmt.Errorf("read package: %w", err)
		}
	}
	if n != entries {
		return fmt.Errorf("%w: zip: the end record declares %d entries, the central directory holds %d", ErrPackage, entries, n)
	}
	return nil
}
