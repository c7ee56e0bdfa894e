// Package state persists the agent's local state as small JSON files that
// survive a crash at any instant: every write goes to a temp file in the same
// directory, is fsynced, renamed over the target and the directory fsynced, so
// a reader finds either the old file or the new one, never a torn one.
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
)

// Modes for state files and the directories holding them: the agent's
// own, never read by nginx workers.
const (
	FileMode fs.FileMode = 0o600
	DirMode  fs.FileMode = 0o700
)

// MkdirAll creates path with mode applied exactly (os.MkdirAll's mode is
// filtered by the umask, and an agent started under umask 077 would hide
// its tree from the nginx workers). Missing parents get 0755, as mkdir -p
// gives them, so creating a private directory never closes the way to a
// sibling. Existing directories are left as they are.
func MkdirAll(path string, mode fs.FileMode) error {
	return mkdirAll(filepath.Clean(path), mode)
}

func mkdirAll(path string, mode fs.FileMode) error {
	fi, err := os.Stat(path)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("mkdir %s: not a directory", path)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("mkdir %s: %w", path, err)
	}
	if parent := filepath.Dir(path); parent != path {
		if err := mkdirAll(parent, 0o755); err != nil {
			return err
		}
	}
	if err := os.Mkdir(path, mode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // made meanwhile by someone else: theirs to set
		}
		return fmt.Errorf("mkdir %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("mkdir %s: %w", path, err)
	}
	return nil
}

// WriteFile atomically replaces path with data at the given mode, creating
// the parent directory (DirMode) if needed.
func WriteFile(path string, data []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); err != nil {
		if err := MkdirAll(dir, DirMode); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		// A new directory must itself survive a power cut.
		SyncDir(filepath.Dir(dir))
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	name := tmp.Name()
	fail := func(err error) error {
		tmp.Close()
		os.Remove(name)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(name)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory so a rename inside it is durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// SaveJSON atomically writes v as indented JSON with FileMode.
func SaveJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return WriteFile(path, append(data, '\n'), FileMode)
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
