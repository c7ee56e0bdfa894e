package luaassets

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"openflare/agent/geosnap"
	"openflare/testing/geodb"
)

// Client addresses of the geo tests (all local in the test namespace) and
// what the test databases say of them.
const (
	caClient      = "127.1.0.5"  // City: US, region US-CA
	nyClient      = "127.3.0.5"  // City: US, region US-NY
	deClient      = "127.2.0.5"  // City: DE; Country: FR (City wins)
	countryClient = "127.9.0.5"  // Country only: FR
	nowhereClient = "127.40.0.5" // in neither database
)

func geoCityNets(caCountry string) []geodb.Network {
	return []geodb.Network{
		{Prefix: netip.MustParsePrefix("127.1.0.0/16"), Country: caCountry, Subdivision: "CA"},
		{Prefix: netip.MustParsePrefix("127.3.0.0/16"), Country: "US", Subdivision: "NY"},
		{Prefix: netip.MustParsePrefix("127.2.0.0/16"), Country: "DE", Subdivision: "BY"},
		{Prefix: netip.MustParsePrefix("2001:db8::/32"), Country: "US", Subdivision: "CA"},
	}
}

var geoCountryNets = []geodb.Network{
	{Prefix: netip.MustParsePrefix("127.2.0.0/16"), Country: "FR"},
	{Prefix: netip.MustParsePrefix("127.9.0.0/16"), Country: "FR"},
}

// geoGraph is start → geo_match(config), true → onTrue, false → onFalse,
// each "allow" or a block(403, body).
func geoGraph(config obj, body string, blockOnTrue bool) obj {
	onTrue, onFalse := "block", "allow"
	if !blockOnTrue {
		onTrue, onFalse = "allow", "block"
	}
	return graph(obj{
		"start": startNode("g"),
		"g":     branchNode("geo_match", config, onTrue, onFalse),
		"block": blockNode(403, body),
		"allow": allowNode(),
	})
}

// geoRig serves deny-us.test (block US), allow-de.test (allow DE only),
// region.test (block US-CA) and fr.test (block FR), with the databases at
// the paths the agent would use and the snapshot built by geosnap.
type geoRig struct {
	*rig
	city, country string
	builder       *geosnap.Builder
}

func newGeoRig(t *testing.T) *geoRig {
	if why := geodb.Available(); why != "" {
		t.Skip(why)
	}
	r := newRig(t)
	g := &geoRig{rig: r, city: filepath.Join(r.runtimeDir, "..", "city.mmdb"), country: filepath.Join(r.runtimeDir, "..", "country.mmdb")}
	g.builder = &geosnap.Builder{Dir: r.runtimeDir, CityPath: g.city, CountryPath: g.country}
	r.writeWAF(obj{
		"rule_groups": []obj{
			group(2, false, geoGraph(obj{"countries": []string{"us"}}, "geo", true)),
			group(3, false, geoGraph(obj{"countries": []string{"DE"}}, "not de", false)),
			group(4, false, geoGraph(obj{"regions": []string{"US-CA"}}, "region", true)),
			group(5, false, geoGraph(obj{"countries": []any{"FR", 7, nil}, "regions": "x"}, "fr", true)),
		},
		"bindings": []obj{binding("deny-us", 2), binding("allow-de", 3), binding("region", 4), binding("fr", 5)},
	})
	var servers strings.Builder
	for _, site := range []string{"deny-us", "allow-de", "region", "fr"} {
		servers.WriteString(r.wafServer(site))
	}
	// Matching an IPv6 candidate, which the IPv4-only listeners cannot
	// send: /match?ip=…&c=…&r=…
	servers.WriteString(`
    server {
        listen 80;
        server_name probe.test;
        location = /match {
            content_by_lua_block {
                local args = ngx.req.get_uri_args()
                local cand = require("waf.ipmatch").parse(args.ip) or false
                ngx.print(tostring(require("waf.geo").match({ countries = { args.c }, regions = { args.r } }, cand)))
            }
        }
    }
`)
	r.start(servers.String())
	return g
}

func (g *geoRig) writeDB(path string, o geodb.Options, nets []geodb.Network) {
	g.t.Helper()
	// Written beside and renamed over, as agent/geoip installs a database.
	tmp := path + ".new"
	if err := geodb.Write(tmp, o, nets); err != nil {
		g.t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		g.t.Fatal(err)
	}
}

// build compiles the snapshot and, when that wrote one, waits until every
// worker has adopted it: a request answers by whichever worker accepts it,
// and the subtests that ask one question once must not meet a worker still
// on the previous snapshot.
func (g *geoRig) build() {
	g.t.Helper()
	const adopted = "adopted geo snapshot "
	before := g.countLines(adopted)
	changed, err := g.builder.Build(false)
	if err != nil {
		g.t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(g.runtimeDir, geosnap.Name)); !changed || err != nil {
		return
	}
	g.waitAdopted(adopted, before+len(g.nginx.WorkerPIDs()))
}

// statuses returns, for each client, the status of deny-us, allow-de,
// region and fr.
func (g *geoRig) statuses(client string) []int {
	g.t.Helper()
	var out []int
	for _, site := range []string{"deny-us", "allow-de", "region", "fr"} {
		out = append(out, g.get(client, site+".test", "/").status)
	}
	return out
}

// waitStatuses waits until every worker answers as want (a new snapshot is
// adopted within a tick or two, without a reload).
func (g *geoRig) waitStatuses(client string, want []int) {
	g.t.Helper()
	deadline := time.Now().Add(snapshotPickup)
	for {
		got := g.statuses(client)
		for i := 0; i < 3 && slices.Equal(got, want); i++ {
			got = g.statuses(client)
		}
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("from %s: deny-us, allow-de, region, fr answered %v after %v, want %v", client, got, snapshotPickup, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestGeoMatch(t *testing.T) {
	g := newGeoRig(t)
	workers := g.nginx.WorkerPIDs()
	slices.Sort(workers)

	t.Run("no database: every geo node takes its false edge", func(t *testing.T) {
		// DATAPLANE 11 row 16, with no snapshot yet and then with one
		// compiled without any database.
		g.waitStatuses(caClient, []int{200, 403, 200, 200})
		g.build()
		if st := g.builder.Status(); len(st.Databases) != 0 {
			t.Fatalf("databases %v, want none", st.Databases)
		}
		g.waitStatuses(caClient, []int{200, 403, 200, 200})
		if n := g.countLines("geo_match takes its false edge"); n == 0 || n > 2 {
			t.Errorf("%d warnings about the missing database, want one a minute:\n%s", n, g.nginx.ErrorLog())
		}
	})

	g.writeDB(g.city, geodb.Options{Type: "GeoLite2-City", Epoch: 1_700_000_000}, geoCityNets("US"))
	g.writeDB(g.country, geodb.Options{Type: "GeoLite2-Country", Epoch: 1_700_000_000}, geoCountryNets)
	g.build()

	for _, c := range []struct {
		name, client string
		want         []int // deny-us, allow-de, region, fr
	}{
		{"City country and region", caClient, []int{403, 403, 403, 200}},
		{"City country, other region", nyClient, []int{403, 403, 200, 200}},
		{"City wins over Country", deClient, []int{200, 200, 200, 200}},
		{"Country where City has no data", countryClient, []int{200, 403, 200, 403}},
		{"in no database", nowhereClient, []int{200, 403, 200, 200}},
	} {
		t.Run(c.name, func(t *testing.T) { g.waitStatuses(c.client, c.want) })
	}

	t.Run("IPv6 and IPv4-mapped candidates", func(t *testing.T) {
		for _, c := range []struct{ ip, country, region, want string }{
			{"2001:db8::1", "US", "", "true"},
			{"2001:db8::1", "", "US-CA", "true"},
			{"2001:0db8:0:0::9", "us", "", "true"},
			{"2001:db9::1", "US", "", "false"},
			{"::ffff:127.9.0.5", "FR", "", "true"},
			{"::ffff:127.1.0.5", "", "US-CA", "true"},
			{"127.9.0.5", "", "FR-X", "false"},
		} {
			got := g.get(otherIP, "probe.test", "/match?ip="+c.ip+"&c="+c.country+"&r="+c.region)
			if got.status != 200 || got.body != c.want {
				t.Errorf("%s country %q region %q: %d %q, want %s", c.ip, c.country, c.region, got.status, got.body, c.want)
			}
		}
	})

	t.Run("database replaced while serving", func(t *testing.T) {
		// 127.1.0.0/16 moves from the US to Germany: no reload, the next
		// build and a tick later every worker answers the new way.
		g.writeDB(g.city, geodb.Options{Type: "GeoLite2-City", Epoch: 1_700_100_000}, geoCityNets("DE"))
		g.build()
		g.waitStatuses(caClient, []int{200, 200, 200, 200})
		after := g.nginx.WorkerPIDs()
		slices.Sort(after)
		if !slices.Equal(workers, after) {
			t.Errorf("worker pids changed from %v to %v: the snapshot must be picked up without a reload", workers, after)
		}
	})

	t.Run("database removed", func(t *testing.T) {
		os.Remove(g.city)
		os.Remove(g.country)
		g.build()
		g.waitStatuses(countryClient, []int{200, 403, 200, 200})
	})
}
