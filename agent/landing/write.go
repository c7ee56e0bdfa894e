package landing

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"openflare/internal/atomicfile"
)

// nginx workers (often another user) read the Lua, error pages and service
// worker files, so config directories are world-traversable; files holding
// secrets are protected by their own modes instead (keys and the raw source
// 0600, the nginx configs with basic-auth credentials 0640).
const configDirMode = 0o755

// Write lands the whole set: WriteConfig, then WriteRuntime.
func (s *Set) Write(after func()) error {
	if err := s.WriteConfig(after); err != nil {
		return err
	}
	return s.WriteRuntime()
}

// WriteConfig lands what nginx itself reads when it tests or loads a
// configuration (the main and route configs, certificates and keys,
// mime.types): between it and WriteRuntime the agent runs `nginx -t`, and
// the running workers, which read the other files while they serve, never
// see a version that fails it. Files Touched found already on disk are
// skipped. after, when set, is called after the first file is written (a
// crash-test seam).
func (s *Set) WriteConfig(after func()) error {
	if err := s.writeFiles(false, after); err != nil {
		return err
	}
	for _, f := range s.IfMissing {
		if _, err := os.Lstat(f.Path); err == nil {
			continue
		}
		if err := f.write(); err != nil {
			return fmt.Errorf("land: %w", err)
		}
	}
	return nil
}

// runtimeRead reports whether nginx workers read p while serving rather
// than nginx when it loads its configuration.
func (s *Set) runtimeRead(p string) bool {
	for _, r := range s.Runtime {
		if strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// WriteRuntime lands the files the workers read while serving (Lua, the
// WAF and runtime JSON, error pages, the service worker), then the
// removals, then clears the managed directories of anything else.
func (s *Set) WriteRuntime() error {
	if err := s.writeFiles(true, nil); err != nil {
		return err
	}
	for _, p := range s.Remove {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("land: remove %s: %w", p, err)
		}
		atomicfile.SyncDir(filepath.Dir(p))
	}
	want := map[string]bool{}
	for _, f := range s.Files {
		want[f.Path] = true
	}
	foreign, err := s.foreign(want)
	if err != nil {
		return err
	}
	for _, p := range foreign {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("land: remove foreign %s: %w", p, err)
		}
		atomicfile.SyncDir(filepath.Dir(p))
		pruneEmptyParents(p, s.Managed)
	}
	return nil
}

// writeFiles writes the set's files that are read at runtime (or the
// others).
func (s *Set) writeFiles(runtime bool, after func()) error {
	for _, f := range s.Files {
		if s.same[f.Path] || s.runtimeRead(f.Path) != runtime {
			continue
		}
		if err := unlinkDirLinks(rootFor(f.Path, s.Managed), filepath.Dir(f.Path)); err != nil {
			return fmt.Errorf("land %s: %w", f.Path, err)
		}
		if err := atomicfile.MkdirAll(filepath.Dir(f.Path), configDirMode); err != nil {
			return fmt.Errorf("land %s: %w", f.Path, err)
		}
		if err := f.write(); err != nil {
			return fmt.Errorf("land: %w", err)
		}
		if after != nil {
			after()
			after = nil
		}
	}
	return nil
}

// write atomically replaces the file at f.Path with f's content, streamed
// from its stage when it has one.
func (f *File) write() error {
	src, _ := f.content()
	w, err := atomicfile.Create(f.Path, f.Mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w.Temp(), src); err != nil {
		w.Abort()
		return fmt.Errorf("write %s: %w", f.Path, err)
	}
	return w.Commit()
}

// unlinkDirLinks removes every symbolic link standing for a directory
// between root (excluded) and dir: the agent writes its files into its own
// directories, never through a link into somebody else's. Only the link
// goes; what it pointed at is not touched.
func unlinkDirLinks(root, dir string) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return nil
	}
	cur := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if err := os.Remove(cur); err != nil {
				return fmt.Errorf("remove the link %s: %w", cur, err)
			}
			return atomicfile.SyncDir(filepath.Dir(cur))
		}
	}
	return nil
}

// pruneEmptyParents removes the now-empty directories above p, but only
// strictly inside one of the managed roots.
func pruneEmptyParents(p string, managed []string) {
	for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
		inside := false
		for _, root := range managed {
			if strings.HasPrefix(dir, filepath.Clean(root)+string(filepath.Separator)) {
				inside = true
			}
		}
		if !inside || os.Remove(dir) != nil {
			return
		}
	}
}
