package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/controlplane"
	"openflare/testing/geodb"
	"openflare/testing/testsupport"
)

// geoGroup blocks the countries listed with 451 "geo blocked".
func geoGroup(countries string) controlplane.RuleGroup {
	return controlplane.RuleGroup{ID: 2, Name: "geo", Enabled: true, Graph: controlplane.Graph{Entry: "start", Nodes: map[string]controlplane.GraphNode{
		"start": {Type: "start", Next: map[string]string{"next": "geo"}},
		"geo":   {Type: "geo_match", Config: json.RawMessage(`{"countries":` + countries + `}`), Next: map[string]string{"true": "block", "false": "allow"}},
		"block": {Type: "block", Config: json.RawMessage(`{"status_code":451,"response_body":"geo blocked"}`)},
		"allow": {Type: "allow"},
	}}}
}

// geoClient is in 127.0.0.8/29, the one network of the test databases.
const geoClient = "127.0.0.9"

func geoStatus(t *testing.T) int {
	t.Helper()
	r := request("GET", "http", "app.test", "/", geoClient)
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.status
}

func waitGeoStatus(t *testing.T, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for got := geoStatus(t); got != want; got = geoStatus(t) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s answered %d, want %d", what, geoClient, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cityDB is a City database that puts geoClient's network in country.
func cityDB(t *testing.T, country string, epoch int64) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), country+".mmdb")
	err := geodb.Write(path, geodb.Options{Type: "GeoLite2-City", Epoch: epoch},
		[]geodb.Network{{Prefix: netip.MustParsePrefix("127.0.0.8/29"), Country: country, Subdivision: "CA"}})
	if err != nil {
		t.Fatal(err)
	}
	return []byte(testsupport.ReadFile(t, path))
}

// geo_match through the whole agent: the City database comes from the
// download URL (a loopback server here), is compiled into the geo
// snapshot, and a newer database replaces it without a reload; a rule new
// in a version matches from the first request after that version applied.
func TestGeoMatchThroughAgent(t *testing.T) {
	if why := geodb.Available(); why != "" {
		t.Skip(why)
	}
	us, de := cityDB(t, "US", 1_700_000_000), cityDB(t, "DE", 1_700_100_000)
	var current atomic.Pointer[[]byte]
	current.Store(&us)
	var downloads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := *current.Load()
		sum := sha256.Sum256(body)
		etag := `"` + hex.EncodeToString(sum[:8]) + `"`
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		downloads.Add(1)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)

	cp := controlPlane(t)
	src := controlplane.Source{
		Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1"))},
		WAF:    &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), geoGroup(`["us"]`)}},
	}
	v1 := publish(t, cp, src)
	n := newNode(t, cp, nil)
	n.start("OPENFLARE_CITY_MMDB_DOWNLOAD_URL="+srv.URL+"/GeoLite2-City.mmdb", "OPENFLARE_MMDB_UPDATE_INTERVAL=1s")
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	waitServes(t, "app.test", "/", "origin-ok v1")
	waitGeoStatus(t, 451, "the downloaded City database says US")
	if r := request("GET", "http", "app.test", "/", "127.0.0.16"); r.status != 200 {
		t.Errorf("a client outside the database: %d %q %v", r.status, r.body, r.err)
	}
	workers := workerPIDs(n.nginxPID())

	// The database changes upstream: downloaded, validated, compiled and
	// adopted by the running workers.
	current.Store(&de)
	waitGeoStatus(t, 200, "the new database says DE")
	// A reload would have replaced every worker seen before.
	after := workerPIDs(n.nginxPID())
	for _, pid := range workers {
		if !slices.Contains(after, pid) {
			t.Errorf("worker %d is gone (workers %v, now %v): a new database needs no reload", pid, workers, after)
		}
	}
	if d := downloads.Load(); d != 2 {
		t.Errorf("%d downloads, want 2 (an unchanged database is answered 304)", d)
	}

	// A version whose rule names DE: compiled before its reload, so the
	// first request after the apply is blocked.
	src.WAF.RuleGroups[1] = geoGroup(`["DE"]`)
	v2 := publish(t, cp, src)
	waitApplyLog(t, cp, v2.Version, protocol.ResultSuccess)
	if got := geoStatus(t); got != 451 {
		t.Errorf("first request after the apply of a DE rule: %d, want 451", got)
	}
}

// geo_match with the agent as a service user (CAP_NET_BIND_SERVICE only):
// the database it downloads lands in its own data dir, and the snapshot it
// compiles is read by workers of that same user.
func TestGeoMatchAsServiceUser(t *testing.T) {
	needRealRoot(t)
	if why := geodb.Available(); why != "" {
		t.Skip(why)
	}
	us := cityDB(t, "US", 1_700_000_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(us) }))
	t.Cleanup(srv.Close)
	cp := controlPlane(t)
	v1 := publish(t, cp, controlplane.Source{
		Routes: []controlplane.Route{proxyRoute(1, "app.test", origin(t, "v1"))},
		WAF:    &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{controlplane.DefaultRuleGroup(), geoGroup(`["US"]`)}},
	})
	n := serviceUserNode(t, cp, nil)
	n.start("OPENFLARE_CITY_MMDB_DOWNLOAD_URL=" + srv.URL + "/GeoLite2-City.mmdb")
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	waitServes(t, "app.test", "/", "origin-ok v1")
	waitGeoStatus(t, 451, "the City database the service user downloaded says US")
	if r := request("GET", "http", "app.test", "/", "127.0.0.16"); r.status != 200 {
		t.Errorf("a client outside the database: %d %q %v", r.status, r.body, r.err)
	}
	if u, _ := procIDs(t, n.cmd.Process.Pid); u != serviceUID {
		t.Fatalf("agent runs as uid %d, want %d", u, serviceUID)
	}
}
