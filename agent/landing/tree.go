package landing

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/openflare/openflare-agent/agent/osuser"
	"github.com/openflare/openflare-agent/agent/state"
)

// ErrWorkerAccess is returned when the nginx workers could not reach a
// directory they need and the agent may not fix it (it lies outside
// data_dir). It is a problem of this node, not of any version.
var ErrWorkerAccess = errors.New("nginx workers cannot reach the agent's files")

// Tree is the agent's directory layout, sorted by who needs what: nginx
// workers read some of it at request time, write some of it (temp files,
// cache), and must not read the rest (state, backups, agent.json).
type Tree struct {
	Paths   Paths
	DataDir string
	// StateDir holds agent-state.json, the apply backup and staging.
	StateDir string
}

// workerRead are the directories workers read files from at request time:
// Lua, the WAF config and IP-group snapshot, error-page and service-worker
// templates, Pages releases. The config directories are on the list
// because cert_dir and lua_dir sit below them in the default layout.
func (t Tree) workerRead() []string {
	p := t.Paths
	return []string{filepath.Dir(p.Main), filepath.Dir(p.Route), p.CertDir, p.LuaDir, p.RuntimeConfigDir, p.PagesDir}
}

// workerWrite are the directories workers write: the *_temp_path dirs and
// the proxy cache.
func (t Tree) workerWrite() []string {
	dirs := []string{t.Paths.ProxyCache}
	for _, tp := range tempPaths {
		dirs = append(dirs, filepath.Join(t.Paths.TempDir, tp[1]))
	}
	return dirs
}

// Prepare creates the layout with modes made for the worker identity w:
// worker-read directories 0755, worker-write directories 0700 owned by
// the worker, agent-private directories 0700, and every directory between
// data_dir and a worker directory traversable. With repair it also resets
// the modes of existing worker-read directories and their sub-directories,
// which an older release (or a restrictive umask) left unreadable. Parents
// outside data_dir are never changed: one the workers cannot traverse is
// an ErrWorkerAccess naming it.
func (t Tree) Prepare(w osuser.Identity, repair bool) error {
	// The private directory first, so the parents it creates start closed
	// and only the paths to worker directories are opened below.
	if err := state.MkdirAll(t.StateDir, state.DirMode); err != nil {
		return err
	}
	for _, d := range t.Paths.Dirs() {
		if err := state.MkdirAll(d, configDirMode); err != nil {
			return err
		}
	}
	for _, d := range t.workerRead() {
		if err := state.MkdirAll(d, configDirMode); err != nil {
			return err
		}
	}
	for _, d := range t.workerWrite() {
		if err := t.ownWorkerDir(d, w); err != nil {
			return err
		}
	}
	if repair {
		for _, d := range t.workerRead() {
			if err := t.repairReadable(d); err != nil {
				return err
			}
		}
	}
	var problems []string
	for _, d := range append(t.workerRead(), t.workerWrite()...) {
		if err := t.openPath(d); err != nil {
			return err
		}
		if w.UID == 0 {
			continue
		}
		blocked, err := w.Unreachable(d)
		if err != nil {
			return fmt.Errorf("check %s: %w", d, err)
		}
		if blocked != "" {
			problems = append(problems, fmt.Sprintf("%s (needed for %s)", blocked, d))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: workers run as %s and cannot traverse %s; make it traversable (chmod o+x) or choose a data_dir they can reach", ErrWorkerAccess, w, strings.Join(dedupe(problems), ", "))
	}
	return nil
}

// inside reports whether p is data_dir or below it.
func (t Tree) inside(p string) bool {
	dd := filepath.Clean(t.DataDir)
	p = filepath.Clean(p)
	return p == dd || strings.HasPrefix(p, dd+string(filepath.Separator))
}

// openPath makes every directory from data_dir down to d traversable by
// others (the workers are another user whenever the agent is root).
func (t Tree) openPath(d string) error {
	if !t.inside(d) {
		return nil
	}
	for p := filepath.Clean(d); t.inside(p); p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("open up %s: %w", p, err)
		}
		if mode := fi.Mode().Perm(); mode&0o011 != 0o011 {
			if err := os.Chmod(p, mode|0o011); err != nil {
				return fmt.Errorf("make %s traversable for nginx workers: %w", p, err)
			}
		}
		if p == filepath.Dir(p) {
			break
		}
	}
	return nil
}

// ownWorkerDir creates a directory workers write to, owned by them. nginx's
// master does the same chown at start when it runs as root; doing it here
// too means nothing depends on which of the two ran last.
func (t Tree) ownWorkerDir(d string, w osuser.Identity) error {
	if err := state.MkdirAll(d, 0o700); err != nil {
		return err
	}
	if os.Geteuid() == 0 && w.UID != 0 {
		if err := os.Chown(d, w.UID, w.GID); err != nil {
			return fmt.Errorf("give %s to the nginx workers: %w", d, err)
		}
	}
	return nil
}

// repairReadable resets dir and its sub-directories to 0755 and makes the
// non-secret files in it readable by others.
func (t Tree) repairReadable(dir string) error {
	if !t.inside(dir) {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fi.Mode().Perm()
		switch {
		case d.IsDir():
			want = configDirMode
		case secret(p, t.Paths):
			return nil
		case fi.Mode().IsRegular():
			want |= 0o044
		}
		if want != fi.Mode().Perm() {
			if err := os.Chmod(p, want); err != nil {
				return fmt.Errorf("repair mode of %s: %w", p, err)
			}
		}
		return nil
	})
}

// secret reports whether a file under a worker-read directory is one the
// workers must not read: private keys and the nginx configs (basic-auth
// credentials) are the master's, the raw source JSON is the agent's.
func secret(p string, paths Paths) bool {
	return strings.HasSuffix(p, ".key") || p == paths.Main || p == paths.Route ||
		p == filepath.Join(paths.RuntimeConfigDir, openrestyConfigName) ||
		strings.Contains(filepath.Base(p), ".tmp-")
}

// Unreadable lists every file the workers read at request time that w
// cannot open, and every worker directory w cannot write, for `check`.
func (t Tree) Unreadable(w osuser.Identity) []string {
	if w.UID == 0 {
		return nil
	}
	var out []string
	for _, dir := range append(t.workerRead(), t.workerWrite()...) {
		// Before the first start most of the tree does not exist yet: its
		// nearest existing parent is what the workers must get through.
		if blocked := unreachableExisting(w, dir); blocked != "" {
			out = append(out, fmt.Sprintf("%s: directory %s is not traversable", dir, blocked))
		}
	}
	for _, dir := range t.workerRead() {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() {
				if p != dir && isListed(p, t.workerRead()) {
					return fs.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() || secret(p, t.Paths) {
				return nil
			}
			if blocked, err := w.Unreachable(filepath.Dir(p)); err == nil && blocked != "" {
				if !strings.HasPrefix(filepath.Clean(dir), blocked) {
					out = append(out, fmt.Sprintf("%s: directory %s is not traversable", p, blocked))
				}
				return nil
			}
			if ok, err := w.CanPath(p, osuser.Read); err == nil && !ok {
				out = append(out, p+": not readable")
			}
			return nil
		})
	}
	for _, d := range t.workerWrite() {
		if ok, err := w.CanPath(d, osuser.Write|osuser.Traverse); err == nil && !ok {
			out = append(out, d+": not writable")
		}
	}
	return dedupe(out)
}

// unreachableExisting is Unreachable for the nearest existing directory
// at or above dir ("" when the workers get through).
func unreachableExisting(w osuser.Identity, dir string) string {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			blocked, _ := w.Unreachable(p)
			return blocked
		}
		if p == filepath.Dir(p) {
			return ""
		}
	}
}

// isListed reports whether dir is itself one of the roots (walked on its
// own turn).
func isListed(dir string, roots []string) bool {
	for _, r := range roots {
		if filepath.Clean(r) == dir {
			return true
		}
	}
	return false
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
