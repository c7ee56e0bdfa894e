// Package atomicfile replaces files so that a crash at any instant leaves
// either the old or the new content, never a torn file: write a temp file
// in the same directory, fsync it, rename it over the target, fsync the
// directory.
package atomicfile

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

// PrivateDir is the mode of directories WriteFile creates: the agent's
// own (callers that want another mode create the directory first).
const PrivateDir fs.FileMode = 0o700

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
// the parent directory (PrivateDir) if needed.
func WriteFile(path string, data []byte, mode fs.FileMode) error {
	f, err := Create(path, mode)
	if err != nil {
		return err
	}
	if _, err := f.Temp().Write(data); err != nil {
		f.Abort()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Commit()
}

// File is a replacement of path being written, for content too large to
// hold in memory: it is a temp file in the same directory until Commit
// renames it over path, so a crash at any instant leaves the old file.
type File struct {
	tmp  *os.File
	path string
	mode fs.FileMode
	done bool
}

// Temp is the temp file the content is written to (and may be read back
// from before Commit).
func (f *File) Temp() *os.File { return f.tmp }

// Create starts replacing path, creating the parent directory
// (PrivateDir) if needed. The caller writes the content, then calls Commit,
// or Abort to leave path as it was.
func Create(path string, mode fs.FileMode) (*File, error) {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); err != nil {
		if err := MkdirAll(dir, PrivateDir); err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
		// A new directory must itself survive a power cut.
		SyncDir(filepath.Dir(dir))
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &File{tmp: tmp, path: path, mode: mode}, nil
}

// Commit puts what was written in place at path with the file's mode:
// fsync, rename, fsync the directory. On failure path is left as it was.
func (f *File) Commit() error {
	f.done = true
	name := f.tmp.Name()
	fail := func(err error) error {
		f.tmp.Close()
		os.Remove(name)
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	if err := f.tmp.Chmod(f.mode); err != nil {
		return fail(err)
	}
	if err := f.tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := f.tmp.Close(); err != nil {
		os.Remove(name)
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	if err := os.Rename(name, f.path); err != nil {
		os.Remove(name)
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	return SyncDir(filepath.Dir(f.path))
}

// Abort drops the replacement; after Commit it does nothing, so it can be
// deferred.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.tmp.Close()
	os.Remove(f.tmp.Name())
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

// PrivateFile is the mode of the agent's own files (its state, the apply
// backup's manifest), never read by nginx workers.
const PrivateFile fs.FileMode = 0o600

// SaveJSON atomically writes v as indented JSON with PrivateFile.
func SaveJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return WriteFile(path, append(data, '\n'), PrivateFile)
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

// removeStaleTemps deletes the temp files (Create's names) a crashed write
// of path left behind.
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
