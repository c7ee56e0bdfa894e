// Package pages keeps the Pages projects of the active config deployed
// (PROTOCOL 9): it fetches each project's active package from the control
// plane (E7, E8), verifies it, extracts it safely into a release of its
// own, and switches the project's `current` link to it atomically. nginx
// serves `current`, so a new release needs no reload. The agent only ever
// consumes the control plane's packages: no URL, repository or command
// comes from anywhere else.
package pages

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"openflare/agent/backoff"
	"openflare/agent/protocol"
	"openflare/agent/testhook"
	"openflare/internal/atomicfile"
)

// ControlPlane is E7 and E8 (agent/controlplane's Client).
type ControlPlane interface {
	PagesMeta(ctx context.Context, project uint64) (protocol.PagesMeta, error)
	PagesPackage(ctx context.Context, project uint64, size int64, w io.Writer) (int64, error)
}

// Syncer deploys Pages projects under Dir (pages_dir). One goroutine uses
// it (the agent's Pages loop).
type Syncer struct {
	Dir string
	CP  ControlPlane
	Log *slog.Logger

	// failed holds the deployments that failed, so the same package (up
	// to 2 GiB) is not downloaded again at every check: it waits, longer
	// each time, unless E7 names something else.
	failed map[uint64]failure
}

type failure struct {
	meta protocol.PagesMeta
	// wait spaces the retries of one deployment: one minute, doubling,
	// at most an hour, jittered so that a fleet does not retry in step.
	wait  backoff.Backoff
	until time.Time
	err   error
}

// MarkerName is the file a complete release carries (PROTOCOL 9.2 step 6);
// no site serves it (landing hides it).
const MarkerName = ".openflare-pages.json"

type marker struct {
	ProjectID    uint64 `json:"project_id"`
	DeploymentID uint64 `json:"deployment_id,omitempty"`
	Checksum     string `json:"checksum"`
}

// dirMode is every directory the workers traverse or read.
const dirMode fs.FileMode = 0o755

// Reconcile brings every project in ids to its active deployment. Each
// project stands alone: one that fails is reported (errors joined, each
// naming its project) and the others still deploy.
func (s *Syncer) Reconcile(ctx context.Context, ids []uint64) error {
	var errs []error
	for _, id := range ids {
		if err := s.project(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("pages project %d: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// attempts bounds the downloads of one reconcile when the deployment
// changes under it (PROTOCOL 9.2: at most two).
const attempts = 2

func (s *Syncer) project(ctx context.Context, id uint64) error {
	meta, err := s.meta(ctx, id)
	if err != nil {
		return err
	}
	dir := filepath.Join(s.Dir, "projects", strconv.FormatUint(id, 10))
	releases := filepath.Join(dir, "releases")
	if err := atomicfile.MkdirAll(releases, dirMode); err != nil {
		return err
	}
	if f, ok := s.failed[id]; ok && f.meta == meta && time.Now().Before(f.until) {
		return fmt.Errorf("%w (failed %d times; next try after %s)", f.err, f.wait.Attempts(), f.until.Format(time.RFC3339))
	}
	final, err := s.deploy(ctx, meta, releases)
	if err != nil {
		if s.failed == nil {
			s.failed = map[uint64]failure{}
		}
		f := s.failed[id]
		if f.meta != meta {
			f = failure{meta: meta, wait: backoff.Backoff{Min: time.Minute, Max: time.Hour}}
		}
		f.until, f.err = time.Now().Add(f.wait.Next()), err
		s.failed[id] = f
		return err
	}
	delete(s.failed, id)
	testhook.Crash("pages-before-switch")
	if err := switchCurrent(dir, final.Hash); err != nil {
		return err
	}
	s.cleanup(dir, final.Hash)
	return nil
}

// deploy makes releases/<hash> a complete release of the active
// deployment, downloading it unless it is there already, and returns the
// deployment it deployed (another one when it changed meanwhile).
func (s *Syncer) deploy(ctx context.Context, meta protocol.PagesMeta, releases string) (protocol.PagesMeta, error) {
	if !ready(filepath.Join(releases, meta.Hash), meta) {
		for try := 1; ; try++ {
			next, err := s.fetch(ctx, meta, releases)
			if err == nil {
				break
			}
			var race *raceError
			if !errors.As(err, &race) || try == attempts {
				return meta, err
			}
			s.log().Info("pages deployment changed during the download; fetching again", "project", meta.ProjectID, "why", race.why)
			meta = next
		}
	}
	return meta, nil
}

func (s *Syncer) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// meta is E7 with PROTOCOL 9.1's checks. The hash becomes a directory
// name: nothing but 64 hex digits passes.
func (s *Syncer) meta(ctx context.Context, id uint64) (protocol.PagesMeta, error) {
	m, err := s.CP.PagesMeta(ctx, id)
	if err != nil {
		return m, err
	}
	switch {
	case m.ProjectID != id:
		return m, fmt.Errorf("metadata is for project %d", m.ProjectID)
	case m.DeploymentID == 0:
		return m, errors.New("metadata names no deployment")
	case !isHash(m.Hash):
		return m, fmt.Errorf("metadata hash %.80q is not a SHA-256 in hex", m.Hash)
	case m.PackageSize <= 0 || m.PackageSize > maxPackage:
		return m, fmt.Errorf("package size %d is not within 1 byte to 2 GiB", m.PackageSize)
	case m.FileCount <= 0 || m.FileCount > maxFiles:
		return m, fmt.Errorf("file count %d is not within 1 to %d", m.FileCount, maxFiles)
	case m.TotalSize < 0 || m.TotalSize > maxTotal:
		return m, fmt.Errorf("total size %d is not within 0 to 8 GiB", m.TotalSize)
	}
	m.Hash = strings.ToLower(m.Hash)
	return m, nil
}

func isHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// raceError is a download that no longer matches the active deployment.
type raceError struct{ why string }

func (e *raceError) Error() string { return e.why }

// fetch downloads, verifies and extracts the package into
// releases/<hash>. A failure leaves nothing behind. When the deployment
// changed meanwhile, it returns a raceError with the new metadata.
func (s *Syncer) fetch(ctx context.Context, meta protocol.PagesMeta, releases string) (protocol.PagesMeta, error) {
	pkg, err := os.CreateTemp(releases, ".package-*.tmp")
	if err != nil {
		return meta, err
	}
	defer func() {
		pkg.Close()
		os.Remove(pkg.Name())
	}()
	h := sha256.New()
	n, err := s.CP.PagesPackage(ctx, meta.ProjectID, meta.PackageSize, io.MultiWriter(pkg, h))
	if err != nil {
		return meta, fmt.Errorf("download: %w", err)
	}
	again, err := s.meta(ctx, meta.ProjectID)
	if err != nil {
		return meta, err
	}
	if again != meta {
		return again, &raceError{fmt.Sprintf("deployment %d became %d", meta.DeploymentID, again.DeploymentID)}
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != meta.Hash {
		return meta, &raceError{fmt.Sprintf("the package hashes to %s, not %s", sum, meta.Hash)}
	}
	staging, err := os.MkdirTemp(releases, "."+meta.Hash+"-*.tmp")
	if err != nil {
		return meta, err
	}
	defer os.RemoveAll(staging)
	lim := limits{files: meta.FileCount, total: meta.TotalSize, perFile: min(meta.TotalSize, maxTotal)}
	out, err := extract(pkg, n, staging, lim)
	if err != nil {
		return meta, fmt.Errorf("extract %s package: %w", out.format, err)
	}
	content := staging
	if top := sharedTop(out.names); top != "" {
		content = filepath.Join(staging, top)
	}
	if err := verifyTree(content, meta); err != nil {
		return meta, err
	}
	if err := os.Chmod(content, dirMode); err != nil {
		return meta, err
	}
	b, _ := json.Marshal(marker{ProjectID: meta.ProjectID, DeploymentID: meta.DeploymentID, Checksum: meta.Hash})
	if err := atomicfile.WriteFile(filepath.Join(content, MarkerName), b, 0o644); err != nil {
		return meta, err
	}
	rel := filepath.Join(releases, meta.Hash)
	// A directory of that name that was not ready (an older agent's, or
	// hand-made) gives way.
	if err := os.RemoveAll(rel); err != nil {
		return meta, err
	}
	if err := os.Rename(content, rel); err != nil {
		return meta, err
	}
	return meta, atomicfile.SyncDir(releases)
}

// sharedTop is the one top-level directory every file is under, or "".
func sharedTop(names []string) string {
	top := ""
	for _, n := range names {
		first, _, nested := strings.Cut(n, "/")
		if !nested || top != "" && first != top {
			return ""
		}
		top = first
	}
	return top
}

// verifyTree walks an extracted release: regular files and directories
// only, and exactly the declared count and bytes (PROTOCOL 9.2 step 5).
func verifyTree(dir string, meta protocol.PagesMeta) error {
	var files int
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%w: %s is not a regular file", ErrPackage, p)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files++
		total += fi.Size()
		return nil
	})
	if err != nil {
		return err
	}
	if files != meta.FileCount || total != meta.TotalSize {
		return fmt.Errorf("%w: extracted %d files of %d bytes, the deployment declares %d files of %d bytes", ErrPackage, files, total, meta.FileCount, meta.TotalSize)
	}
	return nil
}

// ready reports whether rel is a complete release of meta: its marker
// matches and it holds something besides.
func ready(rel string, meta protocol.PagesMeta) bool {
	b, err := os.ReadFile(filepath.Join(rel, MarkerName))
	if err != nil {
		return false
	}
	var m marker
	if json.Unmarshal(b, &m) != nil || m.ProjectID != meta.ProjectID || m.Checksum != meta.Hash {
		return false
	}
	entries, err := os.ReadDir(rel)
	return err == nil && len(entries) > 1
}

// switchCurrent points dir/current at releases/<hash>: a relative link
// made beside it and renamed over it, so a crash leaves the old link or
// the new one. Where links cannot be made (or current is a directory an
// older agent copied), current becomes a copy, swapped in by renames.
func switchCurrent(dir, hash string) error {
	cur := filepath.Join(dir, "current")
	target := filepath.Join("releases", hash)
	if t, err := os.Readlink(cur); err == nil && t == target {
		return sameFile(cur, filepath.Join(dir, target))
	}
	tmp := filepath.Join(dir, "current.tmp")
	os.Remove(tmp)
	err := os.Symlink(target, tmp)
	testhook.Crash("pages-mid-switch")
	if err == nil {
		if err = os.Rename(tmp, cur); err != nil {
			os.Remove(tmp)
		}
	}
	if err != nil {
		if err := copyCurrent(dir, target); err != nil {
			return fmt.Errorf("switch current to %s: %w", hash, err)
		}
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return err
	}
	return sameFile(cur, filepath.Join(dir, target))
}

func sameFile(a, b string) error {
	fa, err := os.Stat(a)
	if err != nil {
		return err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return err
	}
	if !os.SameFile(fa, fb) {
		// A copy is not the same file: compare markers instead.
		ma, _ := os.ReadFile(filepath.Join(a, MarkerName))
		mb, _ := os.ReadFile(filepath.Join(b, MarkerName))
		if len(ma) == 0 || string(ma) != string(mb) {
			return fmt.Errorf("%s does not show %s after the switch", a, b)
		}
	}
	return nil
}

// copyCurrent makes current a copy of the release: copied beside it,
// then renamed in, the previous one moved aside first.
func copyCurrent(dir, target string) error {
	cur := filepath.Join(dir, "current")
	tmp := filepath.Join(dir, "current.copy.tmp")
	prev := filepath.Join(dir, "current.previous")
	os.RemoveAll(tmp)
	os.RemoveAll(prev)
	if err := os.CopyFS(tmp, os.DirFS(filepath.Join(dir, target))); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, dirMode)
		}
		return os.Chmod(p, 0o644)
	}); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	moved := false
	if _, err := os.Lstat(cur); err == nil {
		if err := os.Rename(cur, prev); err != nil {
			os.RemoveAll(tmp)
			return err
		}
		moved = true
	}
	if err := os.Rename(tmp, cur); err != nil {
		if moved {
			os.Rename(prev, cur)
		}
		os.RemoveAll(tmp)
		return err
	}
	return os.RemoveAll(prev)
}

// cleanup keeps one release per project: everything else under releases/
// goes (leftover downloads and staging directories included), and the
// layout of older agents (pages_dir/deployments).
func (s *Syncer) cleanup(dir, keep string) {
	releases := filepath.Join(dir, "releases")
	entries, _ := os.ReadDir(releases)
	for _, e := range entries {
		if e.Name() == keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(releases, e.Name())); err != nil {
			s.log().Warn("remove an old Pages release", "path", filepath.Join(releases, e.Name()), "err", err)
		}
	}
	os.RemoveAll(filepath.Join(s.Dir, "deployments"))
}
