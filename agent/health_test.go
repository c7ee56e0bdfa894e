package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"openflare/agent/apply"
	"openflare/agent/config"
	"openflare/agent/geosnap"
	"openflare/agent/ipgroups"
	"openflare/agent/nginx"
	"openflare/agent/protocol"
	"openflare/agent/state"
	"openflare/agent/updater"
)

// stubNginx is a data plane whose only answer is whether it is usable.
type stubNginx struct {
	nginx.Unusable
	err error
}

func (n *stubNginx) Usable() error { return n.err }

// healthRig is an agent whose beat sources are fakes or real stores in a
// temporary directory: state, nginx's usability, the IP-group store (its
// E6 a stub), the geo snapshot and self-update.
type healthRig struct {
	t   *testing.T
	a   *Agent
	ng  *stubNginx
	dir string
}

func newHealthRig(t *testing.T) *healthRig {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	store, err := state.Open(filepath.Join(dir, "agent-state.json"), log)
	if err != nil {
		t.Fatal(err)
	}
	runtime := filepath.Join(dir, "runtime")
	ipg, err := ipgroups.Open(runtime, log)
	if err != nil {
		t.Fatal(err)
	}
	ng := &stubNginx{}
	cfg := &config.Config{NodeIP: "198.51.100.10", NodeName: "edge", UpdateRepo: "openflare/openflare-agent"}
	a := &Agent{
		cfg: cfg, version: "1.0.0", log: log, store: store, ipg: ipg,
		engine: &apply.Engine{Nginx: ng},
		geoip: &geoipDBs{
			snap: &geosnap.Builder{Dir: runtime, CityPath: filepath.Join(dir, "City.mmdb"), CountryPath: filepath.Join(dir, "Country.mmdb")},
			log:  log,
		},
		update: newSelfUpdate(cfg, updater.New(updater.Options{Exe: filepath.Join(dir, "openflare-agent"), Version: "1.0.0"}), log),
	}
	return &healthRig{t: t, a: a, ng: ng, dir: dir}
}

func (r *healthRig) set(f func(*state.State)) {
	r.t.Helper()
	if err := r.a.store.Update(f); err != nil {
		r.t.Fatal(err)
	}
}

// groupsFail has E6 fail for ids (no ids: a reconcile that lands them all).
func (r *healthRig) groupsFail(ids ...uint64) {
	r.t.Helper()
	r.a.ipg.Reconcile(context.Background(), ids, func(context.Context, *protocol.IPGroupSyncRequest, func(*json.Decoder) error) error {
		return errors.New("E6 unreachable")
	})
}

// geoRule lands a WAF config with a geo_match rule on country (none: no
// geo rule) and builds the snapshot; no database exists.
func (r *healthRig) geoRule(country string) {
	r.t.Helper()
	doc := `{"rule_groups":[]}`
	if country != "" {
		doc = `{"rule_groups":[{"id":2,"enabled":true,"graph":{"entry":"s","nodes":{"s":{"type":"start","next":{"next":"g"}},` +
			`"g":{"type":"geo_match","config":{"countries":["` + country + `"]},"next":{"true":"a","false":"a"}},"a":{"type":"allow"}}}}]}`
	}
	if err := os.WriteFile(filepath.Join(r.dir, "runtime", geosnap.WAFConfigFile), []byte(doc), 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.a.geoip.build(false)
}

func (r *healthRig) payload(more ...protocol.HealthEvent) *protocol.NodePayload {
	return r.a.payload(context.Background(), more...)
}

// rank orders severities as the server reads them (unknown: warning).
func rank(severity string) int {
	switch severity {
	case protocol.SeverityInfo:
		return 0
	case protocol.SeverityCritical:
		return 2
	}
	return 1
}

func types(p *protocol.NodePayload) []string {
	var out []string
	for _, e := range p.HealthEvents {
		out = append(out, e.EventType)
	}
	return out
}

// last_error names the worst problem the node has (nginx not serving >
// the version not applied > IP groups not held > geo rules without their
// database > Pages projects not deployed), openresty_status is unhealthy
// while any is open, and each goes only when its cause does: fixed worst
// first, last_error names the next; fixed best first, it keeps naming the
// worst.
func TestLastErrorPrecedenceAndClearing(t *testing.T) {
	type problem struct {
		typ, cause string
		fix        func(r *healthRig)
	}
	problems := []problem{
		{protocol.EventOpenRestyUnhealthy, "nginx binary missing", func(r *healthRig) { r.ng.err = nil }},
		{protocol.EventOpenRestyUnhealthy, "self-probe failed", func(r *healthRig) { r.set(func(s *state.State) { s.SelfTestError = "" }) }},
		{protocol.EventOpenRestyUnhealthy, "nginx restart failed", func(r *healthRig) { r.set(func(s *state.State) { s.RestartError = "" }) }},
		{protocol.EventOpenRestyUnhealthy, "health endpoint unreachable", func(r *healthRig) {
			r.set(func(s *state.State) { s.OpenRestyStatus, s.OpenRestyMessage = protocol.StatusHealthy, "" })
		}},
		{protocol.EventSyncError, "apply version v2", func(r *healthRig) { r.set(func(s *state.State) { s.LastError = "" }) }},
		{protocol.EventIPGroupSyncError, "IP group 4 not enforced", func(r *healthRig) { r.groupsFail() }},
		{protocol.EventGeoIPUnavailable, "geo_match rules on countries=US", func(r *healthRig) { r.geoRule("") }},
		{protocol.EventPagesSyncError, "pages project 3", func(r *healthRig) { r.set(func(s *state.State) { s.PagesError = "" }) }},
	}
	breakAll := func(r *healthRig) {
		r.ng.err = fmt.Errorf("%w: nginx binary missing", nginx.ErrUnusable)
		r.set(func(s *state.State) {
			s.SelfTestError = "self-probe failed: worker answered 500"
			s.RestartError = "nginx restart failed: restart refused: nginx -t: [emerg]"
			s.OpenRestyStatus, s.OpenRestyMessage = protocol.StatusUnhealthy, "openresty health endpoint unreachable: refused"
			s.LastError = "apply version v2: nginx -t failed"
			s.PagesError = "pages project 3: symbolic link index.html"
		})
		r.groupsFail(4)
		r.geoRule("US")
	}
	check := func(t *testing.T, r *healthRig, open []problem, worst problem) {
		t.Helper()
		p := r.payload()
		if !strings.Contains(p.LastError, worst.cause) || p.OpenRestyStatus != protocol.StatusUnhealthy || p.OpenRestyMessage != p.LastError {
			t.Fatalf("with %d problems: last_error %q, status %s %q; want unhealthy naming %q", len(open), p.LastError, p.OpenRestyStatus, p.OpenRestyMessage, worst.cause)
		}
		var want []string
		for _, pr := range open {
			if !slices.Contains(want, pr.typ) {
				want = append(want, pr.typ)
			}
		}
		if got := types(p); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
	}
	healthy := func(t *testing.T, r *healthRig) {
		t.Helper()
		p := r.payload()
		if p.LastError != "" || p.OpenRestyStatus != protocol.StatusHealthy || p.OpenRestyMessage != "" || p.HealthEvents == nil || len(p.HealthEvents) != 0 {
			t.Fatalf("all fixed: last_error %q, status %s %q, events %v", p.LastError, p.OpenRestyStatus, p.OpenRestyMessage, p.HealthEvents)
		}
	}

	t.Run("worst first", func(t *testing.T) {
		r := newHealthRig(t)
		breakAll(r)
		for i, pr := range problems {
			check(t, r, problems[i:], pr)
			pr.fix(r)
		}
		healthy(t, r)
	})
	t.Run("worst last", func(t *testing.T) {
		r := newHealthRig(t)
		breakAll(r)
		for i := len(problems) - 1; i >= 0; i-- {
			check(t, r, problems[:i+1], problems[0])
			problems[i].fix(r)
		}
		healthy(t, r)
	})
}

// A failed restart makes the beat unhealthy even while nginx answers its
// health check, and an up-to-date sync (which clears the sync error) does
// not hide it; the next successful restart clears it.
func TestFailedRestartReportedUnhealthy(t *testing.T) {
	r := newHealthRig(t)
	r.set(func(s *state.State) {
		s.OpenRestyStatus = protocol.StatusHealthy
		s.RestartError = "nginx restart failed: restart refused: nginx -t: [emerg] unknown directive"
	})
	p := r.payload()
	if p.OpenRestyStatus != protocol.StatusUnhealthy || !strings.Contains(p.LastError, "nginx restart failed") ||
		!slices.ContainsFunc(p.HealthEvents, func(e protocol.HealthEvent) bool {
			return e.EventType == protocol.EventOpenRestyUnhealthy && e.Severity == protocol.SeverityCritical
		}) {
		t.Fatalf("failed restart: %+v", p)
	}
	r.set(func(s *state.State) { s.RestartError = "" })
	if p := r.payload(); p.OpenRestyStatus != protocol.StatusHealthy || p.LastError != "" {
		t.Fatalf("after a successful restart: %s %q", p.OpenRestyStatus, p.LastError)
	}
}

// Every payload carries at most one event per type, whatever problems
// exist at once and however many events of one type the beat's sources
// raise (two rotated logs lost, the buffer trimmed twice): merged into
// one with every message and the worst severity. Nothing of what was
// raised is lost, every text is bounded, and last_error is the first
// event's message exactly while the node reports unhealthy.
func TestOneEventPerTypeProperty(t *testing.T) {
	r := newHealthRig(t)
	rng := rand.New(rand.NewPCG(22, 4))
	huge := strings.Repeat("x", 3*protocol.MaxText)
	text := func(s string) string {
		if rng.IntN(5) == 0 {
			return s + huge
		}
		return s
	}
	pick := func(s string) string {
		if rng.IntN(2) == 0 {
			return ""
		}
		return text(s)
	}
	kinds := []struct{ typ, severity string }{
		{protocol.EventAccessLogLost, protocol.SeverityWarning},
		{protocol.EventObservabilityTrimmed, protocol.SeverityWarning},
		{protocol.EventGeoIPUnavailable, protocol.SeverityCritical},
		{protocol.EventSyncError, protocol.SeverityInfo},
		{protocol.EventAgentUpdateRepo, protocol.SeverityWarning},
	}
	enforcement := []string{protocol.EventOpenRestyUnhealthy, protocol.EventSyncError, protocol.EventIPGroupSyncError, protocol.EventGeoIPUnavailable, protocol.EventPagesSyncError}
	for round := range 300 {
		r.ng.err = nil
		if rng.IntN(4) == 0 {
			r.ng.err = errors.New(text("nginx binary missing"))
		}
		r.set(func(s *state.State) {
			s.SelfTestError, s.RestartError, s.LastError, s.PagesError = pick("probe failed"), pick("restart failed"), pick("apply failed"), pick("pages project 3 failed")
			s.OpenRestyStatus, s.OpenRestyMessage = protocol.StatusHealthy, ""
			if rng.IntN(3) == 0 {
				s.OpenRestyStatus, s.OpenRestyMessage = protocol.StatusUnhealthy, pick("health endpoint unreachable")
			}
		})
		var ids []uint64
		for id := range uint64(rng.IntN(4)) {
			ids = append(ids, id+1)
		}
		r.groupsFail(ids...)
		if rng.IntN(2) == 0 {
			r.geoRule("US")
		} else {
			r.geoRule("")
		}
		repo := "openflare/openflare-agent"
		if rng.IntN(2) == 0 {
			repo = "Rain-kl/OpenFlare"
		}
		r.a.update.offer(protocol.AgentSettings{AutoUpdate: true, UpdateRepo: repo})
		var more []protocol.HealthEvent
		for range rng.IntN(8) {
			k := kinds[rng.IntN(len(kinds))]
			more = append(more, protocol.HealthEvent{EventType: k.typ, Severity: k.severity, Message: text("raised"), Metadata: map[string]string{"n": fmt.Sprint(rng.IntN(9))}})
		}

		base := r.payload()
		p := r.payload(more...)
		seen := map[string]protocol.HealthEvent{}
		for _, e := range p.HealthEvents {
			if _, dup := seen[e.EventType]; dup {
				t.Fatalf("round %d: two %s events in %v", round, e.EventType, types(p))
			}
			seen[e.EventType] = e
			if len(e.Message) > protocol.MaxText+32 {
				t.Fatalf("round %d: %s message of %d bytes", round, e.EventType, len(e.Message))
			}
		}
		for _, e := range append(base.HealthEvents, more...) {
			got, ok := seen[e.EventType]
			if !ok {
				t.Fatalf("round %d: the raised %s is missing from %v", round, e.EventType, types(p))
			}
			if rank(got.Severity) < rank(e.Severity) {
				t.Fatalf("round %d: %s merged as %s, one raised was %s", round, e.EventType, got.Severity, e.Severity)
			}
		}
		if len(p.LastError) > protocol.MaxText+32 || len(p.OpenRestyMessage) > protocol.MaxText+32 {
			t.Fatalf("round %d: last_error of %d bytes, openresty_message of %d", round, len(p.LastError), len(p.OpenRestyMessage))
		}
		open := slices.ContainsFunc(base.HealthEvents, func(e protocol.HealthEvent) bool { return slices.Contains(enforcement, e.EventType) })
		if open != (p.OpenRestyStatus == protocol.StatusUnhealthy) || open != (p.LastError != "") {
			t.Fatalf("round %d: problems open %v, but status %s, last_error %q", round, open, p.OpenRestyStatus, p.LastError)
		}
		if open && !strings.HasPrefix(p.HealthEvents[0].Message, p.LastError[:min(len(p.LastError), 40)]) {
			t.Fatalf("round %d: last_error %q is not the worst event's %q", round, p.LastError, p.HealthEvents[0].Message)
		}
	}
}

// geoip_unavailable is raised only while an active geo_match rule needs
// a database the snapshot lacks: none without geo rules (a node that
// cannot reach the download host included), none while the databases
// present serve the codes, and one naming both databases when both lack.
func TestGeoIPUnavailableOnlyWithGeoRule(t *testing.T) {
	countries := geosnap.Codes{Countries: []string{"US"}}
	regions := geosnap.Codes{Regions: []string{"US-CA"}}
	both := geosnap.Codes{Countries: []string{"DE"}, Regions: []string{"US-CA"}}
	for _, c := range []struct {
		name string
		st   geosnap.Status
		lack []string
	}{
		{"no geo rule, no database", geosnap.Status{}, nil},
		{"countries, no database", geosnap.Status{Codes: countries}, []string{"city", "country"}},
		{"countries, City only", geosnap.Status{Codes: countries, Databases: []string{"city"}}, nil},
		{"countries, Country only", geosnap.Status{Codes: countries, Databases: []string{"country"}}, nil},
		{"regions, Country only", geosnap.Status{Codes: regions, Databases: []string{"country"}}, []string{"city"}},
		{"regions, no database", geosnap.Status{Codes: regions}, []string{"city"}},
		{"regions, City", geosnap.Status{Codes: regions, Databases: []string{"city"}}, nil},
		{"both, Country only", geosnap.Status{Codes: both, Databases: []string{"country"}}, []string{"city"}},
		{"both, no database", geosnap.Status{Codes: both}, []string{"city", "country"}},
	} {
		if got := geoLack(c.st); !slices.Equal(got, c.lack) {
			t.Errorf("%s: lacks %v, want %v", c.name, got, c.lack)
		}
	}

	// Through the snapshot builder and the beat: databases missing on
	// disk raise nothing until a rule needs them, then one event naming
	// both, and nothing once the rule is gone.
	r := newHealthRig(t)
	r.set(func(s *state.State) { s.OpenRestyStatus = protocol.StatusHealthy })
	r.geoRule("")
	if p := r.payload(); len(p.HealthEvents) != 0 || p.LastError != "" {
		t.Fatalf("no geo rule: %q %+v", p.LastError, p.HealthEvents)
	}
	r.geoRule("US")
	p := r.payload()
	if len(p.HealthEvents) != 1 || p.HealthEvents[0].EventType != protocol.EventGeoIPUnavailable ||
		!strings.Contains(p.HealthEvents[0].Message, "City.mmdb") || !strings.Contains(p.HealthEvents[0].Message, "Country.mmdb") {
		t.Fatalf("a geo rule without databases: %+v", p.HealthEvents)
	}
	r.geoRule("")
	if p := r.payload(); len(p.HealthEvents) != 0 || p.LastError != "" {
		t.Fatalf("geo rule removed: %q %+v", p.LastError, p.HealthEvents)
	}
}
