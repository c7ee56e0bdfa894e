package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/internal/jsonstream"
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
	r, err := c.Heartbeat(context.Background(), payload(), nil)
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
			_, err := c.Heartbeat(context.Background(), payload(), nil)
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
	_, err := c.ActiveConfig(context.Background(), discard)
	if err == nil || !strings.Contains(err.Error(), "active config: read reply: unexpected EOF") {
		t.Fatalf("err = %v", err)
	}
}

func TestDroppedConnection(t *testing.T) {
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	})
	_, err := c.Heartbeat(context.Background(), payload(), nil)
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
	_, err = c.Heartbeat(context.Background(), payload(), nil)
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
		_, err := c.Heartbeat(context.Background(), payload(), nil)
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
		_, err := c.Heartbeat(context.Background(), payload(), nil)
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
	c.Budgets = Budgets{Active: 8 << 20, Value: 1 << 20}
	_, err := c.Heartbeat(context.Background(), payload(), nil)
	if !errors.Is(err, ErrValueTooLarge) || !strings.Contains(err.Error(), "heartbeat: reply holds a value over 1 MiB") {
		t.Fatalf("err = %v", err)
	}

	config := strings.Repeat("c", 6<<20)
	c = server(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"data":{"version":"v1","checksum":"c","source_config_json":%q}}`, config)
	})
	c.Budgets = Budgets{Active: 8 << 20, Value: 1 << 20}
	got, err := c.ActiveConfig(context.Background(), discard)
	if err != nil || got.SourceConfigJSON != config {
		t.Fatalf("6 MiB config under an 8 MiB budget: %d bytes, %v", len(got.SourceConfigJSON), err)
	}
	c.Budgets.Active = 4 << 20
	if _, err := c.ActiveConfig(context.Background(), discard); !errors.Is(err, ErrValueTooLarge) || !strings.Contains(err.Error(), "active config: reply holds source_config_json over 4 MiB") {
		t.Fatalf("6 MiB config under a 4 MiB budget: %v", err)
	}
}

// discard takes support files and keeps nothing.
func discard(protocol.SupportFile) error { return nil }

// The reply's IP-group array goes to the caller's decoder as it arrives,
// wherever it sits in the reply, and the rest of the reply still decodes;
// E6's groups array too. Without a decoder the array is skipped.
func TestIPGroupsHandedOn(t *testing.T) {
	groups := `[{"id":1,"ip_list":["192.0.2.1"],"checksum":"a"},{"id":2}]`
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == protocol.PathIPGroupSync {
			fmt.Fprintf(w, `{"error_msg":"","data":{"groups":%s,"extra":[1]}}`, groups)
			return
		}
		fmt.Fprintf(w, `{"data":{"waf_ip_groups":%s,"active_config":{"version":"v9","checksum":"c9"},"agent_settings":{"heartbeat_interval":5000}}}`, groups)
	})
	var got []json.RawMessage
	read := func(dec *json.Decoder) error {
		got = got[:0]
		return jsonstream.Array(dec, func() error {
			var g json.RawMessage
			if err := dec.Decode(&g); err != nil {
				return err
			}
			got = append(got, g)
			return nil
		})
	}
	r, err := c.Heartbeat(context.Background(), payload(), read)
	if err != nil || len(got) != 2 || string(got[1]) != `{"id":2}` {
		t.Fatalf("heartbeat: %d groups, %v", len(got), err)
	}
	if r.ActiveConfig == nil || r.ActiveConfig.Version != "v9" || r.AgentSettings.HeartbeatInterval != 5000 || len(r.WAFIPGroups) != 0 {
		t.Fatalf("reply after the groups: %+v", r)
	}
	if err := c.SyncIPGroups(context.Background(), &protocol.IPGroupSyncRequest{IDs: []uint64{1}}, read); err != nil || len(got) != 2 {
		t.Fatalf("E6: %d groups, %v", len(got), err)
	}
	if _, err := c.Heartbeat(context.Background(), payload(), nil); err != nil {
		t.Fatalf("skipped: %v", err)
	}
}

// What the groups' decoder fails with fails the reply, named; the reply's
// caps bound it as they bound the rest: an endless array stops at the
// cap, one entry over the value budget at the budget.
func TestIPGroupsBounded(t *testing.T) {
	var sent atomic.Int64
	endless := func(w http.ResponseWriter, entry string) {
		io.WriteString(w, `{"data":{"waf_ip_groups":[{"id":1,"ip_list":[`)
		chunk := []byte(strings.Repeat(entry+",", 4096))
		for i := 0; i < 1<<30/len(chunk); i++ {
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	}
	skip := func(dec *json.Decoder) error { return jsonstream.Skip(dec) }

	c := server(t, func(w http.ResponseWriter, r *http.Request) { endless(w, `"192.0.2.1"`) })
	if _, err := c.Heartbeat(context.Background(), payload(), skip); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "heartbeat: reply exceeds 32 MiB") {
		t.Fatalf("1 GiB of entries: %v", err)
	}
	if n := sent.Load(); n > 64<<20 {
		t.Fatalf("%d bytes sent before the refusal", n)
	}
	c = server(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"data":{"waf_ip_groups":[{"id":1,"ip_list":["%s"]}]}}`, strings.Repeat("1", 2<<20))
	})
	if _, err := c.Heartbeat(context.Background(), payload(), skip); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("a 2 MiB entry: %v", err)
	}
	failing := errors.New("scratch file full")
	c = server(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"data":{"waf_ip_groups":[]}}`) })
	if _, err := c.Heartbeat(context.Background(), payload(), func(*json.Decoder) error { return failing }); !errors.Is(err, failing) || !strings.HasPrefix(err.Error(), "heartbeat: ") {
		t.Fatalf("decoder failure: %v", err)
	}
}

// A nesting bomb is refused as not a JSON envelope, whether it stands
// where a value is skipped or where the groups are, without costing
// memory in proportion to its depth.
func TestNestingBomb(t *testing.T) {
	bomb := strings.Repeat("[", 8<<20)
	for _, body := range []string{
		`{"data":{"unknown":` + bomb,
		`{"data":{"waf_ip_groups":[` + bomb,
		`{"data":{"waf_ip_groups":[{"id":1,"x":` + bomb,
	} {
		c := server(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := c.Heartbeat(context.Background(), payload(), func(dec *json.Decoder) error { return jsonstream.Skip(dec) })
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "heartbeat: reply is not a JSON envelope") {
			t.Errorf("%.40s…: %v", body, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
			t.Errorf("%.40s…: %d bytes allocated", body, grew)
		}
	}
}
