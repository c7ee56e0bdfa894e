// Package state persists the agent's local state as small JSON files that
// survive a crash at any instant (written through internal/atomicfile).
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"time"

	"github.com/openflare/openflare-agent/internal/atomicfile"
)

// Modes for state files and the directories holding them: the agent's
// own, never read by nginx workers.
const (
	FileMode fs.FileMode = 0o600
	DirMode  fs.FileMode = atomicfile.PrivateDir
)

// SaveJSON atomically writes v as indented JSON with FileMode.
func SaveJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return atomicfile.WriteFile(path, append(data, '\n'), FileMode)
}

// LoadJSON decodes path into v. A missing file leaves v untouched and is not
// an error. A file that cannot be parsed is moved aside as
// <name>.corrupt-<unix> with a warning, v is left untouched, and no error is
// returned: the agent starts fresh rather than crash-looping on bad local
// state. Only I/O errors other than "not found" are returned.
func LoadJSON(path string, v any, log *slog.Logger) error {
	removeStaleTemps(path)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	// Decode into a fresh value so a half-decoded file never leaks into v.
	fresh := reflect.New(reflect.TypeOf(v).Elem())
	if perr := json.Unmarshal(data, fresh.Interface()); perr == nil {
		reflect.ValueOf(v).Elem().Set(fresh.Elem())
	} else {
		aside := path + ".corrupt-" + strconv.FormatInt(time.Now().Unix(), 10)
		if err := os.Rename(path, aside); err != nil {
			return fmt.Errorf("move corrupt %s aside: %w", path, err)
		}
		if log != nil {
			log.Warn("state file could not be parsed; moved aside, starting fresh", "path", path, "moved_to", aside, "err", perr)
		}
	}
	return nil
}

// removeStaleTemps deletes temp files a crashed WriteFile of path left behind.
func removeStaleTemps(path string) {
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "."+globEscape(filepath.Base(path))+".tmp-*"))
	for _, f := range stale {
		os.Remove(f)
	}
}

func globEscape(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', '\\':
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(b)
}

// ReadJSON decodes path into v and never changes the file: for read-only
// tools such as `openflare-agent status`. A missing file is not an error.
func ReadJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
