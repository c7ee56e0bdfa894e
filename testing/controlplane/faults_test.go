package controlplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"openflare/agent/protocol"
)

// newRequest builds one heartbeat-shaped request.
func newRequest(t *testing.T, s *Server, method, path, token string) *http.Request {
	t.Helper()
	body, err := json.Marshal(payload("v1"))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, s.URL()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(protocol.TokenHeader, token)
	return req
}

// doRaw sends one heartbeat-shaped request and returns the response.
func doRaw(t *testing.T, s *Server, method, path, token string) (*http.Response, error) {
	t.Helper()
	return noKeepAlive().Do(newRequest(t, s, method, path, token))
}

func TestFaultStatusAndTimes(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	s.Inject(Fault{Path: protocol.PathHeartbeat, Status: http.StatusInternalServerError, Times: 2})
	for range 2 {
		wantError(t, call(t, s, http.MethodPost, protocol.PathHeartbeat, tok, payload("v1")), http.StatusInternalServerError, msgInternal)
	}
	heartbeat(t, s, tok, payload("v1"))
	if n := s.Nodes()[0].Heartbeats; n != 1 {
		t.Fatalf("%d heartbeats processed, want only the unfaulted one", n)
	}

	s.Inject(Fault{Status: http.StatusUnauthorized})
	wantError(t, call(t, s, http.MethodPost, protocol.PathRegister, s.DiscoveryToken(), payload("v1")), http.StatusUnauthorized, msgBadRegisterToken)
	if got := s.Requests(protocol.PathHeartbeat); got != 3 {
		t.Fatalf("Requests(heartbeat) = %d, want 3", got)
	}
}

func TestFaultMatchesItsPathOnly(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	s.Inject(Fault{Path: protocol.PathHeartbeat, Status: http.StatusBadGateway})
	wantError(t, call(t, s, http.MethodGet, protocol.PathActive, tok, nil), http.StatusBadRequest, msgNoActiveVersion)
	wantOK(t, call(t, s, http.MethodGet, AdminPathState, "", nil, AdminHeader, s.AdminToken()), nil)
	wantError(t, call(t, s, http.MethodPost, protocol.PathHeartbeat, tok, payload("v1")), http.StatusBadGateway, "Bad Gateway")
}

func TestFaultDelay(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	const d = 200 * time.Millisecond
	s.Inject(Fault{Path: protocol.PathHeartbeat, Delay: d})
	start := time.Now()
	heartbeat(t, s, tok, payload("v1"))
	if took := time.Since(start); took < d {
		t.Fatalf("delayed reply took %v, want at least %v", took, d)
	}
}

func TestFaultDelayIsAbortedByClose(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	s.Inject(Fault{Path: protocol.PathHeartbeat, Delay: time.Hour})
	req := newRequest(t, s, http.MethodPost, protocol.PathHeartbeat, tok)
	errc := make(chan error, 1)
	go func() {
		resp, err := noKeepAlive().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	if err := s.waitFor(testContext(t), func() bool { return s.requests[protocol.PathHeartbeat] == 1 }); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not abort the delayed reply")
	}
	if err := <-errc; err == nil {
		t.Fatal("the delayed request got a reply after Close")
	}
}

func TestFaultTruncate(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	s.PublishWithChecksum(vectorBSource, nil, "c")
	s.Inject(Fault{Path: protocol.PathActive, Truncate: true})
	resp, err := doRaw(t, s, http.MethodGet, protocol.PathActive, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.ContentLength <= 0 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("status %d, length %d, read error %v: want 200, a length and unexpected EOF", resp.StatusCode, resp.ContentLength, err)
	}
	if int64(len(body)) != resp.ContentLength/2 {
		t.Fatalf("got %d body bytes, want half of %d", len(body), resp.ContentLength)
	}
	if s.Requests(protocol.PathActive) != 1 {
		t.Fatal("the truncated request was not counted")
	}
}

func TestFaultDrop(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	s.Inject(Fault{Path: protocol.PathHeartbeat, Drop: true})
	resp, err := doRaw(t, s, http.MethodPost, protocol.PathHeartbeat, tok)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("dropped request got status %d", resp.StatusCode)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("error %v, want EOF or connection reset", err)
	}
	heartbeat(t, s, tok, payload("v1"))
}

func TestFaultOversize(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	const n = 3 << 20
	s.Inject(Fault{Path: protocol.PathHeartbeat, Oversize: n})
	resp, err := doRaw(t, s, http.MethodPost, protocol.PathHeartbeat, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || resp.ContentLength != n || len(body) != n {
		t.Fatalf("status %d, Content-Length %d, %d bytes, err %v: want 200 and %d bytes", resp.StatusCode, resp.ContentLength, len(body), err, n)
	}
	var env protocol.Envelope
	if err := json.Unmarshal(body, &env); err != nil || env.ErrorMsg != "" {
		t.Fatalf("oversized body is not a valid envelope: %v", err)
	}
}

func TestFaultGarbage(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	s.Inject(Fault{Path: protocol.PathHeartbeat, Garbage: true})
	r := call(t, s, http.MethodPost, protocol.PathHeartbeat, tok, payload("v1"))
	if r.status != http.StatusOK || string(r.body) != GarbageBody || json.Valid(r.body) {
		t.Fatalf("got %d %q, want 200 with a non-JSON body", r.status, r.body)
	}
}
