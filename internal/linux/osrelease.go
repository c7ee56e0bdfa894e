package linux

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// OSRelease is what the profile needs from os-release(5).
type OSRelease struct {
	Name      string // PRETTY_NAME, or NAME when there is no PRETTY_NAME
	VersionID string // VERSION_ID, e.g. "12" or "23.05.3"; may be empty
}

// OSRelease reads <etc>/os-release, falling back to <etc>/../usr/lib/os-release
// as os-release(5) prescribes: the latter is the vendor's copy (OpenWrt's
// /etc/os-release is only a symlink to it) and survives an image or an
// overlay that lacks the /etc entry.
func (fsys FS) OSRelease() (OSRelease, error) {
	first := filepath.Join(fsys.Etc, "os-release")
	b, _, err := readFile(first, nil)
	if errors.Is(err, fs.ErrNotExist) {
		b, _, err = readFile(filepath.Join(fsys.Etc, "..", "usr", "lib", "os-release"), nil)
		if err != nil {
			return OSRelease{}, fmt.Errorf("%s missing, fallback: %w", first, err)
		}
	}
	if err != nil {
		return OSRelease{}, err
	}
	return parseOSRelease(b), nil
}

// parseOSRelease reads KEY=value lines, ignoring comments, blank lines and
// anything it does not understand.
func parseOSRelease(b []byte) OSRelease {
	var pretty, name, version []byte
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		line = trimSpace(line)
		eq := bytes.IndexByte(line, '=')
		if eq <= 0 || line[0] == '#' {
			continue
		}
		var dst *[]byte
		switch string(line[:eq]) {
		case "PRETTY_NAME":
			dst = &pretty
		case "NAME":
			dst = &name
		case "VERSION_ID":
			dst = &version
		default:
			continue
		}
		*dst = line[eq+1:]
	}
	r := OSRelease{Name: unquote(pretty), VersionID: unquote(version)}
	if r.Name == "" {
		r.Name = unquote(name)
	}
	return r
}

// unquote undoes the shell quoting os-release(5) allows: "double" quotes in
// which a backslash escapes $ " \ and `, 'single' quotes taken literally, and
// unquoted text in which a backslash escapes any character. Adjacent pieces
// concatenate as in sh. It is more lenient than sh because a hand-edited
// file is better shown than rejected: an unterminated quote runs to the end
// of the line and unquoted spaces are kept.
func unquote(v []byte) string {
	// Escapes only shrink text, so this prefix yields at least the
	// maxValueLen bytes clip keeps, without copying a huge value first.
	if len(v) > maxValueLen*4 {
		v = v[:maxValueLen*4]
	}
	out := make([]byte, 0, len(v))
	const (
		bare = iota
		single
		double
	)
	state := bare
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch state {
		case single:
			if c == '\'' {
				state = bare
			} else {
				out = append(out, c)
			}
		case double:
			switch {
			case c == '"':
				state = bare
			case c == '\\' && i+1 < len(v) && escapableInDouble(v[i+1]):
				i++
				out = append(out, v[i])
			default:
				out = append(out, c)
			}
		default:
			switch {
			case c == '\'':
				state = single
			case c == '"':
				state = double
			case c == '\\' && i+1 < len(v):
				i++
				out = append(out, v[i])
			default:
				out = append(out, c)
			}
		}
	}
	return clip(out)
}

func escapableInDouble(c byte) bool {
	return c == '$' || c == '"' || c == '\\' || c == '`'
}
