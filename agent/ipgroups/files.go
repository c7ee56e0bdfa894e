package ipgroups

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"openflare/internal/atomicfile"
	"openflare/internal/jsonstream"
)

// File names inside runtime_config_dir (PROTOCOL 7.3).
const (
	SnapshotName = "waf_ip_groups.json"
	ChecksumName = SnapshotName + ".checksum"
)

// MaxSnapshotBytes is the largest snapshot the Lua runtime accepts
// (PROTOCOL 7.3, DATAPLANE 3): a bigger file would be ignored there, so it
// is never written.
const MaxSnapshotBytes = 20 << 20

// fileMode lets the nginx workers, which run as another user, read both files.
const fileMode fs.FileMode = 0o644

// dirMode is the mode runtime_config_dir gets if it does not exist yet; the
// workers must be able to traverse it.
const dirMode fs.FileMode = 0o755

// readBuffer is the buffer a snapshot file is read through.
const readBuffer = 64 << 10

// errTooLarge marks a file on disk bigger than MaxSnapshotBytes, and
// errUnusable one that does not parse as a snapshot.
var (
	errTooLarge = errors.New("larger than the snapshot limit")
	errUnusable = errors.New("not a usable snapshot")
)

// readSnapshot opens the JSON file at path and walks it down to its
// groups, copying its bytes to hash when not nil. A file larger than the
// limit is refused before it is read. The caller closes the file.
func readSnapshot(path string, hash io.Writer) (*os.File, map[string]storedGroup, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err == nil && info.Size() > MaxSnapshotBytes {
		err = fmt.Errorf("%s is %d bytes: %w (%d bytes)", path, info.Size(), errTooLarge, MaxSnapshotBytes)
	}
	var heads map[string]storedGroup
	if err == nil {
		var r io.Reader = bufio.NewReaderSize(f, readBuffer)
		if hash != nil {
			r = io.TeeReader(r, hash)
		}
		if heads, err = readHeads(r); err != nil {
			err = fmt.Errorf("%s: %w: %w", path, errUnusable, err)
		}
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, heads, nil
}

// sumsOf is "<id>" → checksum of heads.
func sumsOf(heads map[string]storedGroup) map[string]string {
	sums := make(map[string]string, len(heads))
	for key, g := range heads {
		sums[key] = g.checksum
	}
	return sums
}

// storedGroup is one group of a snapshot file.
type storedGroup struct {
	id       uint64
	checksum string
	enabled  bool
	at       section // the group's object in the file
}

// walk reads a snapshot as a stream, checking the shape the store relies
// on ({"groups":{…}} with canonical decimal keys, each an object), and
// calls group as each group's object ends, with the id its key names. entry, when
// not nil, is called before with each string of the group's ip_list,
// unescaped and valid only during the call, and with nil where a list
// starts (a repeated ip_list key replaces the list). As the Lua runtime
// used to, it takes any "enabled" but false or null as enabled and a
// non-array ip_list as empty, and skips entries that are not strings.
func walk(r io.Reader, entry func(e []byte) error, group func(key string, id uint64, g *storedGroup) error) error {
	dec := json.NewDecoder(r)
	var raw json.RawMessage
	var text []byte
	list := func() error {
		if entry != nil {
			if err := entry(nil); err != nil {
				return err
			}
		}
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok != json.Delim('[') {
			return jsonstream.SkipRest(dec, tok)
		}
		for dec.More() {
			if err := dec.Decode(&raw); err != nil {
				return err
			}
			if entry == nil {
				continue
			}
			if e, ok := stringValue(raw, &text); ok {
				if err := entry(e); err != nil {
					return err
				}
			}
		}
		_, err = dec.Token() // ']'
		return err
	}
	one := func(key string) error {
		id, err := parseKey(key)
		if err != nil {
			return err
		}
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok != json.Delim('{') {
			return fmt.Errorf("group %q is %v, not an object", key, tok)
		}
		g := storedGroup{at: section{off: dec.InputOffset() - 1}}
		err = jsonstream.Fields(dec, func(field string) error {
			switch field {
			case "id":
				return dec.Decode(&g.id)
			case "checksum":
				return dec.Decode(&g.checksum)
			case "enabled":
				if err := dec.Decode(&raw); err != nil {
					return err
				}
				g.enabled = string(raw) != "false" && string(raw) != "null"
				return nil
			case "ip_list":
				return list()
			}
			return jsonstream.Skip(dec)
		})
		if err != nil {
			return err
		}
		g.at.n = dec.InputOffset() - g.at.off
		return group(key, id, &g)
	}
	found := false
	err := jsonstream.Object(dec, func(key string) error {
		if key != "groups" {
			return jsonstream.Skip(dec)
		}
		tok, err := dec.Token()
		if err != nil || tok == nil {
			return err
		}
		if tok != json.Delim('{') {
			return fmt.Errorf("%w: groups is %v", jsonstream.ErrShape, tok)
		}
		found = true
		return jsonstream.Fields(dec, one)
	})
	if err != nil {
		return err
	}
	if !found {
		return errors.New(`no "groups" object`)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the snapshot object")
	}
	return nil
}

// readHeads walks a snapshot down to its groups, by key, each holding the
// id its key names.
func readHeads(r io.Reader) (map[string]storedGroup, error) {
	heads := make(map[string]storedGroup)
	err := walk(r, nil, func(key string, id uint64, g *storedGroup) error {
		if _, dup := heads[key]; dup {
			return fmt.Errorf("group %q appears twice", key)
		}
		if g.id != id {
			return fmt.Errorf("group %q has id %d", key, g.id)
		}
		heads[key] = *g
		return nil
	})
	return heads, err
}

// parseKey accepts only the canonical decimal form, the one the Lua side
// looks up with tostring(id).
func parseKey(key string) (uint64, error) {
	// Ids are uint64 on every target: a 32-bit bit size would make a
	// snapshot holding an id ≥ 2^32 unusable there.
	id, err := strconv.ParseUint(key, 10, 64)
	if err != nil || strconv.FormatUint(id, 10) != key {
		return 0, fmt.Errorf("group key %q is not a decimal id", key)
	}
	return id, nil
}

// moveAside renames an unusable snapshot to <name>.corrupt-<unix> so it can
// be inspected, and removes the checksum and compiled files that described it: with no
// checksum file the Lua side keeps its current groups quietly instead of
// retrying a file that is gone.
func moveAside(dir string) (string, error) {
	path := filepath.Join(dir, SnapshotName)
	aside := path + ".corrupt-" + strconv.FormatInt(time.Now().Unix(), 10)
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("ip groups: move corrupt snapshot aside: %w", err)
	}
	if err := os.Remove(filepath.Join(dir, ChecksumName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("ip groups: remove stale checksum file: %w", err)
	}
	if err := os.Remove(filepath.Join(dir, CompiledName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("ip groups: remove stale compiled snapshot: %w", err)
	}
	return aside, atomicfile.SyncDir(dir)
}

// removeStaleTemps deletes temp files a write killed mid-way left behind
// (a scratch file too, killed between its creation and its unlinking); a
// snapshot temp file can be 20 MiB, a compiled one more.
func removeStaleTemps(dir string) {
	for _, name := range []string{SnapshotName, CompiledName, ChecksumName} {
		stale, _ := filepath.Glob(filepath.Join(dir, "."+name+".tmp-*"))
		for _, f := range stale {
			os.Remove(f)
		}
	}
}
