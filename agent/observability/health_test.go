package observability

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"openflare/agent/protocol"
)

const stubBody = "Active connections: 7 \nserver accepts handled requests\n 16 16 31 \nReading: 0 Writing: 1 Waiting: 6 \n"

// edge is a fake OpenResty observability server on 127.0.0.1.
type edge struct {
	stubCode int
	luaCode  int
	luaBody  string
	hits     atomic.Int32
	block    chan struct{} // when set, every request waits for it or the client
}

func (e *edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.hits.Add(1)
	if e.block != nil {
		select {
		case <-e.block:
		case <-r.Context().Done():
		}
		return
	}
	switch r.URL.Path {
	case stubStatusPath:
		w.WriteHeader(e.stubCode)
		w.Write([]byte(stubBody))
	case observabilityPath:
		w.WriteHeader(e.luaCode)
		w.Write([]byte(e.luaBody))
	default:
		http.NotFound(w, r)
	}
}

// start serves e and returns a Collector probing it, with a main config.
func (e *edge) start(t *testing.T) (*Collector, *httptest.Server) {
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	o := testOptions(t, newClock())
	o.ObservabilityPort = srv.Listener.Addr().(*net.TCPAddr).Port
	if err := os.MkdirAll(filepath.Dir(o.MainConfigPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(o.MainConfigPath, []byte("events {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return newCollector(t, o), srv
}

func TestHealthCheck(t *testing.T) {
	cases := []struct {
		name     string
		edge     *edge
		status   string
		msg      string
		conns    int64
		wantHits int32
	}{
		{"healthy, connections from lua", &edge{stubCode: 200, luaCode: 200, luaBody: `{"ok":true,"captured_at_unix":1,"connections":{"active":42,"reading":0,"writing":1,"waiting":41}}`},
			protocol.StatusHealthy, "", 42, 2},
		{"fallback config without lua", &edge{stubCode: 200, luaCode: 404}, protocol.StatusHealthy, "", 7, 2},
		{"lua subrequest failed", &edge{stubCode: 200, luaCode: 200, luaBody: `{"ok":false,"connections":{"active":0}}`},
			protocol.StatusHealthy, "", 7, 2},
		{"lua garbage", &edge{stubCode: 200, luaCode: 200, luaBody: `<html>`}, protocol.StatusHealthy, "", 7, 2},
		{"stub_status 500", &edge{stubCode: 500, luaCode: 404}, protocol.StatusUnhealthy, "openresty health endpoint returned 500", 0, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := tc.edge.start(t)
			r := c.Collect(context.Background())
			if r.Status != tc.status || r.Message != tc.msg || r.EdgeHealth.Status != tc.status ||
				r.EdgeHealth.Message != tc.msg || r.EdgeHealth.Connections != tc.conns {
				t.Errorf("status %q %q, edge %+v; want %q %q, %d connections", r.Status, r.Message, r.EdgeHealth, tc.status, tc.msg, tc.conns)
			}
			if n := tc.edge.hits.Load(); n != tc.wantHits {
				t.Errorf("%d requests, want %d", n, tc.wantHits)
			}
		})
	}
}

func TestHealthCheckDown(t *testing.T) {
	e := &edge{stubCode: 200, luaCode: 200}
	c, srv := e.start(t)
	srv.Close()
	r := c.Collect(context.Background())
	if r.Status != protocol.StatusUnhealthy || !strings.HasPrefix(r.Message, "openresty health endpoint unreachable: ") ||
		r.EdgeHealth.Connections != 0 {
		t.Errorf("status %q %q, edge %+v", r.Status, r.Message, r.EdgeHealth)
	}
}

func TestHealthCheckSlow(t *testing.T) {
	e := &edge{block: make(chan struct{})}
	c, _ := e.start(t)
	t.Cleanup(func() { close(e.block) }) // runs before the server's Close
	start := time.Now()
	r := c.Collect(context.Background())
	took := time.Since(start)
	if r.Status != protocol.StatusUnhealthy || !strings.HasPrefix(r.Message, "openresty health endpoint unreachable: ") {
		t.Errorf("status %q %q", r.Status, r.Message)
	}
	// Both requests share one budget; the upper bound leaves room for a
	// loaded test machine.
	if took < healthBudget || took > healthBudget+3*time.Second {
		t.Errorf("health check took %v, want about %v", took, healthBudget)
	}
}

func TestHealthSkippedWithoutMainConfig(t *testing.T) {
	e := &edge{stubCode: 200, luaCode: 200}
	c, _ := e.start(t)
	if err := os.Remove(c.o.MainConfigPath); err != nil {
		t.Fatal(err)
	}
	r := c.Collect(context.Background())
	if r.Status != "" || r.Message != "" || e.hits.Load() != 0 {
		t.Errorf("status %q %q after %d requests; want no health check", r.Status, r.Message, e.hits.Load())
	}
}

// TestEdgeStatusKeptBetweenChecks reports the last checked status in
// edge_health while the check is skipped.
func TestEdgeStatusKeptBetweenChecks(t *testing.T) {
	e := &edge{stubCode: 200, luaCode: 404}
	c, _ := e.start(t)
	c.Ack(c.Collect(context.Background()))
	if err := os.Remove(c.o.MainConfigPath); err != nil {
		t.Fatal(err)
	}
	r := c.Collect(context.Background())
	if r.Status != "" || r.EdgeHealth.Status != protocol.StatusHealthy || r.EdgeHealth.Connections != 0 {
		t.Errorf("status %q, edge %+v", r.Status, r.EdgeHealth)
	}
}

func TestStubConnections(t *testing.T) {
	for body, want := range map[string]int64{
		stubBody:                      7,
		"Active connections:12\n":     12,
		"Active connections: x\n":     0,
		"":                            0,
		"Active connections: 9999999": 9999999,
	} {
		if got := stubConnections([]byte(body)); got != want {
			t.Errorf("stubConnections(%q) = %d, want %d", body, got, want)
		}
	}
}
