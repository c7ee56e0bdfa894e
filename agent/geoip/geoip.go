// Package geoip keeps the GeoLite2 databases the WAF's geo_match rules read
// (mmdb_path, city_mmdb_path) current from their download URLs, and makes
// sure a bad download never replaces a good database.
//
// Each database has its own Refresher. An update is a conditional GET
// (If-None-Match / If-Modified-Since from a small JSON sidecar,
// <path>.download.json), so an unchanged database costs one 304 a day. A new
// body is streamed, with a size cap and a stall watchdog rather than one
// short deadline (a 70 MiB City database on a slow uplink must get through),
// to <path>.download beside the target (0644: nginx workers read the
// database), fsynced, and checked before it is used:
//
//   - it opens with internal/mmdb and passes its Verify (tree and data);
//   - its database type contains "Country" or "City" as the Refresher expects;
//   - its build epoch is not older than the current file's;
//   - the first and last networks of its tree look up without error and land
//     on the records the walk reported.
//
// Only then is it renamed over the target and the directory fsynced. The
// database is mapped read-only by its readers, so it is only ever replaced by
// rename, never rewritten in place. A rejected download is removed and the
// reason returned (wrapping ErrRejected); the old file stays byte-identical.
//
// Unlike upstream (PROTOCOL 11), which re-downloads both databases
// unconditionally every interval without checking them, nothing here is
// trusted before it has been validated.
package geoip

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"openflare/agent/backoff"
	"openflare/internal/atomicfile"
	"openflare/internal/download"
	"openflare/internal/mmdb"
)

// Defaults of the Refresher's limits.
const (
	// DefaultMaxSize caps a download: GeoLite2 City is about 70 MiB, and
	// internal/mmdb maps nothing larger anyway.
	DefaultMaxSize = mmdb.MaxFileSize
	// DefaultHeaderTimeout bounds connecting, TLS and waiting for the
	// response headers.
	DefaultHeaderTimeout = 60 * time.Second
	// DefaultStallTimeout ends a download that received nothing for this long.
	DefaultStallTimeout = 90 * time.Second
	// DefaultMaxDuration is a last-resort bound on one whole download:
	// 256 MiB at 40 KiB/s still fits.
	DefaultMaxDuration = 2 * time.Hour
	// DefaultRetryMin and DefaultRetryMax bound the backoff after a failure.
	DefaultRetryMin = time.Minute
	DefaultRetryMax = time.Hour
)

// ErrRejected is wrapped by the error of a download that was fetched but not
// used: too large, truncated, not a valid database, or the wrong one.
var ErrRejected = errors.New("geoip: download rejected")

// ErrMissing is wrapped by Status.Err while the target file is missing or
// unusable.
var ErrMissing = errors.New("geoip: database unavailable")

// Refresher keeps one database file current.
type Refresher struct {
	Name string // for logs and health messages: "country", "city"
	Path string // the database file (mmdb_path, city_mmdb_path)
	URL  string // its download URL; empty disables updates
	// Type is what the database type must contain: "Country" or "City".
	Type string

	// Client sends the requests; nil uses one with the header timeout
	// below and the proxy from the environment.
	Client        *http.Client
	MaxSize       int64         // DefaultMaxSize when 0
	HeaderTimeout time.Duration // DefaultHeaderTimeout when 0
	StallTimeout  time.Duration // DefaultStallTimeout when 0
	MaxDuration   time.Duration // DefaultMaxDuration when 0
	// Interval between checks after a success; Retry spaces the attempts
	// after a failure (DefaultRetryMin..min(Interval, DefaultRetryMax) when
	// zero).
	Interval time.Duration
	Retry    backoff.Backoff
	// Changed is called after a new database was renamed into place, so its
	// users (the data plane's geo snapshot) can pick it up.
	Changed func(path string)
	// Report is called by Run after every attempt, with the new status.
	Report func(Status)
	Log    *slog.Logger

	mu     sync.Mutex
	status Status
	client *http.Client
}

// Status is what Run last learned about the database.
type Status struct {
	Present bool  // the file at Path opens and is of the right type
	Err     error // the last attempt's error; nil after a success or a 304
	// Checked is when the last attempt ended.
	Checked time.Time
}

// Result tells what an Update did.
type Result int

const (
	// Unchanged: the server answered 304, or sent the same bytes again.
	Unchanged Result = iota
	// Replaced: a new database was renamed into place.
	Replaced
)

func (r Result) String() string {
	if r == Replaced {
		return "replaced"
	}
	return "unchanged"
}

// sidecar is <path>.download.json: the validators of the file in place and
// enough about it to know they still describe it.
type sidecar struct {
	URL          string `json:"url"`
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	Size         int64  `json:"size"`
	BuildEpoch   uint64 `json:"build_epoch"`
	SHA256       string `json:"sha256"`
	CheckedUnix  int64  `json:"checked_unix"`
}

func (r *Refresher) sidecarPath() string { return r.Path + ".download.json" }
func (r *Refresher) tempPath() string    { return r.Path + ".download" }

func (r *Refresher) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

func orDefault[T int64 | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

func (r *Refresher) httpClient() *http.Client {
	if r.Client != nil {
		return r.Client
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client == nil {
		ht := orDefault(r.HeaderTimeout, DefaultHeaderTimeout)
		r.client = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: ht, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   ht,
			ResponseHeaderTimeout: ht,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          1,
			IdleConnTimeout:       30 * time.Second,
		}}
	}
	return r.client
}

// current describes the file in place; ok is false when it is missing or
// does not open as a database of the expected type.
type current struct {
	ok    bool
	size  int64
	epoch uint64
	err   error
}

func (r *Refresher) inspect() current {
	fi, err := os.Stat(r.Path)
	if err != nil {
		return current{err: err}
	}
	db, err := mmdb.Open(r.Path)
	if err != nil {
		return current{err: err}
	}
	defer db.Close()
	md := db.Metadata()
	if !strings.Contains(md.DatabaseType, r.Type) {
		return current{err: fmt.Errorf("database type %q, want one containing %q", md.DatabaseType, r.Type)}
	}
	return current{ok: true, size: fi.Size(), epoch: md.BuildEpoch}
}

func (r *Refresher) readSidecar() (sidecar, bool) {
	var s sidecar
	b, err := os.ReadFile(r.sidecarPath())
	if err != nil || json.Unmarshal(b, &s) != nil {
		return sidecar{}, false
	}
	return s, true
}

func (r *Refresher) writeSidecar(s sidecar) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(r.sidecarPath(), append(b, '\n'), 0o644)
}

// Check inspects the file in place without the network: nil when it opens
// as a database of the expected type, else an error wrapping ErrMissing.
func (r *Refresher) Check() error {
	if c := r.inspect(); !c.ok {
		return fmt.Errorf("%w: %s database %s: %v", ErrMissing, r.Name, r.Path, c.err)
	}
	return nil
}

// Update fetches the database once: a conditional GET, and when a new body
// comes, validation and the rename. A rejected download leaves the file in
// place untouched and returns an error wrapping ErrRejected.
func (r *Refresher) Update(ctx context.Context) (Result, error) {
	if r.URL == "" {
		return Unchanged, errors.New("geoip: no download URL")
	}
	cur := r.inspect()
	side, haveSide := r.readSidecar()
	// The validators count only while they describe the file in place: a
	// file deleted or replaced by hand must be fetched again, not 304'd.
	valid := haveSide && cur.ok && side.URL == r.URL && side.Size == cur.size && side.BuildEpoch == cur.epoch

	maxDur := orDefault(r.MaxDuration, DefaultMaxDuration)
	ctx, cancelTimeout := context.WithTimeoutCause(ctx, maxDur, fmt.Errorf("download took longer than %v", maxDur))
	defer cancelTimeout()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL, nil)
	if err != nil {
		return Unchanged, err
	}
	if valid {
		if side.ETag != "" {
			req.Header.Set("If-None-Match", side.ETag)
		}
		if side.LastModified != "" {
			req.Header.Set("If-Modified-Since", side.LastModified)
		}
	}
	maxSize := orDefault(r.MaxSize, DefaultMaxSize)
	t, err := download.Get(r.httpClient(), req, download.Limits{Max: maxSize, Stall: orDefault(r.StallTimeout, DefaultStallTimeout)})
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redact(ue.URL)
		}
		return Unchanged, r.downloadError(err)
	}
	defer t.Close()
	now := time.Now()
	switch {
	case t.StatusCode == http.StatusNotModified && valid:
		side.CheckedUnix = now.Unix()
		if err := r.writeSidecar(side); err != nil {
			r.log().Warn("geoip: record check time", "db", r.Name, "err", err)
		}
		return Unchanged, nil
	case t.StatusCode != http.StatusOK:
		return Unchanged, fmt.Errorf("geoip: %s: GET %s: %s", r.Name, redact(r.URL), t.Status)
	}

	dir := filepath.Dir(r.Path)
	if err := atomicfile.MkdirAll(dir, 0o755); err != nil {
		return Unchanged, err
	}
	tmp := r.tempPath()
	os.Remove(tmp) // a leftover of a crash (or of upstream's agent)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return Unchanged, err
	}
	keep := false
	defer func() {
		if !keep {
			f.Close()
			os.Remove(tmp)
		}
	}()
	// Exactly 0644 whatever the umask: nginx workers read the database.
	if err := f.Chmod(0o644); err != nil {
		return Unchanged, err
	}

	h := sha256.New()
	n, err := t.Copy(io.MultiWriter(f, h))
	if err != nil {
		return Unchanged, r.downloadError(err)
	}
	if err := f.Sync(); err != nil {
		return Unchanged, err
	}
	if err := f.Close(); err != nil {
		return Unchanged, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	next := sidecar{
		URL:          r.URL,
		ETag:         t.Header.Get("ETag"),
		LastModified: t.Header.Get("Last-Modified"),
		Size:         n,
		SHA256:       sum,
		CheckedUnix:  now.Unix(),
	}
	// A server without validators sends the same file every time: keep
	// the one in place rather than wear the flash with a rename.
	if valid && side.SHA256 == sum && side.Size == n {
		next.BuildEpoch = side.BuildEpoch
		if err := r.writeSidecar(next); err != nil {
			r.log().Warn("geoip: record check time", "db", r.Name, "err", err)
		}
		return Unchanged, nil
	}
	var minEpoch uint64
	if cur.ok {
		minEpoch = cur.epoch
	}
	epoch, err := validate(tmp, r.Type, minEpoch)
	if err != nil {
		return Unchanged, fmt.Errorf("%w: %s: %v", ErrRejected, r.Name, err)
	}
	next.BuildEpoch = epoch
	if err := os.Rename(tmp, r.Path); err != nil {
		return Unchanged, err
	}
	keep = true
	if err := atomicfile.SyncDir(dir); err != nil {
		r.log().Warn("geoip: fsync directory", "dir", dir, "err", err)
	}
	if err := r.writeSidecar(next); err != nil {
		r.log().Warn("geoip: record download validators", "db", r.Name, "err", err)
	}
	if r.Changed != nil {
		r.Changed(r.Path)
	}
	return Replaced, nil
}

// downloadError names the database in a failed download's error; one of
// the wrong length was fetched but is not used (ErrRejected).
func (r *Refresher) downloadError(err error) error {
	if errors.Is(err, download.ErrSize) {
		return fmt.Errorf("%w: %s: %w", ErrRejected, r.Name, err)
	}
	return fmt.Errorf("geoip: %s: %w", r.Name, err)
}

// validate checks a downloaded file before it may replace the database:
// it opens and verifies, its type contains want, its build epoch is at
// least minEpoch, and lookups of the first and last networks of its tree
// land on the records the walk reported. It returns the build epoch.
func validate(path, want string, minEpoch uint64) (uint64, error) {
	r, err := mmdb.Open(path)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	if err := r.Verify(); err != nil {
		return 0, err
	}
	md := r.Metadata()
	if !strings.Contains(md.DatabaseType, want) {
		return 0, fmt.Errorf("database type %q, want one containing %q", md.DatabaseType, want)
	}
	if md.BuildEpoch < minEpoch {
		return 0, fmt.Errorf("build epoch %d (%s) is older than the current database's %d (%s)",
			md.BuildEpoch, epochTime(md.BuildEpoch), minEpoch, epochTime(minEpoch))
	}
	type sample struct {
		p   netip.Prefix
		off mmdb.Offset
	}
	var samples []sample
	var last sample
	count := 0
	err = r.Networks(func(p netip.Prefix, off mmdb.Offset) bool {
		if len(samples) < 4 {
			samples = append(samples, sample{p, off})
		}
		last = sample{p, off}
		count++
		return true
	})
	if err != nil {
		return 0, err
	}
	if count == 0 {
		return 0, errors.New("the database has no networks")
	}
	samples = append(samples, last)
	found := 0
	for _, s := range samples {
		for _, ip := range []netip.Addr{s.p.Addr(), lastAddr(s.p)} {
			_, off, ok, err := r.LookupNetwork(ip)
			if err != nil {
				return 0, fmt.Errorf("lookup %s: %w", ip, err)
			}
			if !ok || off != s.off {
				return 0, fmt.Errorf("lookup %s does not find the record of %s", ip, s.p)
			}
			cc, _, err := r.CountryAndSubdivision(ip)
			if err != nil {
				return 0, fmt.Errorf("country of %s: %w", ip, err)
			}
			if cc != "" {
				found++
			}
		}
	}
	if found == 0 {
		// Every GeoLite2 record of the first networks has a country; a
		// database where none has one is not what the WAF expects.
		return 0, fmt.Errorf("none of %d sampled networks has a country code", len(samples))
	}
	return md.BuildEpoch, nil
}

// lastAddr is the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		for j := 0; j < 8; j++ {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func epochTime(e uint64) string {
	if e > 1<<40 {
		return "?"
	}
	return time.Unix(int64(e), 0).UTC().Format(time.RFC3339)
}

// redact drops a URL's query and user info from messages (a signed URL's
// token does not belong in logs or heartbeats).
func redact(s string) string {
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, "://"); i >= 0 {
		if j := strings.Index(s[i+3:], "@"); j >= 0 && !strings.Contains(s[i+3:i+3+j], "/") {
			s = s[:i+3] + s[i+4+j:]
		}
	}
	return s
}

// Status returns what the last attempt of Run found.
func (r *Refresher) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

func (r *Refresher) setStatus(s Status) {
	r.mu.Lock()
	r.status = s
	r.mu.Unlock()
	if r.Report != nil {
		r.Report(s)
	}
}

// Run keeps the database current until ctx ends. A missing or unusable
// database is fetched at once (and reported in the Status until it is
// there); a present one is checked an Interval after its last check
// (recorded in the sidecar, so restarts do not cause downloads). After a
// failure the next attempt follows the backoff.
func (r *Refresher) Run(ctx context.Context) {
	interval := orDefault(r.Interval, 24*time.Hour)
	if r.Retry.Min <= 0 {
		r.Retry.Min = DefaultRetryMin
	}
	if r.Retry.Max <= 0 {
		r.Retry.Max = min(max(interval, r.Retry.Min), DefaultRetryMax)
	}
	var wait time.Duration
	if err := r.Check(); err != nil {
		r.log().Warn("geoip: database missing; fetching it", "db", r.Name, "path", r.Path, "err", err)
		r.setStatus(Status{Err: err, Checked: time.Now()})
	} else {
		r.setStatus(Status{Present: true, Checked: time.Now()})
		if s, ok := r.readSidecar(); ok && s.URL == r.URL {
			wait = min(max(time.Until(time.Unix(s.CheckedUnix, 0).Add(interval)), 0), interval)
		}
	}
	for {
		if wait > 0 && !backoff.Sleep(ctx, wait) {
			return
		}
		if ctx.Err() != nil {
			return
		}
		res, err := r.Update(ctx)
		if ctx.Err() != nil {
			return
		}
		present := r.Check() == nil
		st := Status{Present: present, Err: err, Checked: time.Now()}
		switch {
		case err != nil:
			args := []any{"db", r.Name, "url", redact(r.URL), "err", err}
			if errors.Is(err, ErrRejected) {
				r.log().Error("geoip: download rejected; the database in place is kept", args...)
			} else {
				r.log().Warn("geoip: update failed", args...)
			}
			wait = r.Retry.Next()
		case !present:
			// Updated, yet the file does not open: should not happen, but
			// retry rather than wait a day.
			st.Err = r.Check()
			wait = r.Retry.Next()
		default:
			if res == Replaced {
				r.log().Info("geoip: database updated", "db", r.Name, "path", r.Path)
			}
			r.Retry.Reset()
			wait = interval
		}
		if !present && st.Err != nil && !errors.Is(st.Err, ErrMissing) {
			st.Err = fmt.Errorf("%w: %w", ErrMissing, st.Err)
		}
		r.setStatus(st)
	}
}
