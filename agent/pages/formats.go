package pages

import (
	"fmt"
	"io"
	"os"

	"openflare/internal/sevenz"
	"openflare/internal/tarread"
	"openflare/internal/xz"
)

// openXZ is tar.xz: the tar inside an .xz stream.
func openXZ(r io.Reader) (members, string, error) {
	zr, err := xz.NewReader(r)
	if err != nil {
		return nil, "tar.xz", fmt.Errorf("%w: xz: %v", ErrPackage, err)
	}
	return tarMembers{tarread.NewReader(zr)}, "tar.xz", nil
}

// max7zHeader bounds the header of a 7z of n entries, as stored and as
// decoded: 1 KiB each and 1 MiB for entries that take more, as for a zip
// (maxZipDirectory). An entry takes its name in UTF-16 and under 40 bytes
// of size, CRC, attributes, times and, in a non-solid archive, its folder
// (7zz -ms=off -mtc -mta: 118 bytes for a 40-character path), so 1 KiB is
// a name of some 490 characters, and the 1 MiB a hundred of the longest
// sevenz reads (MaxNameLen). sevenz holds the whole header and builds
// every entry before the first member: at the largest declaration (1,000
// files, 4,000 directories) 5.9 MiB of header, and while an LZMA-encoded
// one decodes, as much again in the decoder's window.
func max7zHeader(n int) int64 {
	return 1<<20 + int64(n)<<10
}

// open7z reads a 7z archive in place, refusing more entries than a zip
// may have (checkZip) or more header than max7zHeader allows for them.
func open7z(f *os.File, size int64, lim limits) (members, string, error) {
	n := lim.files + lim.dirs() + 1
	zr, err := sevenz.NewReaderLimits(f, size, sevenz.Limits{Entries: n, HeaderSize: max7zHeader(n)})
	if err != nil {
		return nil, "7z", fmt.Errorf("%w: %v", ErrPackage, err)
	}
	return sevenMembers{zr}, "7z", nil
}

// sevenMembers walks a 7z archive.
type sevenMembers struct{ r *sevenz.Reader }

func (s sevenMembers) next() (entry, io.Reader, error) {
	e, r, err := s.r.Next()
	if err == io.EOF {
		return entry{}, nil, io.EOF
	}
	if err != nil {
		return entry{}, nil, fmt.Errorf("%w: %v", ErrPackage, err)
	}
	out := entry{name: e.Name, size: e.Size, dir: e.IsDir}
	switch {
	case e.Anti:
		out.special = "deletion (anti) item"
	case e.IsDir:
	case !e.Mode.IsRegular():
		out.special = modeKind(e.Mode)
	}
	return out, r, nil
}
