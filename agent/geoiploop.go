package agent

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openflare/openflare-agent/agent/config"
	"github.com/openflare/openflare-agent/agent/geoip"
	"github.com/openflare/openflare-agent/agent/geosnap"
	"github.com/openflare/openflare-agent/agent/protocol"
)

// geoipDBs maintains the GeoLite2 databases the WAF's geo_match rules read
// (mmdb_path from mmdb_download_url, city_mmdb_path from
// city_mmdb_download_url), one geoip.Updater each, apart from applies and
// beats: a 70 MiB City download over a slow uplink must hold up neither.
//
// Both are kept current whenever their URL is set, whether or not a
// geo_match node is active, as upstream does (PROTOCOL 11). The conditional
// GET makes that one 304 a day per database; and the file must already be on
// disk when a config version with the first geo_match rule lands, because
// nginx workers read it directly and a rule whose database is still
// downloading would fail open for minutes. A download URL of "off" in
// agent.json turns a database's maintenance off (no download, no health
// event).
//
// The geo snapshot (agent/geosnap) the workers match geo_match rules
// against is rebuilt here too: when a database was replaced, at start, and
// after every apply (the apply itself builds it before its reload, keeping
// the previous rules' codes; this build drops codes no rule names any
// more).
type geoipDBs struct {
	ups  []*geoip.Updater
	snap *geosnap.Builder
	// rebuild asks the loop for a snapshot build.
	rebuild chan struct{}
	// landedCodes: an apply built the snapshot with its codes and the
	// previous ones (landed), and has not finished; settle then asks for
	// a build of the codes that stayed. Until then the loop's builds keep
	// the previous codes too: the previous workers still serve.
	landedCodes atomic.Bool
	log         *slog.Logger
}

// newGeoIP builds the updaters from the config; changed is called after a
// database was replaced and when a database's availability changes (the
// beat hook, so the health event is raised or cleared at once).
func newGeoIP(cfg *config.Config, log *slog.Logger, changed func()) *geoipDBs {
	g := &geoipDBs{
		snap:    &geosnap.Builder{Dir: cfg.RuntimeConfigDir, CityPath: cfg.CityMMDBPath, CountryPath: cfg.MMDBPath, Log: log},
		rebuild: make(chan struct{}, 1),
		log:     log,
	}
	var mu sync.Mutex
	last := map[string]bool{}
	for _, db := range []struct{ name, path, url, typ string }{
		{"country", cfg.MMDBPath, cfg.MMDBDownloadURL, "Country"},
		{"city", cfg.CityMMDBPath, cfg.CityMMDBDownloadURL, "City"},
	} {
		switch u := strings.ToLower(db.url); {
		case db.path == "" || u == "" || u == "off":
			// config.go maps "" to the default URL, so "off" is how
			// agent.json (and the e2e harness, which must not reach
			// github.com) turns a database's maintenance off.
			log.Info("geoip database not maintained", "db", db.name, "path", db.path)
			continue
		case !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://"):
			log.Warn("geoip download URL is not http(s); database not maintained", "db", db.name, "url", db.url)
			continue
		}
		g.ups = append(g.ups, &geoip.Updater{
			Name:     db.name,
			Path:     db.path,
			URL:      db.url,
			Type:     db.typ,
			Interval: cfg.MMDBUpdateInterval,
			Log:      log,
			Changed: func(path string) {
				log.Info("geoip database replaced", "db", db.name, "path", path)
				g.rebuildSoon()
			},
			Report: func(s geoip.Status) {
				mu.Lock()
				was, seen := last[db.name]
				last[db.name] = s.Present
				mu.Unlock()
				// A beat at once when a database goes missing or comes
				// back (and at start only when it is missing).
				if changed != nil && (seen && was != s.Present || !seen && !s.Present) {
					changed()
				}
			},
		})
	}
	return g
}

// loop runs every updater and the snapshot builds until ctx ends (started
// by Agent.Run; see agent.go).
func (g *geoipDBs) loop(ctx context.Context) {
	var wg sync.WaitGroup
	for _, u := range g.ups {
		wg.Go(func() { u.Run(ctx) })
	}
	g.rebuildSoon()
	// A database the owner replaced by hand (maintenance "off") is seen
	// within a minute while geo rules are active; the check is a stat of
	// each file when nothing changed.
	poll := time.NewTicker(time.Minute)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-g.rebuild:
			g.build(g.landedCodes.Load())
		case <-poll.C:
			if !g.snap.Status().Codes.Empty() {
				g.build(g.landedCodes.Load())
			}
		}
	}
}

// rebuildSoon asks the loop for a snapshot build without waiting for it.
func (g *geoipDBs) rebuildSoon() {
	select {
	case g.rebuild <- struct{}{}:
	default:
	}
}

// landed builds the snapshot for a version whose WAF config just landed,
// before nginx reloads (apply.Engine.Landed): a geo rule new in this
// version matches from the first request. A failure is logged, not
// fatal: the rule takes its false edge until the next build.
func (g *geoipDBs) landed(context.Context) {
	g.landedCodes.Store(true)
	g.build(true)
}

// settle runs after every apply: once one landed a WAF config, the
// snapshot is rebuilt for the config that stayed (the new one, or the
// previous one after a rollback).
func (g *geoipDBs) settle() {
	if g != nil && g.landedCodes.Swap(false) {
		g.rebuildSoon()
	}
}

func (g *geoipDBs) build(keep bool) {
	before := allocated()
	if _, err := g.snap.Build(keep); err != nil {
		g.log.Error("geo snapshot not built; geo_match rules keep the previous snapshot", "err", err)
	}
	// A walk of a full database allocates its range lists once.
	releaseMemory(before)
}

// events are the open geoip_unavailable conditions for a beat: one per
// database that is missing or does not open, with the last error.
func (g *geoipDBs) events(now int64) []protocol.HealthEvent {
	var out []protocol.HealthEvent
	for _, u := range g.ups {
		s := u.Status()
		if s.Present || s.Checked.IsZero() {
			continue
		}
		msg := "GeoIP " + u.Name + " database " + u.Path + " is unavailable; geo_match rules take their false edge"
		if s.Err != nil {
			msg += "; last attempt: " + strings.TrimPrefix(s.Err.Error(), geoip.ErrMissing.Error()+": ")
		}
		out = append(out, protocol.HealthEvent{
			EventType:       "geoip_unavailable",
			Severity:        "warning",
			Message:         msg,
			TriggeredAtUnix: now,
			Metadata:        map[string]string{"database": u.Name, "path": u.Path, "checked": s.Checked.UTC().Format(time.RFC3339)},
		})
	}
	// Rules that cannot match anything say so even when no database is
	// maintained here (URLs "off", files placed by hand).
	if st := g.snap.Status(); !st.Codes.Empty() && len(st.Databases) == 0 && len(out) == 0 {
		msg := "geo_match rules are active but no GeoIP database is usable; they take their false edge"
		if len(st.Problems) > 0 {
			msg += ": " + strings.Join(st.Problems, "; ")
		}
		out = append(out, protocol.HealthEvent{
			EventType:       "geoip_unavailable",
			Severity:        "warning",
			Message:         msg,
			TriggeredAtUnix: now,
			Metadata:        map[string]string{"database": "all", "codes": st.Codes.String()},
		})
	}
	return out
}
