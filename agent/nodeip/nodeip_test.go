package nodeip

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

func addrs(list ...string) func() ([]netip.Addr, error) {
	return func() ([]netip.Addr, error) {
		var out []netip.Addr
		for _, s := range list {
			out = append(out, netip.MustParseAddr(s))
		}
		return out, nil
	}
}

func echo(t *testing.T, body string, hits *atomic.Int32) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits != nil {
			hits.Add(1)
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestFirstPublicAnswerWinsAndIsCached(t *testing.T) {
	var hits atomic.Int32
	d := &Detector{
		Services: []string{
			echo(t, `{"ip":"10.1.2.3"}`, nil), // private: not acceptable
			echo(t, "garbage", nil),
			echo(t, "198.51.100.23\n", &hits),
			echo(t, "203.0.113.1", nil),
		},
		Interfaces: addrs("192.168.1.2"),
	}
	for i := 0; i < 3; i++ {
		if got := d.Detect(context.Background()); got != "198.51.100.23" {
			t.Fatalf("Detect = %q", got)
		}
	}
	if hits.Load() != 1 {
		t.Fatalf("service asked %d times, want 1 (cache)", hits.Load())
	}
}

func TestJSONAnswer(t *testing.T) {
	d := &Detector{Services: []string{echo(t, `{"ip":"203.0.113.9"}`, nil)}}
	if got := d.Detect(context.Background()); got != "203.0.113.9" {
		t.Fatalf("Detect = %q", got)
	}
}

func TestInterfaceFallbackPrefersPublic(t *testing.T) {
	cases := []struct {
		addrs []string
		want  string
	}{
		{[]string{"127.0.0.1", "169.254.1.1", "192.168.1.5", "198.51.100.4", "2001:db8::1"}, "198.51.100.4"},
		{[]string{"127.0.0.1", "fe80::1", "10.0.0.7"}, "10.0.0.7"},
		{[]string{"127.0.0.1"}, ""},
	}
	for _, tc := range cases {
		d := &Detector{Interfaces: addrs(tc.addrs...)}
		if got := d.Detect(context.Background()); got != tc.want {
			t.Errorf("%v → %q, want %q", tc.addrs, got, tc.want)
		}
	}
}

// A service that hangs cannot hold the beat longer than the budget.
func TestBudget(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	d := &Detector{Services: []string{srv.URL, srv.URL}, Budget: 300 * time.Millisecond, Interfaces: addrs("10.9.9.9")}
	start := time.Now()
	got := d.Detect(context.Background())
	if got != "10.9.9.9" || time.Since(start) > 2*time.Second {
		t.Fatalf("Detect = %q after %v", got, time.Since(start))
	}
}
