package agent

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"openflare/agent/config"
	"openflare/agent/geoip"
	"openflare/agent/geosnap"
	"openflare/internal/mailbox"
)

// geoipDBs maintains the GeoLite2 databases the WAF's geo_match rules read
// (mmdb_path from mmdb_download_url, city_mmdb_path from
// city_mmdb_download_url), one geoip.Refresher each, apart from applies and
// beats: a 70 MiB City download over a slow uplink must hold up neither.
//
// Both are kept current whenever their URL is set, whether or not a
// geo_match node is active, as the reference agent does (PROTOCOL 11). The
// conditional GET makes that one 304 a day per database; and the file must
// already be on disk when a config version with the first geo_match rule
// lands, because nginx workers read it directly and a rule whose database
// is still downloading would fail open for minutes. A download URL of "off"
// in agent.json turns a database's maintenance off (no download). Only the
// snapshot decides the health event: a database that cannot be had is
// reported while an active rule needs it, and never otherwise.
//
// The geo snapshot (agent/geosnap) the workers match geo_match rules
// against is rebuilt here too: when a database was replaced, at start, and
// after every apply (the apply itself builds it before its reload, keeping
// the previous rules' codes; this build drops codes no rule names any
// more).
type geoipDBs struct {
	ups  []*geoip.Refresher
	snap *geosnap.Builder
	// rebuild asks the loop for a snapshot build.
	rebuild mailbox.Wake
	// landedCodes: an apply built the snapshot with its codes and the
	// previous ones (landed), and has not finished; settle then asks for
	// a build of the codes that stayed. Until then the loop's builds keep
	// the previous codes too: the previous workers still serve.
	landedCodes atomic.Bool
	// published tells the running workers of a snapshot the loop built
	// (Agent.publishSnapshots); nil in tests.
	published func()
	log       *slog.Logger
}

// newGeoIP builds the updaters from the config.
func newGeoIP(cfg *config.Config, log *slog.Logger) *geoipDBs {
	g := &geoipDBs{
		snap:    &geosnap.Builder{Dir: cfg.RuntimeConfigDir, CityPath: cfg.CityMMDBPath, CountryPath: cfg.MMDBPath, Log: log},
		rebuild: mailbox.NewWake(),
		log:     log,
	}
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
		g.ups = append(g.ups, &geoip.Refresher{
			Name:     db.name,
			Path:     db.path,
			URL:      db.url,
			Type:     db.typ,
			Interval: cfg.MMDBUpdateInterval,
			Log:      log,
			Changed: func(path string) {
				log.Info("geoip database replaced", "db", db.name, "path", path)
				g.rebuild.Notify()
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
	g.rebuild.Notify()
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
			g.rebuildAndPublish()
		case <-poll.C:
			if !g.snap.Status().Codes.Empty() {
				g.rebuildAndPublish()
			}
		}
	}
}

// landed builds the snapshot for a version whose WAF config just landed,
// before nginx reloads (apply.Engine.OnLanded): a geo rule new in this
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
		g.rebuild.Notify()
	}
}

// build reports whether the snapshot file changed.
func (g *geoipDBs) build(keep bool) bool {
	before := allocated()
	changed, err := g.snap.Build(keep)
	if err != nil {
		g.log.Error("geo snapshot not built; geo_match rules keep the previous snapshot", "err", err)
	}
	// A walk of a full database allocates its range lists once.
	releaseMemory(before)
	return changed && err == nil
}

// rebuildAndPublish is the loop's build, which the running workers take
// at once. An apply's build (landed) is not published: the workers that
// take it are the reload's, which read the file when they start.
func (g *geoipDBs) rebuildAndPublish() {
	if g.build(g.landedCodes.Load()) && g.published != nil {
		g.published()
	}
}

// unavailable is the geoip_unavailable message, "" while no active
// geo_match rule lacks a database: each database lacking, with why (the
// snapshot build's problem, the last download's error where the agent
// maintains it).
func (g *geoipDBs) unavailable() string {
	st := g.snap.Status()
	var reasons []string
	for _, name := range geoLack(st) {
		path := g.snap.CityPath
		if name == "country" {
			path = g.snap.CountryPath
		}
		why := name + " database " + path + " is missing or unusable"
		for _, p := range st.Problems {
			if strings.HasPrefix(p, name+" ") {
				why = p
			}
		}
		for _, u := range g.ups {
			if s := u.Status(); u.Name == name && !s.Present && s.Err != nil {
				why += "; last download: " + strings.TrimPrefix(s.Err.Error(), geoip.ErrMissing.Error()+": ")
			}
		}
		reasons = append(reasons, why)
	}
	if reasons == nil {
		return ""
	}
	return "geo_match rules on " + st.Codes.String() + " take their false edge: " + strings.Join(reasons, "; ")
}

// geoLack names the databases an active geo_match rule needs and the
// snapshot was compiled without, so that rule takes its false edge: region
// codes need City, country codes City or Country. A node without geo
// rules lacks nothing, whatever its databases (one without access to the
// download host included).
func geoLack(st geosnap.Status) []string {
	var lack []string
	none := len(st.Databases) == 0
	if len(st.Codes.Regions) > 0 && !slices.Contains(st.Databases, "city") || len(st.Codes.Countries) > 0 && none {
		lack = append(lack, "city")
	}
	if len(st.Codes.Countries) > 0 && none {
		lack = append(lack, "country")
	}
	return lack
}
