package tarread

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// FuzzMatchesArchiveTar reads the same bytes with archive/tar and with this
// package: as far as archive/tar reads members, this package must give the
// same names, type flags and sizes, and for regular files the same data,
// and end where archive/tar ends. It may refuse, where archive/tar reads on,
// only:
//
//   - more than maxMeta (64) extended headers ('x', 'g', 'L', 'K') in a row:
//     archive/tar takes any number;
//   - a GNU long name or link ('L', 'K') of more than 64 KiB: archive/tar
//     takes 1 MiB;
//   - an old GNU sparse map of more than 2048 extension blocks: archive/tar
//     takes about 2076 (1 MiB of map);
//   - a size under 0 or over 2^62 whatever the type: archive/tar ignores the
//     size of links, directories, devices and FIFOs, and fails later on any
//     other.
//
// And it reads differently, by design:
//
//   - a lone zero block ends the archive, as GNU tar has it: archive/tar
//     refuses one followed by a header or a partial block;
//   - a GNU sparse file (old 'S', or pax with any GNU.sparse.* record, even
//     of a version archive/tar does not know) is of type 'S' with no data;
//     archive/tar expands it into a regular file;
//   - a GNU header has no name prefix: archive/tar reads the atime and
//     ctime bytes as one when they are not numbers, for archives of Go's
//     writer before 1.8 (goPrefix);
//   - it does not parse fields it does not use (mode, owner, times, device
//     numbers, sparse maps, the records of a pax header besides path and
//     size) nor refuse a NUL in a pax record, so it reads archives where
//     archive/tar fails on those.
func FuzzMatchesArchiveTar(f *testing.F) {
	for _, s := range samples(f) {
		f.Add(s.archive)
	}
	for _, c := range hostile() {
		if len(c.archive) <= 64<<10 {
			f.Add(c.archive)
		}
	}
	for _, b := range realArchives(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantErr := readStd(b)
		got, gotErr := readAll(b)
		if msg := mismatch(want, wantErr, got, gotErr); msg != "" {
			t.Fatal(msg)
		}
	})
}

// mismatch says how this package's reading of an archive departs from
// archive/tar's beyond what FuzzMatchesArchiveTar allows, or "".
func mismatch(want []stdMember, wantErr error, got []member, gotErr error) string {
	for i := range len(want) + 1 {
		if i == len(want) && wantErr != io.EOF {
			return "" // archive/tar fails here; what this package does is its own
		}
		if i == len(got) {
			switch {
			case i == len(want) && gotErr == nil:
				return ""
			case gotErr == nil:
				return fmt.Sprintf("ended after %d members, archive/tar reads %v", i, want[i:])
			case refusalAllowed(want, wantErr, i, gotErr):
				return ""
			}
			return fmt.Sprintf("after %d members: %v; archive/tar reads %v then %v", i, gotErr, want[i:], wantErr)
		}
		if i == len(want) {
			return fmt.Sprintf("reads %v past archive/tar's end", got[i:])
		}
		w, g := want[i], got[i]
		if w.sparse {
			if g.flag != 'S' {
				return fmt.Sprintf("member %d: %v, archive/tar reads a sparse file %v", i, g, w.member)
			}
			continue
		}
		if g != w.member {
			if w.goPrefix && strings.HasSuffix(w.name, "/"+g.name) {
				w.name = g.name
				if g == w.member {
					continue
				}
			}
			return fmt.Sprintf("member %d: %v, archive/tar reads %v", i, g, w.member)
		}
	}
	return ""
}

// refusalAllowed is whether an error of this package at member i is one of
// the documented refusals.
func refusalAllowed(want []stdMember, wantErr error, i int, err error) bool {
	msg := err.Error()
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return false
	case strings.Contains(msg, "extended headers in a row"),
		strings.Contains(msg, "GNU long name size not within"),
		strings.Contains(msg, "sparse map past"):
		return true
	case strings.Contains(msg, "member size out of range"):
		if i == len(want) {
			return false
		}
		w := want[i]
		return w.size < 0 || w.size > maxSize || w.sparse && wantErr != io.EOF
	}
	return false
}
