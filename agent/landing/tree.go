package landing

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"openflare/agent/geosnap"
	"openflare/agent/ipgroups"
	"openflare/agent/osuser"
	"openflare/agent/render"
	"openflare/agent/selftest"
	"openflare/internal/atomicfile"
)

// ErrWorkerAccess is returned when the nginx workers could not reach a
// directory they need and the agent may not fix it (it lies outside
// data_dir). It is a problem of this node, not of any version.
var ErrWorkerAccess = errors.New("nginx workers cannot reach the agent's files")

// ErrSymlink is returned when a directory the agent writes into is reached
// through a symbolic link inside data_dir: files landed there would go
// wherever the link points. A problem of this node, not of any version.
var ErrSymlink = errors.New("a symbolic link inside data_dir")

// Tree is the agent's directory layout, sorted by who needs what: nginx
// workers read some of it at request time, write some of it (temp files,
// cache), and must not read the rest (state, backups, configs, keys).
type Tree struct {
	Paths   Paths
	DataDir string
	// StateDir holds agent-state.json, the apply backup and staging.
	StateDir string
}

// readDirs are the directories workers read files from at request time.
func (t Tree) readDirs() []string {
	p := t.Paths
	dirs := []string{p.CertDir, p.LuaDir, p.RuntimeConfigDir, p.PagesDir}
	for _, db := range []string{p.CountryMMDB, p.CityMMDB} {
		if db != "" && !slices.Contains(dirs, filepath.Dir(db)) {
			dirs = append(dirs, filepath.Dir(db))
		}
	}
	return dirs
}

// readTrees are the directories whose whole content workers read: Lua,
// the error-page and service-worker templates, Pages releases.
func (t Tree) readTrees() []string {
	p := t.Paths
	return []string{p.LuaDir, filepath.Join(p.CertDir, "error_pages"), filepath.Join(p.CertDir, "sw"), p.PagesDir}
}

// readFiles are single files workers read beside files they must not
// (runtime_config_dir also holds the raw source with basic-auth secrets).
func (t Tree) readFiles() []string {
	p := t.Paths
	files := []string{
		filepath.Join(p.RuntimeConfigDir, render.WAFConfigFile),
		filepath.Join(p.RuntimeConfigDir, ipgroups.SnapshotName),
		filepath.Join(p.RuntimeConfigDir, ipgroups.CompiledName),
		filepath.Join(p.RuntimeConfigDir, ipgroups.ChecksumName),
		filepath.Join(p.RuntimeConfigDir, geosnap.Name),
	}
	for _, db := range []string{p.CountryMMDB, p.CityMMDB} {
		if db != "" {
			files = append(files, db)
		}
	}
	return files
}

// writeDirs are the directories workers write: the *_temp_path dirs and
// the proxy cache. nginx's master gives them to the worker user itself
// when it loads a config as root.
func (t Tree) writeDirs() []string {
	dirs := []string{t.Paths.ProxyCache}
	for _, tp := range tempPaths {
		dirs = append(dirs, filepath.Join(t.Paths.TempDir, tp[1]))
	}
	return dirs
}

// Prepare creates the layout with modes made for the worker identity w,
// whatever the umask: worker-read directories 0755, worker-write ones
// 0700, the agent's private state 0700, and every directory between
// data_dir and a worker directory traversable (o+x, not listable). With
// repair it also resets what workers read (Lua, templates, the WAF files,
// Pages) to be readable, for trees an older release or a restrictive umask
// left closed. Nothing outside data_dir is ever changed, symbolic links
// included: a parent outside it that the workers cannot traverse is an
// ErrWorkerAccess naming it. The layout is complete even then, so nginx
// can still be started from it.
func (t Tree) Prepare(w osuser.Identity, repair bool) error {
	// The private directory first, so that only the ways to worker
	// directories are opened below.
	if err := atomicfile.MkdirAll(t.StateDir, atomicfile.PrivateDir); err != nil {
		return err
	}
	write := t.writeDirs()
	for _, d := range append(t.Paths.Dirs(), t.readDirs()...) {
		if slices.Contains(write, d) {
			continue
		}
		if err := atomicfile.MkdirAll(d, configDirMode); err != nil {
			return err
		}
	}
	for _, d := range write {
		if err := atomicfile.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	// The self-test's sockets: the agent's user alone enters, whatever an
	// older release or the umask left.
	if err := atomicfile.MkdirAll(t.Paths.SelfTestDir, selftest.DirMode); err != nil {
		return err
	}
	if err := os.Chmod(t.Paths.SelfTestDir, selftest.DirMode); err != nil {
		return err
	}
	if err := t.prepareLogs(); err != nil {
		return err
	}
	root, err := filepath.EvalSymlinks(t.DataDir)
	if err != nil {
		return fmt.Errorf("resolve data_dir: %w", err)
	}
	for _, d := range t.Paths.Managed() {
		if link := t.linkBelow(d); link != "" {
			return fmt.Errorf("%w: %s is a link, and %s lies behind it; the agent writes only into real directories", ErrSymlink, link, d)
		}
	}
	if repair {
		if err := t.repair(root); err != nil {
			return err
		}
	}
	// Workers need to traverse to each directory; into a worker-write
	// directory only its owner (nginx gives it to them) goes further.
	var need []string
	need = append(need, t.readDirs()...)
	for _, d := range write {
		need = append(need, filepath.Dir(d))
	}
	blocked := map[string][]string{}
	var order []string
	for _, d := range need {
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			return fmt.Errorf("resolve %s: %w", d, err)
		}
		if err := openPath(root, real); err != nil {
			return err
		}
		if w.UID == 0 {
			continue
		}
		b, err := w.Unreachable(real)
		if err != nil {
			return fmt.Errorf("check %s: %w", d, err)
		}
		if b != "" {
			if _, ok := blocked[b]; !ok {
				order = append(order, b)
			}
			blocked[b] = append(blocked[b], d)
		}
	}
	if len(order) > 0 {
		var parts []string
		for _, b := range order {
			parts = append(parts, fmt.Sprintf("%s (on the way to %s)", b, strings.Join(blocked[b], ", ")))
		}
		return fmt.Errorf("%w: workers run as %s and cannot traverse %s; make it traversable (chmod o+x) or choose a data_dir they can reach", ErrWorkerAccess, w, strings.Join(parts, "; "))
	}
	return nil
}

// linkBelow returns the first symbolic link on the way from data_dir down
// to dir (both as configured), or "" (also when dir is not below data_dir:
// the owner placed it there on purpose).
func (t Tree) linkBelow(dir string) string {
	dd := filepath.Clean(t.DataDir)
	dir = filepath.Clean(dir)
	rel, err := filepath.Rel(dd, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return ""
	}
	p := dd
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return p
		}
	}
	return ""
}

// within reports whether p is root or below it (both resolved).
func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

// openPath makes every directory from root down to dir traversable by
// others (the workers are another user whenever the agent is root). Both
// paths are resolved, so only directories really inside data_dir change.
func openPath(root, dir string) error {
	for p := dir; within(root, p); p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("open up %s: %w", p, err)
		}
		if mode := fi.Mode().Perm(); fi.IsDir() && mode&0o011 != 0o011 {
			if err := os.Chmod(p, mode|0o011); err != nil {
				return fmt.Errorf("make %s traversable for nginx workers: %w", p, err)
			}
		}
		if p == root {
			break
		}
	}
	return nil
}

// repair makes what workers read readable: directories of the read trees
// 0755, their files (private keys aside) and the single read files o+r.
// Only paths inside root (data_dir, resolved) are touched, links are not
// followed, and the state directory is never entered.
func (t Tree) repair(root string) error {
	stateDir, _ := filepath.EvalSymlinks(t.StateDir)
	for _, tree := range t.readTrees() {
		real, err := filepath.EvalSymlinks(tree)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("resolve %s: %w", tree, err)
		}
		if !within(root, real) {
			continue
		}
		err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch {
			case d.IsDir() && p == stateDir:
				return fs.SkipDir
			case d.IsDir():
				return chmodTo(p, configDirMode)
			case d.Type().IsRegular() && !strings.HasSuffix(p, ".key"):
				return addRead(p)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("repair %s: %w", tree, err)
		}
	}
	for _, f := range t.readFiles() {
		fi, err := os.Lstat(f)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if real, err := filepath.EvalSymlinks(filepath.Dir(f)); err == nil && within(root, real) {
			if err := addRead(f); err != nil {
				return fmt.Errorf("repair %s: %w", f, err)
			}
		}
	}
	return nil
}

func chmodTo(p string, mode fs.FileMode) error {
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode().Perm() == mode {
		return err
	}
	return os.Chmod(p, mode)
}

func addRead(p string) error {
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode().Perm()&0o044 == 0o044 {
		return err
	}
	return os.Chmod(p, fi.Mode().Perm()|0o044)
}

// Problem is something the workers cannot reach, for `check`.
type Problem struct {
	Path   string
	Reason string
	// Fixed is true when the agent repairs it at its next start (it lies
	// inside data_dir); false needs the operator.
	Fixed bool
}

func (p Problem) String() string {
	s := p.Path + ": " + p.Reason
	if p.Fixed {
		s += " (the agent repairs this at start)"
	}
	return s
}

// Unreadable lists what the workers read at request time but w cannot
// open, and the directories on the way that w cannot traverse.
func (t Tree) Unreadable(w osuser.Identity) []Problem {
	if w.UID == 0 {
		return nil
	}
	root, err := filepath.EvalSymlinks(t.DataDir)
	if err != nil {
		root = filepath.Clean(t.DataDir)
	}
	var out []Problem
	seen := map[string]bool{}
	add := func(p Problem) {
		if !seen[p.Path] {
			seen[p.Path] = true
			out = append(out, p)
		}
	}
	fixed := func(p string) bool {
		real, err := filepath.EvalSymlinks(p)
		return err == nil && within(root, real)
	}
	// Before the first start most of the tree does not exist yet: its
	// nearest existing parent is what the workers must get through.
	need := t.readDirs()
	for _, d := range t.writeDirs() {
		// nginx's master gives the directory itself to the workers.
		need = append(need, filepath.Dir(d))
	}
	for _, d := range need {
		if b := unreachableExisting(w, d); b != "" {
			add(Problem{Path: b, Reason: "directory not traversable by the workers", Fixed: fixed(b)})
		}
	}
	check := func(p string) {
		if b, err := w.Unreachable(filepath.Dir(p)); err != nil || b != "" {
			return // reported as a directory above
		}
		if ok, err := w.CanPath(p, osuser.Read); err == nil && !ok {
			add(Problem{Path: p, Reason: "not readable by the workers", Fixed: fixed(filepath.Dir(p))})
		}
	}
	for _, tree := range t.readTrees() {
		filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return nil
			case d.IsDir():
				if b, err := w.Unreachable(p); err == nil && b == p {
					add(Problem{Path: p, Reason: "directory not traversable by the workers", Fixed: fixed(p)})
					return fs.SkipDir
				}
			case d.Type().IsRegular() && !strings.HasSuffix(p, ".key"):
				check(p)
			}
			return nil
		})
	}
	for _, f := range t.readFiles() {
		if _, err := os.Stat(f); err == nil {
			check(f)
		}
	}
	return out
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
