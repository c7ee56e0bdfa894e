package landing

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"openflare/agent/protocol"
	"openflare/internal/atomicfile"
)

// Txn is one apply's on-disk backup. Its manifest is written last, after
// every backed-up file: a backup without a manifest is incomplete and the
// live files were not touched yet; a backup with one may be restored at any
// time, including by the next process after a crash.
type Txn struct {
	dir string
	m   manifest
}

type manifest struct {
	// From is the version that was live before this apply, To the one being
	// applied: recovery restores From and records it as current again.
	From    protocol.ConfigRef `json:"from"`
	To      protocol.ConfigRef `json:"to"`
	Entries []entry            `json:"entries"`
	// Managed dirs may lose sub-directories that end up empty.
	Managed []string `json:"managed,omitempty"`
}

type entry struct {
	Path string      `json:"path"`
	Mode fs.FileMode `json:"mode,omitempty"`
	// Saved is the backup file name; empty when the path did not exist.
	Saved string `json:"saved,omitempty"`
}

const manifestName = "manifest.json"

// Begin backs up every path in touched into dir. A complete backup left in
// dir must have been restored first (see Leftover); an incomplete one is
// replaced.
func Begin(dir string, from, to protocol.ConfigRef, touched, managed []string) (*Txn, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("backup: clear %s: %w", dir, err)
	}
	if err := atomicfile.MkdirAll(filepath.Join(dir, "files"), atomicfile.PrivateDir); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	// The new directories must survive a power cut as well as the files.
	if err := atomicfile.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	t := &Txn{dir: dir, m: manifest{From: from, To: to, Managed: managed}}
	for i, p := range touched {
		// A link in the managed tree is not followed: backing up its
		// target would copy a file of somebody else's into the backup.
		// It is recorded as absent, so a restore removes what the apply
		// put there and no link comes back.
		data, mode, err := atomicfile.ReadBeneath(rootFor(p, managed), p)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, atomicfile.ErrSymlink) {
			t.m.Entries = append(t.m.Entries, entry{Path: p})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("backup %s: %w", p, err)
		}
		saved := strconv.Itoa(i)
		if err := writeSynced(filepath.Join(dir, "files", saved), data); err != nil {
			return nil, fmt.Errorf("backup %s: %w", p, err)
		}
		t.m.Entries = append(t.m.Entries, entry{Path: p, Mode: mode, Saved: saved})
	}
	if err := atomicfile.SyncDir(filepath.Join(dir, "files")); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if err := atomicfile.SaveJSON(filepath.Join(dir, manifestName), t.m); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	return t, nil
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, atomicfile.PrivateFile)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// From is the version that was live when the backup was taken.
func (t *Txn) From() protocol.ConfigRef { return t.m.From }

// Restore puts every backed-up path back exactly: saved files with their
// content and mode, and paths that did not exist are removed.
func (t *Txn) Restore() error {
	var errs []error
	for _, e := range t.m.Entries {
		if e.Saved == "" {
			if err := os.Remove(e.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("restore: remove %s: %w", e.Path, err))
			}
			atomicfile.SyncDir(filepath.Dir(e.Path))
			pruneEmptyParents(e.Path, t.m.Managed)
			continue
		}
		data, err := os.ReadFile(filepath.Join(t.dir, "files", e.Saved))
		if err != nil {
			errs = append(errs, fmt.Errorf("restore %s: %w", e.Path, err))
			continue
		}
		if err := atomicfile.MkdirAll(filepath.Dir(e.Path), configDirMode); err != nil {
			errs = append(errs, fmt.Errorf("restore %s: %w", e.Path, err))
			continue
		}
		if err := atomicfile.WriteFile(e.Path, data, e.Mode); err != nil {
			errs = append(errs, fmt.Errorf("restore: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Commit discards the backup: the apply is final.
func (t *Txn) Commit() error {
	// Removing the manifest first makes the commit atomic: a crash halfway
	// through deleting files leaves an incomplete backup, which Recover
	// ignores.
	if err := os.Remove(filepath.Join(t.dir, manifestName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("commit backup: %w", err)
	}
	if err := atomicfile.SyncDir(t.dir); err != nil {
		return fmt.Errorf("commit backup: %w", err)
	}
	return os.RemoveAll(t.dir)
}

// ErrQuarantined reports a leftover backup that could not be trusted (a
// manifest that does not decode, or names paths outside the managed
// tree): it was moved aside, not restored, and nothing else was touched.
var ErrQuarantined = errors.New("apply backup quarantined")

// Leftover opens the backup a crashed or failed apply left behind, if it
// is complete. An incomplete one (no manifest) is deleted: the live files
// were never touched. Every path its manifest names must lie inside one
// of roots; otherwise, or when the manifest does not decode, the backup is
// moved aside as <dir>.corrupt-<unix> and ErrQuarantined returned, so one
// damaged file can neither block every later apply nor restore anywhere.
func Leftover(dir string, roots []string) (*Txn, error) {
	var m manifest
	data, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("discard incomplete backup %s: %w", dir, err)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read backup manifest: %w", err)
	}
	bad := json.Unmarshal(data, &m)
	clean := make([]string, len(roots))
	for i, r := range roots {
		clean[i] = filepath.Clean(r)
	}
	roots = clean
	for _, e := range m.Entries {
		if bad == nil && !inside(e.Path, roots) {
			bad = fmt.Errorf("entry %q is outside the managed tree", e.Path)
		}
		if bad == nil && e.Saved != "" && (strings.ContainsAny(e.Saved, "/\\") || e.Saved == ".." || e.Saved == ".") {
			bad = fmt.Errorf("entry %q has a bad backup name", e.Path)
		}
	}
	for _, d := range m.Managed {
		if bad == nil && !inside(filepath.Join(d, "x"), roots) {
			bad = fmt.Errorf("managed directory %q is outside the managed tree", d)
		}
	}
	if bad != nil {
		aside := dir + ".corrupt-" + strconv.FormatInt(time.Now().Unix(), 10)
		if err := os.Rename(dir, aside); err != nil {
			return nil, fmt.Errorf("move corrupt backup %s aside: %w", dir, err)
		}
		return nil, fmt.Errorf("%w: %s moved to %s: %v", ErrQuarantined, dir, aside, bad)
	}
	return &Txn{dir: dir, m: m}, nil
}

// inside reports whether p, without any ".." segment, lies strictly below
// one of roots (clean).
func inside(p string, roots []string) bool {
	if slices.Contains(strings.Split(filepath.ToSlash(p), "/"), "..") {
		return false
	}
	p = filepath.Clean(p)
	for _, r := range roots {
		if strings.HasPrefix(p, r+string(filepath.Separator)) {
			return true
		}
	}
	return false
}
