// Package atomicfile replaces files so that a crash at any instant leaves
// either the old or the new content, never a torn file: write a temp file
// in the same directory, fsync it, rename it over the target, fsync the
// directory.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); err != nil {
		if err := MkdirAll(dir, PrivateDir); err != nil {
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
