package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"openflare/agent/protocol"
)

// vectorBSource is PROTOCOL 4.3 test vector B's source; it renders to
// vectorBChecksum.
const (
	vectorBSource   = `{"routes":[{"id":7,"site_name":"demo","domains":["demo.example.com"],"origin_url":"http://10.0.0.5:8080","upstreams":["http://10.0.0.5:8080"],"enabled":true,"enable_https":false,"redirect_http":false,"cache_enabled":false,"upstream_type":"direct"}],"openresty_config":{"worker_processes":"auto","websocket_enabled":true,"main_config_template":"workers {{OpenRestyWorkerProcesses}};\ninclude {{OpenRestyRouteConfigInclude}};\n","origin_error_page_enabled":false},"waf":{"rule_groups":[],"bindings":[{"route_id":7,"site_name":"demo","rule_group_ids":[]}]}}`
	vectorBChecksum = "a852b4f14bda0fa0bbab4b0a809f02f5347f80d4e138a2ede4d0eb8c32e8ca47"
)

func startServer(t *testing.T) *Server {
	t.Helper()
	s := New()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// reply is one HTTP answer: status, raw body and the decoded envelope (when
// the body is JSON).
type reply struct {
	status int
	header http.Header
	body   []byte
	env    protocol.Envelope
}

// call sends one request; body is sent as is when it is a string, else as
// JSON; header holds extra request headers.
func call(t *testing.T, s *Server, method, path, token string, body any, header ...string) reply {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, s.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set(protocol.TokenHeader, token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := noKeepAlive().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, body: raw}
	_ = json.Unmarshal(raw, &r.env) // non-JSON bodies are checked through r.body
	return r
}

// noKeepAlive is a client that never reuses connections, so a dropped
// connection is never retried transparently.
func noKeepAlive() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

func wantError(t *testing.T, r reply, status int, msg string) {
	t.Helper()
	if r.status != status || r.env.ErrorMsg != msg || string(r.env.Data) != "null" {
		t.Fatalf("got %d %s, want %d with error_msg %q and data null", r.status, r.body, status, msg)
	}
}

func wantOK(t *testing.T, r reply, data any) {
	t.Helper()
	if r.status != http.StatusOK || r.env.ErrorMsg != "" {
		t.Fatalf("got %d %s, want 200", r.status, r.body)
	}
	if data != nil {
		if err := json.Unmarshal(r.env.Data, data); err != nil {
			t.Fatalf("decode %s: %v", r.env.Data, err)
		}
	}
}

func payload(version string) protocol.NodePayload {
	return protocol.NodePayload{
		SchemaVersion:   protocol.SchemaVersion,
		NodeID:          "node-local-placeholder",
		Name:            "edge-test",
		IP:              "198.51.100.23",
		Version:         version,
		CurrentVersion:  "",
		OpenRestyStatus: protocol.StatusHealthy,
		HealthEvents:    []protocol.HealthEvent{},
	}
}

func heartbeat(t *testing.T, s *Server, token string, p protocol.NodePayload) (protocol.HeartbeatReply, reply) {
	t.Helper()
	r := call(t, s, http.MethodPost, protocol.PathHeartbeat, token, p)
	var hb protocol.HeartbeatReply
	wantOK(t, r, &hb)
	return hb, r
}

func wsURL(s *Server) string {
	return "ws://" + strings.TrimPrefix(s.URL(), "http://") + protocol.PathWebSocket
}

func dialWS(s *Server, token string) (*websocket.Conn, error) {
	cfg, err := websocket.NewConfig(wsURL(s), s.URL())
	if err != nil {
		return nil, err
	}
	cfg.Header = http.Header{protocol.TokenHeader: {token}}
	return websocket.DialConfig(cfg)
}

func mustDialWS(t *testing.T, s *Server, nodeID, token string) *websocket.Conn {
	t.Helper()
	ws, err := dialWS(s, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	if err := s.WaitWS(testContext(t), nodeID, true); err != nil {
		t.Fatal(err)
	}
	return ws
}

func sendWS(t *testing.T, ws *websocket.Conn, typ string, p any) {
	t.Helper()
	if err := websocket.Message.Send(ws, string(wsFrame(typ, p))); err != nil {
		t.Fatal(err)
	}
}

func readWS(t *testing.T, ws *websocket.Conn) protocol.WSMessage {
	t.Helper()
	raw, err := readWSRaw(ws)
	if err != nil {
		t.Fatal(err)
	}
	var m protocol.WSMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("frame %q: %v", raw, err)
	}
	return m
}

func readWSRaw(ws *websocket.Conn) ([]byte, error) {
	if err := ws.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, err
	}
	var raw []byte
	err := websocket.Message.Receive(ws, &raw)
	return raw, err
}
