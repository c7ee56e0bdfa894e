package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openflare/openflare-agent/agent/protocol"
)

const secret = "0123456789abcdef0123456789abcdef"

func server(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return New(srv.URL+"/", secret, "test", 5*time.Second)
}

func payload() *protocol.NodePayload {
	return &protocol.NodePayload{Version: "v0", HealthEvents: []protocol.HealthEvent{}}
}

func noSecret(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Fatalf("error leaks the token: %v", err)
	}
}

func TestRequestShape(t *testing.T) {
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != protocol.PathHeartbeat || r.Method != http.MethodPost {
			t.Errorf("request %s %s", r.Method, r.URL.Path)
		}
		if r.Header.Get(protocol.TokenHeader) != secret || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("headers %v", r.Header)
		}
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"health_events":[]`) {
			t.Errorf("body %s", body)
		}
		io.WriteString(w, `{"error_msg":"","data":{"agent_settings":{"heartbeat_interval":1500},"active_config":{"version":"20261129-001","checksum":"abc"}}}`)
	})
	r, err := c.Heartbeat(context.Background(), payload())
	if err != nil {
		t.Fatal(err)
	}
	if r.AgentSettings.HeartbeatInterval != 1500 || r.ActiveConfig == nil || r.ActiveConfig.Version != "20261129-001" {
		t.Fatalf("reply %+v", r)
	}
}

func TestErrorReplies(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"401 envelope", 401, `{"error_msg":"无权进行此操作，Agent Token 无效","data":null}`, "heartbeat: HTTP 401: 无权进行此操作，Agent Token 无效"},
		{"500 html", 500, `<html>oops</html>`, "heartbeat: HTTP 500 Internal Server Error"},
		{"200 with error_msg", 200, `{"error_msg":"busy","data":null}`, "heartbeat: HTTP 200: busy"},
		{"200 garbage", 200, `not json`, "heartbeat: reply is not a JSON envelope"},
		{"404 plain", 404, `404 page not found`, "heartbeat: HTTP 404 Not Found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := server(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			_, err := c.Heartbeat(context.Background(), payload())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			noSecret(t, err)
			if tc.status == 401 && !IsUnauthorized(err) {
				t.Fatal("401 not recognised")
			}
		})
	}
}

// A reply over its cap fails and names the endpoint, without reading it all.
func TestOversizedReply(t *testing.T) {
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"error_msg":"","data":{"node_id":"`)
		chunk := strings.Repeat("a", 64<<10)
		for i := 0; i < (CapSmall>>16)+2; i++ {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		io.WriteString(w, `"}}`)
	})
	_, err := c.Register(context.Background(), payload())
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "register: reply exceeds 1 MiB") {
		t.Fatalf("err = %v", err)
	}
}

// A body cut short (Content-Length promises more) is an error, not a
// half-decoded reply.
func TestTruncatedReply(t *testing.T) {
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		full := `{"error_msg":"","data":{"version":"20261129-001","checksum":"abc","source_config_json":"{}"}}`
		w.Header().Set("Content-Length", strconv.Itoa(len(full)))
		w.WriteHeader(200)
		io.WriteString(w, full[:len(full)/2])
		w.(http.Flusher).Flush()
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	})
	_, err := c.ActiveConfig(context.Background())
	if err == nil || !strings.Contains(err.Error(), "active config: read reply: unexpected EOF") {
		t.Fatalf("err = %v", err)
	}
}

func TestDroppedConnection(t *testing.T) {
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	})
	_, err := c.Heartbeat(context.Background(), payload())
	if err == nil || !strings.HasPrefix(err.Error(), "heartbeat: ") {
		t.Fatalf("err = %v", err)
	}
	noSecret(t, err)
}

func TestTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	c := New("http://"+ln.Addr().String(), secret, "test", 200*time.Millisecond)
	start := time.Now()
	_, err = c.Heartbeat(context.Background(), payload())
	if err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("err = %v after %v", err, time.Since(start))
	}
}

func TestRegisterTokenFallback(t *testing.T) {
	for _, body := range []string{
		`{"error_msg":"","data":{"node_id":"node-1","access_token":"new"}}`,
		`{"error_msg":"","data":{"node_id":"node-1","agent_token":"new"}}`,
	} {
		c := server(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })
		r, err := c.Register(context.Background(), payload())
		if err != nil || r.Token() != "new" || r.NodeID != "node-1" {
			t.Fatalf("%s: %+v %v", body, r, err)
		}
	}
}

// A redirect from any endpoint is an error, and the token never reaches
// the host it points to (another host, another port, or plain http).
func TestRedirectsNotFollowed(t *testing.T) {
	var elsewhere []string
	thief := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere = append(elsewhere, r.Header.Get(protocol.TokenHeader))
		w.Write([]byte(`{"success":true,"data":{}}`))
	}))
	t.Cleanup(thief.Close)
	for _, code := range []int{301, 302, 307, 308} {
		c := server(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, thief.URL+r.URL.Path, code)
		})
		_, err := c.Heartbeat(context.Background(), payload())
		noSecret(t, err)
		if !errors.Is(err, ErrRedirect) || !strings.Contains(err.Error(), thief.Listener.Addr().String()) {
			t.Errorf("%d: err = %v", code, err)
		}
		if _, err := c.Register(context.Background(), payload()); !errors.Is(err, ErrRedirect) {
			t.Errorf("%d register: err = %v", code, err)
		}
	}
	if len(elsewhere) != 0 {
		t.Fatalf("the redirect target received %d requests (tokens %q)", len(elsewhere), elsewhere)
	}
}

// A server's error text is bounded before anything stores or echoes it.
func TestErrorMessageBounded(t *testing.T) {
	huge := strings.Repeat("é", 1<<18)
	for _, status := range []int{200, 500} {
		c := server(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			w.Write([]byte(`{"success":false,"error_msg":"` + huge + `"}`))
		})
		_, err := c.Heartbeat(context.Background(), payload())
		var apiErr *Error
		// A 200 carries the cut text; a non-200 body over 64 KiB is not
		// read far enough to decode at all.
		if !errors.As(err, &apiErr) || len(apiErr.Message) > maxMessage+64 || status == 200 && !strings.Contains(apiErr.Message, "bytes cut") {
			t.Fatalf("status %d: message of %d bytes: %.80s", status, len(apiErr.Message), err)
		}
	}
}

// One value over its budget (an endless string) fails the reply as soon as
// the budget is spent, not at the reply cap; an E4 config may be as large
// as the E4 budget.
func TestValueBudget(t *testing.T) {
	var sent atomic.Int64
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"error_msg":"`))
		chunk := []byte(strings.Repeat("x", 64<<10))
		for i := 0; i < 512; i++ {
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
		w.Write([]byte(`"}`))
	})
	c.Budgets = Budgets{Active: 8 << 20, Entries: 1 << 20, Value: 1 << 20}
	_, err := c.Heartbeat(context.Background(), payload())
	if !errors.Is(err, ErrValueTooLarge) || !strings.Contains(err.Error(), "heartbeat: reply holds a value over 1 MiB") {
		t.Fatalf("err = %v", err)
	}

	config := strings.Repeat("c", 6<<20)
	c = server(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"data":{"version":"v1","checksum":"c","source_config_json":%q}}`, config)
	})
	c.Budgets = Budgets{Active: 8 << 20, Entries: 1 << 20, Value: 1 << 20}
	got, err := c.ActiveConfig(context.Background())
	if err != nil || got.SourceConfigJSON != config {
		t.Fatalf("6 MiB config under an 8 MiB budget: %d bytes, %v", len(got.SourceConfigJSON), err)
	}
	c.Budgets.Active = 4 << 20
	if _, err := c.ActiveConfig(context.Background()); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "active config: reply exceeds 4 MiB") {
		t.Fatalf("6 MiB config under a 4 MiB budget: %v", err)
	}
}

// A group over the reply's entry budget is rejected alone; the reply, the
// groups before and after it, and the rest of the heartbeat still decode.
func TestEntryBudgetRejectsGroupAlone(t *testing.T) {
	entries := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"10.%d.%d.%d"`, i>>16&0xff, i>>8&0xff, i&0xff)
		}
		return b.String()
	}
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"data":{"active_config":{"version":"v9","checksum":"c9"},"waf_ip_groups":[`+
			`{"id":1,"enabled":true,"ip_list":[%s],"checksum":"a"},`+
			`{"id":2,"enabled":true,"ip_list":[%s],"checksum":"b"},`+
			`{"id":3,"enabled":true,"ip_list":["192.0.2.1"],"checksum":"c"}]}}`, entries(1000), entries(100_000))
	})
	c.Budgets = Budgets{Active: 8 << 20, Entries: 1 << 20, Value: 1 << 20}
	r, err := c.Heartbeat(context.Background(), payload())
	if err != nil {
		t.Fatal(err)
	}
	if r.ActiveConfig == nil || r.ActiveConfig.Version != "v9" || len(r.WAFIPGroups) != 3 {
		t.Fatalf("reply: %+v", r.ActiveConfig)
	}
	g1, g2, g3 := r.WAFIPGroups[0], r.WAFIPGroups[1], r.WAFIPGroups[2]
	if g1.Malformed != "" || len(g1.IPList) != 1000 || g1.Checksum != "a" {
		t.Fatalf("group 1: %d entries, %q", len(g1.IPList), g1.Malformed)
	}
	if g2.ID != 2 || g2.IPList != nil || !strings.Contains(g2.Malformed, "over this node's budget of 1 MiB") {
		t.Fatalf("group 2: %d entries, %q", len(g2.IPList), g2.Malformed)
	}
	if g3.Malformed != "" || len(g3.IPList) != 1 {
		t.Fatalf("group 3: %+v", g3)
	}
}

// Wrong-typed fields and elements mark their group alone.
func TestMalformedGroupsStream(t *testing.T) {
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"data":{"waf_ip_groups":[{"id":-1},{"id":"x","ip_list":[1]},5,[1,[2]],{"id":4,"ip_list":{"a":[1]}},`+
			`{"id":5,"ip_list":["192.0.2.1",{"x":1},"192.0.2.2"]},{"id":6,"enabled":true,"ip_list":null,"checksum":"s","extra":{"deep":[1,{"a":2}]}}],`+
			`"agent_settings":{"heartbeat_interval":5000}}}`)
	})
	r, err := c.Heartbeat(context.Background(), payload())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.WAFIPGroups) != 7 || r.AgentSettings.HeartbeatInterval != 5000 {
		t.Fatalf("%d groups, settings %+v", len(r.WAFIPGroups), r.AgentSettings)
	}
	for i, g := range r.WAFIPGroups[:6] {
		if g.Malformed == "" {
			t.Errorf("element %d not marked malformed: %+v", i, g)
		}
	}
	if g := r.WAFIPGroups[4]; g.ID != 4 {
		t.Errorf("element 4 lost its id: %+v", g)
	}
	if g := r.WAFIPGroups[6]; g.Malformed != "" || g.ID != 6 || !g.Enabled || g.Checksum != "s" || g.IPList != nil {
		t.Errorf("element 6: %+v", g)
	}
}

// Millions of tiny group elements cannot escape the budget (each kept
// element costs its struct), and a malformed group gives back what its
// entries cost, so a valid group after it still fits.
func TestGroupElementsBudgeted(t *testing.T) {
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"data":{"waf_ip_groups":[`+strings.Repeat("1,", 200_000)+`1]}}`)
	})
	c.Budgets = Budgets{Active: 8 << 20, Entries: 1 << 20, Value: 1 << 20}
	if _, err := c.Heartbeat(context.Background(), payload()); !errors.Is(err, ErrValueTooLarge) || !strings.Contains(err.Error(), "more IP-group elements") {
		t.Fatalf("200 001 tiny elements: %v", err)
	}

	entries := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"10.%d.%d.%d"`, i>>16&0xff, i>>8&0xff, i&0xff)
		}
		return b.String()
	}
	c = server(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"data":{"waf_ip_groups":[{"id":1,"enabled":"yes","ip_list":[%s]},{"id":2,"enabled":true,"ip_list":[%s],"checksum":"b"}]}}`, entries(30_000), entries(25_000))
	})
	c.Budgets = Budgets{Active: 8 << 20, Entries: 1 << 20, Value: 1 << 20}
	r, err := c.Heartbeat(context.Background(), payload())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.WAFIPGroups) != 2 || r.WAFIPGroups[0].Malformed == "" || r.WAFIPGroups[1].Malformed != "" || len(r.WAFIPGroups[1].IPList) != 25_000 {
		t.Fatalf("groups: %+v / %q", len(r.WAFIPGroups), r.WAFIPGroups[1].Malformed)
	}
}
