package geosnap

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/openflare/openflare-agent/internal/atomicfile"
	"github.com/openflare/openflare-agent/internal/mmdb"
	"github.com/openflare/openflare-agent/internal/rangefile"
)

// WAFConfigFile is the landed WAF config the codes are read from.
const WAFConfigFile = "waf_config.json"

// Builder keeps waf_geo.bin in runtime_config_dir in step with the landed
// waf_config.json and the two databases. Builds are serialised, so the
// apply's build and the maintenance loop's never interleave.
type Builder struct {
	Dir         string // runtime_config_dir
	CityPath    string // city_mmdb_path ("" for none)
	CountryPath string // mmdb_path ("" for none)
	Log         *slog.Logger

	mu     sync.Mutex
	status Status
}

// Status is what the last build found.
type Status struct {
	// Codes are the codes the snapshot on disk holds (none: no geo_match
	// node is active, and there is no file).
	Codes Codes
	// Databases are the databases it was compiled from ("city",
	// "country"); none while Codes are named means every geo_match node
	// takes its false edge.
	Databases []string
	// Problems name each database that is missing or does not open.
	Problems []string
	// Err is the last build's error; the previous file stays meanwhile.
	Err error
}

// Status returns what the last build found.
func (b *Builder) Status() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status
}

// Build brings the snapshot in step with the codes of the landed
// waf_config.json and the databases on disk, and reports whether it wrote
// or removed the file. With keep, the codes the file already holds stay
// too: during an apply both the running and the new workers read it, and
// should the apply roll back, the old rules still find their codes. With
// no code named (and none kept) the file is removed. Nothing is compiled
// when the file already carries the label of these codes and databases.
func (b *Builder) Build(keep bool) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	changed, err := b.build(keep)
	b.status.Err = err
	return changed, err
}

func (b *Builder) log() *slog.Logger {
	if b.Log != nil {
		return b.Log
	}
	return slog.New(slog.DiscardHandler)
}

func (b *Builder) build(keep bool) (bool, error) {
	codes := Codes{}
	raw, err := os.ReadFile(filepath.Join(b.Dir, WAFConfigFile))
	switch {
	case err == nil:
		if codes, err = CodesOf(raw); err != nil {
			// The workers fail closed on such a file; no geo rule runs.
			codes = Codes{}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("geo snapshot: %w", err)
	}
	path := filepath.Join(b.Dir, Name)
	old, oldErr := readFile(path)
	if keep && oldErr == nil {
		codes = codes.Union(old.codes)
	}
	if codes.Empty() {
		b.status = Status{}
		if err := os.Remove(path); err == nil {
			atomicfile.SyncDir(b.Dir)
			b.log().Info("geo snapshot removed: no geo_match node is active")
			return true, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("geo snapshot: %w", err)
		}
		return false, nil
	}

	dbs := []*database{{name: "city", path: b.CityPath}, {name: "country", path: b.CountryPath}}
	label := labelOf(codes, dbs)
	if oldErr == nil && old.label == label {
		// Up to date, also in a process that just started: the status
		// comes from the file.
		b.status.Codes = codes
		b.status.Databases = databases(old.flags)
		return false, nil
	}
	began := time.Now()
	src, problems := b.open(dbs)
	defer src.close()
	data, err := Compile(src.Sources, codes, label)
	var se *SourceError
	for errors.As(err, &se) {
		// A database that maps but does not walk is left out, like a
		// missing one; the other still answers.
		problems = append(problems, se.Error())
		b.log().Warn("geo snapshot: GeoIP database left out", "err", se)
		src.drop(se.Database)
		data, err = Compile(src.Sources, codes, label)
	}
	if err != nil {
		return false, err
	}
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return false, fmt.Errorf("geo snapshot: %w", err)
	}
	b.status = Status{Codes: codes, Databases: src.names(), Problems: problems}
	b.log().Info("geo snapshot compiled", "codes", codes.String(), "databases", strings.Join(src.names(), ","),
		"bytes", len(data), "took", time.Since(began).Round(time.Millisecond))
	return true, nil
}

// database is one configured database file and what identifies its
// content for the label.
type database struct {
	name, path string
	id         string
}

// labelOf names the codes and the database files (by device, inode, size
// and modification time: a database is only ever replaced by rename).
func labelOf(codes Codes, dbs []*database) string {
	h := sha256.New()
	fmt.Fprintf(h, "geosnap 1\n%s\n", codes)
	for _, db := range dbs {
		db.id = "absent"
		if fi, err := os.Stat(db.path); db.path != "" && err == nil {
			db.id = fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano())
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				db.id += fmt.Sprintf(" %d %d", st.Dev, st.Ino)
			}
		}
		fmt.Fprintf(h, "%s %s %s\n", db.name, db.path, db.id)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// opened holds the readers of one build.
type opened struct {
	Sources
	city, country *mmdb.Reader
}

func (o *opened) close() {
	for _, r := range []*mmdb.Reader{o.city, o.country} {
		if r != nil {
			r.Close()
		}
	}
}

func (o *opened) drop(name string) {
	if name == "city" {
		o.Sources.City = nil
	} else {
		o.Sources.Country = nil
	}
}

func (o *opened) names() []string {
	var flags uint32
	if o.Sources.City != nil {
		flags |= FlagCity
	}
	if o.Sources.Country != nil {
		flags |= FlagCountry
	}
	return databases(flags)
}

// databases names the databases of a file's flags.
func databases(flags uint32) []string {
	var out []string
	if flags&FlagCity != 0 {
		out = append(out, "city")
	}
	if flags&FlagCountry != 0 {
		out = append(out, "country")
	}
	return out
}

// open maps the databases that exist and open; problems name the others.
func (b *Builder) open(dbs []*database) (*opened, []string) {
	o := &opened{}
	var problems []string
	for _, db := range dbs {
		if db.path == "" {
			continue
		}
		r, err := mmdb.Open(db.path)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s database %s: %v", db.name, db.path, err))
			continue
		}
		if db.name == "city" {
			o.city, o.Sources.City = r, r
		} else {
			o.country, o.Sources.Country = r, r
		}
	}
	return o, problems
}

// onDisk is what a snapshot file's header and records say.
type onDisk struct {
	label string
	flags uint32
	codes Codes
}

// readFile reads the header and set names of the snapshot at path.
func readFile(path string) (onDisk, error) {
	x, err := rangefile.ReadIndex(path, magic, true)
	if err != nil {
		return onDisk{}, fmt.Errorf("geo snapshot: %w", err)
	}
	names := make([]string, len(x.IDs))
	for i, id := range x.IDs {
		names[i] = nameOf(id)
	}
	return onDisk{x.Label, x.Flags, codesOf(names)}, nil
}
