package landing

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"openflare/agent/luaassets"
	"openflare/agent/protocol"
	"openflare/agent/render"
	"openflare/agent/selftest"
	"openflare/internal/atomicfile"
)

// mimeTypes is a []byte, which the linker puts in the data segment: the
// read-only one is what the arm64 build must keep under a 64 KiB step of
// its file size (cross/README.md). Only read, its pages stay the file's.
//
//go:embed mime.types
var mimeTypes []byte

// File is one file to land: Data, or what Staged holds (a support file
// waiting in a Stage), which is read only as it is hashed, compared and
// written.
type File struct {
	Path   string
	Data   []byte
	Mode   fs.FileMode
	Staged *io.SectionReader
}

// content reads f's content, and tells its size.
func (f *File) content() (io.Reader, int64) {
	if f.Staged != nil {
		return io.NewSectionReader(f.Staged, 0, f.Staged.Size()), f.Staged.Size()
	}
	return bytes.NewReader(f.Data), int64(len(f.Data))
}

// Set is everything one apply changes on disk.
type Set struct {
	Files []File
	// Remove are files that must not exist afterwards.
	Remove []string
	// Managed directories end up holding exactly the Files under them:
	// anything else is deleted and empty directories pruned.
	Managed []string
	// IfMissing files are written only when absent (mime.types belongs to
	// the operator once it exists).
	IfMissing []File
	// Runtime are the directories whose files the nginx workers read while
	// serving, not nginx when it loads a configuration (WriteRuntime).
	Runtime []string

	// same marks Files already on disk byte for byte (found by Touched):
	// they are neither backed up nor rewritten, which keeps an apply that
	// changes one route from fsyncing every Lua script again.
	same map[string]bool
}

// MaxSupportFiles bounds one version's support files: certificates and
// templates number in the tens to thousands; 200 000 empty files would
// take minutes to land and to remove.
const MaxSupportFiles = 10_000

// Plan builds the set for a rendered main config, route config and support
// files (the renderer's Files, staged ones read from their Stage), with
// text already adapted to the binary.
func Plan(p Paths, mainText, routeText string, support []protocol.SupportFile) (*Set, error) {
	s := &Set{
		Managed: []string{p.CertDir, p.LuaDir},
		Runtime: []string{p.RuntimeConfigDir, p.LuaDir, filepath.Join(p.CertDir, "error_pages"), filepath.Join(p.CertDir, "sw")},
	}
	// Only nginx's master reads its configs, and the route config can hold
	// basic-auth credentials: not world-readable.
	s.Files = append(s.Files,
		File{Path: p.Main, Data: []byte(p.MainText(mainText)), Mode: 0o640},
		File{Path: p.Route, Data: []byte(p.RouteText(routeText)), Mode: 0o640},
	)
	s.IfMissing = append(s.IfMissing, File{Path: filepath.Join(filepath.Dir(p.Main), "mime.types"), Data: mimeTypes, Mode: 0o644})
	if len(support) > MaxSupportFiles {
		return nil, fmt.Errorf("%d support files (at most %d)", len(support), MaxSupportFiles)
	}
	hasWAF := false
	for _, f := range support {
		pl, err := Place(f.Path)
		if err != nil {
			return nil, err
		}
		if pl.Skip {
			continue
		}
		hasWAF = hasWAF || f.Path == render.WAFConfigFile
		s.Files = append(s.Files, File{Path: pl.Path(p), Data: []byte(f.Content), Mode: pl.Mode, Staged: f.Staged})
	}
	if !hasWAF {
		s.Remove = append(s.Remove, filepath.Join(p.RuntimeConfigDir, render.WAFConfigFile))
	}
	s.Remove = append(s.Remove, filepath.Join(p.RuntimeConfigDir, legacyPowConfig))
	lua := luaassets.Files(p.LuaReplacer())
	for _, f := range lua {
		s.Files = append(s.Files, File{Path: filepath.Join(p.LuaDir, f.Path), Data: f.Content, Mode: 0o644})
	}
	for _, f := range luaassets.CertDirFiles(lua) {
		s.Files = append(s.Files, File{Path: filepath.Join(p.CertDir, f.Path), Data: f.Content, Mode: 0o644})
	}
	if err := s.checkUnique(); err != nil {
		return nil, err
	}
	if err := s.stamp(); err != nil {
		return nil, err
	}
	return s, nil
}

// stamp writes the generation into the main config (the rewriting's last
// step, which apply's transaction names): a hash of every file
// of the set, paths and modes included, so any change to what lands (a
// certificate alone, say) is a new generation, and the same set lands
// byte-identical (the startup re-apply finds it unchanged). Only text the
// agent made carries the marker: staged files are hashed, never stamped.
func (s *Set) stamp() error {
	h := sha256.New()
	for i := range s.Files {
		f := &s.Files[i]
		r, size := f.content()
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00", f.Path, f.Mode, size)
		if _, err := io.Copy(h, r); err != nil {
			return fmt.Errorf("read the staged content of %s: %w", f.Path, err)
		}
	}
	gen := hex.EncodeToString(h.Sum(nil))[:16]
	for i, f := range s.Files {
		if f.Staged == nil && bytes.Contains(f.Data, []byte(selftest.Marker)) {
			s.Files[i].Data = []byte(selftest.Stamp(string(f.Data), gen))
		}
	}
	return nil
}

func (s *Set) checkUnique() error {
	seen := map[string]bool{}
	for _, f := range s.Files {
		if seen[f.Path] {
			return fmt.Errorf("two files land at %s", f.Path)
		}
		seen[f.Path] = true
	}
	return nil
}

// Touched lists every path the set will create, change or delete, given
// what is on disk now: the backup must cover exactly these.
func (s *Set) Touched() ([]string, error) {
	want := map[string]bool{}
	var out []string
	add := func(p string) {
		if !want[p] {
			want[p] = true
			out = append(out, p)
		}
	}
	s.same = map[string]bool{}
	buf := make([]byte, 2*compareChunk)
	for _, f := range s.Files {
		if s.onDisk(&f, buf) {
			s.same[f.Path] = true
			want[f.Path] = true
			continue
		}
		add(f.Path)
	}
	for _, p := range s.Remove {
		add(p)
	}
	for _, f := range s.IfMissing {
		if _, err := os.Lstat(f.Path); err != nil {
			add(f.Path)
		}
	}
	foreign, err := s.foreign(want)
	if err != nil {
		return nil, err
	}
	for _, p := range foreign {
		add(p)
	}
	sort.Strings(out)
	return out, nil
}

// foreign lists files under the managed directories that the set does not
// write.
func (s *Set) foreign(want map[string]bool) ([]string, error) {
	var out []string
	for _, dir := range s.Managed {
		// A managed directory may itself be a link the owner configured
		// (cert_dir elsewhere): walk what it points at, never count the
		// link as a foreign file.
		walkRoot := dir
		if resolved, err := filepath.EvalSymlinks(dir); err == nil {
			walkRoot = resolved
		}
		err := filepath.WalkDir(walkRoot, func(p string, d fs.DirEntry, err error) error {
			if os.IsNotExist(err) {
				return nil
			}
			if err != nil {
				return err
			}
			rel, rerr := filepath.Rel(walkRoot, p)
			if rerr != nil {
				return rerr
			}
			p = filepath.Join(dir, rel)
			if !d.IsDir() && !want[p] {
				out = append(out, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("scan managed dir %s: %w", dir, err)
		}
	}
	return out, nil
}

// Unchanged reports whether the disk already holds exactly this set, so an
// apply (e.g. the startup re-apply) can skip the reload.
func (s *Set) Unchanged() bool {
	buf := make([]byte, 2*compareChunk)
	for _, f := range s.Files {
		if !s.onDisk(&f, buf) {
			return false
		}
	}
	for _, p := range s.Remove {
		if _, err := os.Lstat(p); err == nil {
			return false
		}
	}
	for _, f := range s.IfMissing {
		if _, err := os.Lstat(f.Path); err != nil {
			return false
		}
	}
	want := map[string]bool{}
	for _, f := range s.Files {
		want[f.Path] = true
	}
	foreign, err := s.foreign(want)
	return err == nil && len(foreign) == 0
}

// FallbackPlan is the safe fallback runtime (PROTOCOL 8.5): the embedded
// main config, already adapted, and an empty route config.
func FallbackPlan(p Paths, mainText string) *Set {
	s := &Set{Files: []File{
		{Path: p.Main, Data: []byte(p.MainText(mainText)), Mode: 0o640},
		{Path: p.Route, Mode: 0o640},
	}}
	// Nothing here is staged: there is nothing to fail to read.
	s.stamp()
	return s
}

// compareChunk is how much of a file onDisk holds at a time, of each side.
const compareChunk = 32 << 10

// onDisk reports whether f is already on disk with the same mode and bytes,
// read side by side a chunk at a time (buf holds two). A link where f
// belongs is not followed: it is not f, and the apply replaces it.
func (s *Set) onDisk(f *File, buf []byte) bool {
	disk, err := atomicfile.OpenBeneath(rootFor(f.Path, s.Managed), f.Path)
	if err != nil {
		return false
	}
	defer disk.Close()
	fi, err := disk.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != f.Mode {
		return false
	}
	want, size := f.content()
	if fi.Size() != size {
		return false
	}
	a, b := buf[:compareChunk], buf[compareChunk:]
	for {
		n, err := io.ReadFull(want, a)
		if _, derr := io.ReadFull(disk, b[:n]); derr != nil || !bytes.Equal(a[:n], b[:n]) {
			return false
		}
		if err != nil {
			// The disk file must end where f does.
			m, _ := disk.Read(b[:1])
			return (err == io.EOF || err == io.ErrUnexpectedEOF) && m == 0
		}
	}
}

// rootFor is the innermost of roots holding p, or p's own directory: below
// it no link is followed when the agent reads or writes what it manages.
// Each configured directory is the owner's choice and may itself be a link
// (cert_dir pointing elsewhere, say): it is a root, never a link inside the
// tree to be replaced.
func rootFor(p string, roots []string) string {
	best := ""
	for _, r := range roots {
		if strings.HasPrefix(p, r+"/") && len(r) > len(best) {
			best = r
		}
	}
	if best == "" {
		return filepath.Dir(p)
	}
	return best
}
