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

	"openflare/internal/atomicfile"
	"openflare/internal/mmdb"
	"openflare/internal/rangefile"
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
	// config is the landed WAF config's codes and the stamp of the file
	// they were read from: a build when nothing changed (the poll while
	// rules are active) stats it rather than decoding it again.
	config struct {
		stamp string
		codes Codes
	}
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

// landedCodes are the codes of the landed waf_config.json.
func (b *Builder) landedCodes() (Codes, error) {
	path := filepath.Join(b.Dir, WAFConfigFile)
	st := stamp(path)
	if st == b.config.stamp {
		return b.config.codes, nil
	}
	codes := Codes{}
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		if codes, err = CodesOf(raw); err != nil {
			// The workers fail closed on such a file; no geo rule runs.
			codes = Codes{}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return Codes{}, fmt.Errorf("geo snapshot: %w", err)
	}
	b.config.stamp, b.config.codes = st, codes
	return codes, nil
}

func (b *Builder) build(keep bool) (bool, error) {
	codes, err := b.landedCodes()
	if err != nil {
		return false, err
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

	dbs := []database{{name: "city", path: b.CityPath}, {name: "country", path: b.CountryPath}}
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

// database is one configured database file.
type database struct {
	name, path string
}

// compileVersion is part of every label: raise it when Compile makes
// another file from the same codes and databases, so that an upgraded
// agent does not take an old file for up to date.
const compileVersion = 1

// labelOf names the codes and the database files (by their stamps).
func labelOf(codes Codes, dbs []database) string {
	h := sha256.New()
	fmt.Fprintf(h, "geosnap %d\n%s\n", compileVersion, codes)
	for _, db := range dbs {
		fmt.Fprintf(h, "%s %s %s\n", db.name, db.path, stamp(db.path))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// stamp identifies a file's content by its size, modification time,
// device and inode ("absent" when there is none): the agent, the
// updater and the owner replace these files by rename.
func stamp(path string) string {
	fi, err := os.Stat(path)
	if path == "" || err != nil {
		return "absent"
	}
	id := fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano())
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id += fmt.Sprintf(" %d %d", st.Dev, st.Ino)
	}
	return id
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
func (b *Builder) open(dbs []database) (*opened, []string) {
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
