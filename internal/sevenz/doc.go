// Package sevenz reads .7z archives: the static-site packages the control
// plane sends. It is written from 7-Zip's public format description
// (DOC/7zFormat.txt) and decodes with internal/lzma, so the agent needs no
// archive library and no external 7z binary.
//
// Scope is what 7-Zip writes for a directory of web files: the plain and
// the encoded (LZMA-compressed) header, solid and non-solid folders, and
// folders of a single Copy, LZMA or LZMA2 coder. NewReader refuses, naming
// the method and its ID, anything else: coder chains (BCJ, BCJ2, ARM64,
// Delta before LZMA), encryption (AES-256, 06f10701), PPMd, BZip2, Deflate,
// Zstandard, and data stored outside the header. It refuses them before any
// entry is returned, so an extraction never stops halfway for that reason.
//
// Entries come out in archive order, and content is decoded while it is
// read: a reader never holds a whole folder (solid block) or file in
// memory, only the LZMA dictionary, which the decoder grows with the data
// and which is capped by the content's size and by lzma.MaxDict.
//
// The archive is untrusted input:
//
//   - The header is read whole but may not exceed MaxHeaderSize, stored or
//     decoded, or the lower Limits.HeaderSize of NewReaderLimits, checked
//     before it is read or decoded. Every count in it is checked against
//     MaxEntries (or Limits.Entries) and against the header bytes that
//     remain before anything is allocated for it, and coders are budgeted
//     across folders, so a few bytes declaring 2^40 files or a terabyte
//     name block cost nothing. Nothing the reader keeps refers to the
//     header: each layer of an encoded header can go once the next is
//     decoded, and the last once the entries are built.
//   - Variable-length numbers are decoded as uint64 and range-checked
//     before they become an int or int64, so nothing wraps on 32-bit ARM or
//     MIPS. Offsets and sizes of the header and of every pack stream are
//     checked against the file's size.
//   - Every CRC is verified: the signature header's, the header's, each
//     folder's where present and each file's when its content has been read
//     to the end. A decoder that produces less than the declared size is an
//     error; one that would produce more is never asked to.
//   - Names must be valid UTF-16 and at most MaxNameLen units. They are
//     returned as stored ('/'-separated; a backslash is part of a name), not
//     cleaned: the extractor must reject absolute paths, "..", and links
//     (Entry.Mode carries fs.ModeSymlink for links stored with -snl).
//   - Attributes that contradict the structure (a directory mode on an entry
//     with data, a symlink mode on a directory) are refused, so IsDir and
//     Mode always agree.
//
// Errors caused by the archive wrap ErrFormat (including exceeded limits
// and CRC mismatches) or ErrUnsupported; I/O errors of the underlying
// io.ReaderAt are passed through. No input makes the package panic or loop.
//
// A Reader is not safe for concurrent use.
package sevenz
