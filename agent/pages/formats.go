package pages

import (
	"archive/tar"
	"fmt"
	"io"
	"os"

	"github.com/openflare/openflare-agent/internal/sevenz"
	"github.com/openflare/openflare-agent/internal/xz"
)

// openXZ is tar.xz: the tar inside an .xz stream.
func openXZ(r io.Reader) (members, string, error) {
	zr, err := xz.NewReader(r)
	if err != nil {
		return nil, "tar.xz", fmt.Errorf("%w: xz: %v", ErrPackage, err)
	}
	return tarMembers{tar.NewReader(zr)}, "tar.xz", nil
}

// open7z reads a 7z archive in place.
func open7z(f *os.File, size int64) (members, string, error) {
	zr, err := sevenz.NewReader(f, size)
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
