package ipgroups

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/openflare/openflare-agent/internal/atomicfile"
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

// errTooLarge marks a file on disk bigger than MaxSnapshotBytes.
var errTooLarge = errors.New("larger than the snapshot limit")

// readSnapshotFile reads the JSON file, refusing one larger than the limit
// before allocating for it.
func readSnapshotFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if info.Size() > MaxSnapshotBytes {
		return nil, fmt.Errorf("%s is %d bytes: %w (%d bytes)", path, info.Size(), errTooLarge, MaxSnapshotBytes)
	}
	data := make([]byte, info.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, err
	}
	return data, nil
}

// groupHead is the part of a stored group needed to report checksums; the
// decoder skips ip_list without allocating its entries.
type groupHead struct {
	ID       uint64 `json:"id"`
	Checksum string `json:"checksum"`
}

// parseHeads decodes a snapshot down to id → checksum, validating the shape
// the Lua runtime relies on.
func parseHeads(data []byte) (map[string]string, error) {
	var doc struct {
		Groups map[string]*groupHead `json:"groups"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Groups == nil {
		return nil, errors.New(`no "groups" object`)
	}
	sums := make(map[string]string, len(doc.Groups))
	for key, g := range doc.Groups {
		id, err := parseKey(key)
		if err != nil {
			return nil, err
		}
		if g == nil {
			return nil, fmt.Errorf("group %q is null", key)
		}
		if g.ID != id {
			return nil, fmt.Errorf("group %q has id %d", key, g.ID)
		}
		sums[key] = g.Checksum
	}
	return sums, nil
}

// parseRaw decodes a snapshot into one raw JSON value per group: the bytes
// are kept as they are, so no IP entry is allocated.
func parseRaw(data []byte) (map[string]json.RawMessage, error) {
	var doc struct {
		Groups map[string]json.RawMessage `json:"groups"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Groups == nil {
		return nil, errors.New(`no "groups" object`)
	}
	for key, raw := range doc.Groups {
		if _, err := parseKey(key); err != nil {
			return nil, err
		}
		if len(raw) == 0 || raw[0] != '{' {
			return nil, fmt.Errorf("group %q is not an object", key)
		}
	}
	return doc.Groups, nil
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

// readRaw reads and decodes the current snapshot for an update.
func readRaw(path string) (map[string]json.RawMessage, error) {
	data, err := readSnapshotFile(path)
	if err != nil {
		return nil, fmt.Errorf("ip groups: read snapshot: %w", err)
	}
	raw, err := parseRaw(data)
	if err != nil {
		return nil, fmt.Errorf("ip groups: decode snapshot %s: %w", path, err)
	}
	return raw, nil
}

// encodeSnapshot produces exactly what encoding/json emits for
// {"groups":map[string]json.RawMessage}: keys sorted as strings, values as
// they are. Values come from json.Marshal (in verify, or in the agent that
// wrote the file), so they are already compact, and copying them verbatim
// keeps unchanged groups byte-identical without another scan of up to
// 20 MiB; a hand-edited value stays as written, which the Lua side parses
// just the same. The size is known before anything is allocated, so an
// oversized snapshot costs no buffer.
func encodeSnapshot(groups map[string]json.RawMessage) ([]byte, error) {
	const head, tail = `{"groups":{`, `}}`
	size := len(head) + len(tail)
	for key, raw := range groups {
		size += len(key) + len(raw) + 3 // quotes and colon
	}
	if len(groups) > 1 {
		size += len(groups) - 1 // commas
	}
	if size > MaxSnapshotBytes {
		return nil, fmt.Errorf("ip groups: snapshot would be %d bytes, over the %d-byte (20 MiB) limit; kept the previous snapshot", size, MaxSnapshotBytes)
	}
	buf := make([]byte, 0, size)
	buf = append(buf, head...)
	for i, key := range slices.Sorted(maps.Keys(groups)) {
		if i > 0 {
			buf = append(buf, ',')
		}
		// Keys are canonical decimal ids: nothing to escape.
		buf = append(buf, '"')
		buf = append(buf, key...)
		buf = append(buf, '"', ':')
		buf = append(buf, groups[key]...)
	}
	return append(buf, tail...), nil
}

// checksumLine is the content of the .checksum file for a snapshot.
func checksumLine(data []byte) []byte {
	sum := sha256.Sum256(data)
	return []byte(hex.EncodeToString(sum[:]) + "\n")
}

// writeSnapshot lands data and its compiled form: the JSON, then the
// compiled file, then the checksum file, each atomically. The Lua side
// looks at the compiled file only after the checksum file changes, and
// takes it only when its label is that checksum, so it never uses a file
// that is not complete on disk. A crash before the checksum file leaves
// the old checksum, which the old compiled file no longer matches: the
// workers keep their groups until Open repairs both.
func writeSnapshot(dir string, data, compiled []byte) error {
	if err := atomicfile.WriteFile(filepath.Join(dir, SnapshotName), data, fileMode); err != nil {
		return fmt.Errorf("ip groups: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, CompiledName), compiled, fileMode); err != nil {
		return fmt.Errorf("ip groups: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, ChecksumName), checksumLine(data), fileMode); err != nil {
		return fmt.Errorf("ip groups: %w", err)
	}
	return nil
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

// removeStaleTemps deletes temp files a write killed mid-way left behind;
// a snapshot temp file can be 20 MiB, a compiled one more.
func removeStaleTemps(dir string) {
	for _, name := range []string{SnapshotName, CompiledName, ChecksumName} {
		stale, _ := filepath.Glob(filepath.Join(dir, "."+name+".tmp-*"))
		for _, f := range stale {
			os.Remove(f)
		}
	}
}
