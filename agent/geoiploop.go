package agent

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/openflare/openflare-agent/agent/config"
	"github.com/openflare/openflare-agent/agent/geoip"
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
type geoipDBs struct {
	ups []*geoip.Updater
}

// newGeoIP builds the updaters from the config; changed is called after a
// database was replaced and when a database's availability changes (the
// beat hook, so the health event is raised or cleared at once).
func newGeoIP(cfg *config.Config, log *slog.Logger, changed func()) *geoipDBs {
	g := &geoipDBs{}
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
			// Nothing compiles from the file yet: the data plane's geo
			// snapshot (issue 15, data-plane part) is rebuilt here.
			Changed: func(path string) { log.Info("geoip database replaced", "db", db.name, "path", path) },
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

// loop runs every updater until ctx ends (started by Agent.Run as
// geoipLoop; see agent.go).
func (g *geoipDBs) loop(ctx context.Context) {
	if g == nil {
		return
	}
	var wg sync.WaitGroup
	for _, u := range g.ups {
		wg.Go(func() { u.Run(ctx) })
	}
	wg.Wait()
}

// events are the open geoip_unavailable conditions for a beat: one per
// database that is missing or does not open, with the last error.
func (g *geoipDBs) events(now int64) []protocol.HealthEvent {
	if g == nil {
		return nil
	}
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
	return out
}
