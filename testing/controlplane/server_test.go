package controlplane

import (
	"net/http"
	"testing"

	"openflare/agent/protocol"
)

func TestUnknownRoutesGetGinsPlainText404(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, protocol.APIPrefix + "/nope"},
		{http.MethodGet, protocol.PathHeartbeat},
		{http.MethodPost, protocol.PathActive},
		{http.MethodGet, "/"},
	} {
		r := call(t, s, tc.method, tc.path, tok, nil)
		if r.status != http.StatusNotFound || string(r.body) != notFoundBody || r.header.Get("Content-Type") != "text/plain" {
			t.Errorf("%s %s: %d %q (%s), want gin's plain-text 404", tc.method, tc.path, r.status, r.body, r.header.Get("Content-Type"))
		}
	}
}

func TestTrailingSlashRedirects(t *testing.T) {
	s := startServer(t)
	req, err := http.NewRequest(http.MethodPost, s.URL()+protocol.PathHeartbeat+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != protocol.PathHeartbeat {
		t.Fatalf("got %d to %q, want 307 to %s", resp.StatusCode, resp.Header.Get("Location"), protocol.PathHeartbeat)
	}
}

func TestSetDownAndBackOnTheSamePort(t *testing.T) {
	s := startServer(t)
	id, tok := s.AddNode("n")
	url := s.URL()
	ws := mustDialWS(t, s, id, tok)
	if err := s.SetDown(true); err != nil {
		t.Fatal(err)
	}
	if _, err := readWSRaw(ws); err == nil {
		t.Fatal("the WebSocket survived SetDown")
	}
	if err := s.WaitWS(testContext(t), id, false); err != nil {
		t.Fatal(err)
	}
	if resp, err := doRaw(t, s, http.MethodPost, protocol.PathHeartbeat, tok); err == nil {
		resp.Body.Close()
		t.Fatalf("a request succeeded while down: %d", resp.StatusCode)
	}
	if err := s.SetDown(false); err != nil {
		t.Fatal(err)
	}
	if s.URL() != url {
		t.Fatalf("URL changed from %s to %s", url, s.URL())
	}
	heartbeat(t, s, tok, payload("v1"))
	if err := s.SetDown(false); err != nil {
		t.Fatalf("SetDown(false) while up: %v", err)
	}
}

func TestCloseClosesWebSockets(t *testing.T) {
	s := New()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	id, tok := s.AddNode("n")
	ws := mustDialWS(t, s, id, tok)
	s.Close()
	if _, err := readWSRaw(ws); err == nil {
		t.Fatal("the WebSocket survived Close")
	}
	if err := s.SetDown(false); err == nil {
		t.Fatal("SetDown(false) after Close succeeded")
	}
}
