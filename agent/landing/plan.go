package landing

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/openflare/openflare-agent/agent/luaassets"
	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/render"
	"github.com/openflare/openflare-agent/internal/atomicfile"
)

//go:embed mime.types
var mimeTypes []byte

// File is one file to land.
type File struct {
	Path string
	Data []byte
	Mode fs.FileMode
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
// templates number in the tens; 200 000 empty files would take minutes to
// land and to remove.
const MaxSupportFiles = 10_000

// Plan builds the set for a rendered main config, route config and support
// files (the renderer's Files), with text already adapted to the binary.
func Plan(p Paths, mainText, routeText string, support []protocol.SupportFile) (*Set, error) {
	s := &Set{
		Managed: []string{p.CertDir, p.LuaDir},
		Runtime: []string{p.RuntimeConfigDir, p.LuaDir, filepath.Join(p.CertDir, "error_pages"), filepath.Join(p.CertDir, "sw")},
	}
	// Only nginx's master reads its configs, and the route config can hold
	// basic-auth credentials: not world-readable.
	s.Files = append(s.Files,
		File{p.Main, []byte(p.MainText(mainText)), 0o640},
		File{p.Route, []byte(p.RouteText(routeText)), 0o640},
	)
	s.IfMissing = append(s.IfMissing, File{filepath.Join(filepath.Dir(p.Main), "mime.types"), mimeTypes, 0o644})
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
		s.Files = append(s.Files, File{pl.Path(p), []byte(f.Content), pl.Mode})
	}
	if !hasWAF {
		s.Remove = append(s.Remove, filepath.Join(p.RuntimeConfigDir, render.WAFConfigFile))
	}
	s.Remove = append(s.Remove, filepath.Join(p.RuntimeConfigDir, legacyPowConfig))
	vars := luaassets.Vars{RuntimeConfigDir: p.RuntimeConfigDir, LuaDir: p.OpenRestyLuaDir, CertDir: p.OpenRestyCertDir, TempDir: p.TempDir, CountryMMDBPath: p.CountryMMDB, CityMMDBPath: p.CityMMDB}
	for _, f := range luaassets.Files(vars) {
		s.Files = append(s.Files, File{filepath.Join(p.LuaDir, f.Path), f.Content, 0o644})
	}
	for _, f := range luaassets.CertDirFiles(vars) {
		s.Files = append(s.Files, File{filepath.Join(p.CertDir, f.Path), f.Content, 0o644})
	}
	if err := s.checkUnique(); err != nil {
		return nil, err
	}
	s.stamp()
	return s, nil
}

// stamp writes the generation into the main config: a hash of every file
// of the set, paths and modes included, so any change to what lands (a
// certificate alone, say) is a new generation, and the same set lands
// byte-identical (the startup re-apply finds it unchanged).
func (s *Set) stamp() {
	h := sha256.New()
	for _, f := range s.Files {
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00", f.Path, f.Mode, len(f.Data))
		h.Write(f.Data)
	}
	sum := h.Sum(nil)
	gen := hex.EncodeToString(sum)[:16]
	stamped := strings.NewReplacer(
		generationPrefix+generationSlot, generationPrefix+gen,
		"listen "+ProbeAddr+":", "listen "+probeAddrFor(sum)+":",
	)
	for i, f := range s.Files {
		if bytes.Contains(f.Data, []byte(generationPrefix+generationSlot)) {
			s.Files[i].Data = []byte(stamped.Replace(string(f.Data)))
		}
	}
}

// probeAddrFor is the probe's listen address for a generation: one of
// 127.79.0.1–127.79.255.254, new with (almost) every generation. nginx
// opens a new address's socket when it reloads, and only the new workers
// accept on it, so the probe reaches a new worker at its first try. On a
// shared socket the old workers take every connection until the master
// tells them to leave, 100 ms after it started the new ones.
func probeAddrFor(sum []byte) string {
	return fmt.Sprintf("127.79.%d.%d", sum[0], 1+int(sum[1])%254)
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
	for _, f := range s.Files {
		if s.onDisk(f) {
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
	for _, f := range s.Files {
		if !s.onDisk(f) {
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
		{p.Main, []byte(p.MainText(mainText)), 0o640},
		{p.Route, nil, 0o640},
	}}
	s.stamp()
	return s
}

// onDisk reports whether f is already on disk with the same mode and bytes.
// A link where f belongs is not followed: it is not f, and the apply
// replaces it.
func (s *Set) onDisk(f File) bool {
	b, mode, err := atomicfile.ReadBeneath(rootFor(f.Path, s.Managed), f.Path)
	return err == nil && mode == f.Mode && bytes.Equal(b, f.Data)
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
