package controlplane

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/testsupport"
)

func TestVersionsIncrementPerDay(t *testing.T) {
	s := startServer(t)
	day := time.Now().Format("20060102")
	v1 := s.PublishWithChecksum(vectorBSource, nil, "c1")
	v2 := s.PublishWithChecksum(vectorBSource, nil, "c2")
	if v1.Version != day+"-001" || v2.Version != day+"-002" {
		t.Fatalf("versions %q %q, want %s-001 and %s-002", v1.Version, v2.Version, day, day)
	}
	if a := s.Active(); a == nil || *a != v2 {
		t.Fatalf("active %+v, want %+v", a, v2)
	}
}

func TestActiveWithoutVersion(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	wantError(t, call(t, s, http.MethodGet, protocol.PathActive, tok, nil), http.StatusBadRequest, msgNoActiveVersion)
	wantError(t, call(t, s, http.MethodGet, protocol.PathActive, "bad", nil), http.StatusUnauthorized, msgBadAgentToken)
	if s.Active() != nil {
		t.Fatal("Active() without versions is not nil")
	}
}

func TestActiveStripsRuntimeFiles(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	cert, key := SelfSignedCert(1, "demo.example.com")
	files := append(CertFiles(1, cert, key),
		protocol.SupportFile{Path: "waf_config.json", Content: "{}"},
		protocol.SupportFile{Path: "pow_config.json", Content: "{}"},
		protocol.SupportFile{Path: "openresty_config.json", Content: "{}"},
		protocol.SupportFile{Path: "error_pages/origin_error.html.tmpl", Content: "<p>{{status}}</p>"},
	)
	ref := s.PublishWithChecksum(vectorBSource, files, strings.Repeat("ab", 32))
	var ac protocol.ActiveConfig
	wantOK(t, call(t, s, http.MethodGet, protocol.PathActive, tok, nil), &ac)
	if ac.Version != ref.Version || ac.Checksum != ref.Checksum || ac.SourceConfigJSON != vectorBSource {
		t.Fatalf("active config %+v, want %+v with the published source", ac, ref)
	}
	want := []protocol.SupportFile{files[0], files[1], files[5]}
	if !reflect.DeepEqual(ac.SupportFiles, want) {
		t.Fatalf("support files %+v, want %+v", ac.SupportFiles, want)
	}
	if _, err := time.Parse(time.RFC3339Nano, ac.CreatedAt); err != nil {
		t.Fatalf("created_at %q: %v", ac.CreatedAt, err)
	}

	s.PublishWithChecksum(vectorBSource, []protocol.SupportFile{}, "c")
	if r := call(t, s, http.MethodGet, protocol.PathActive, tok, nil); !strings.Contains(string(r.env.Data), `"support_files":[]`) {
		t.Fatalf("empty list: %s, want support_files []", r.env.Data)
	}
	s.PublishWithChecksum(vectorBSource, []protocol.SupportFile{{Path: "waf_config.json", Content: "{}"}}, "c")
	if r := call(t, s, http.MethodGet, protocol.PathActive, tok, nil); !strings.Contains(string(r.env.Data), `"support_files":[]`) {
		t.Fatalf("only runtime files: %s, want support_files []", r.env.Data)
	}
	s.PublishWithChecksum(vectorBSource, nil, "c")
	if r := call(t, s, http.MethodGet, protocol.PathActive, tok, nil); !strings.Contains(string(r.env.Data), `"support_files":null`) {
		t.Fatalf("no files: %s, want support_files null", r.env.Data)
	}
}

// A source the renderer always rejects gets the placeholder checksum and
// support_files null, exactly as in the server's fixture.
func TestPublishRenderFailureStoresPlaceholder(t *testing.T) {
	dir := testsupport.SharedDir(t, "fixtures/render/25-fail-no-domains")
	var fixture protocol.ActiveConfig
	readJSON(t, filepath.Join(dir, "e4.json"), &fixture)
	s := startServer(t)
	_, tok := s.AddNode("n")
	ref, err := s.Publish(fixture.SourceConfigJSON, nil)
	if err == nil {
		t.Fatal("Publish of a source without domains reported no render error")
	}
	if ref.Checksum != fixture.Checksum || ref.Checksum != placeholderChecksum(fixture.SourceConfigJSON) {
		t.Fatalf("checksum %s, want the placeholder %s", ref.Checksum, fixture.Checksum)
	}
	r := call(t, s, http.MethodGet, protocol.PathActive, tok, nil)
	if !strings.Contains(string(r.env.Data), `"support_files":null`) {
		t.Fatalf("E4 %s: want support_files null", r.env.Data)
	}
}

// Depends on agent/render: PROTOCOL 4.3 vector B.
func TestPublishVectorB(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	ref, err := s.Publish(vectorBSource, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Checksum != vectorBChecksum {
		t.Fatalf("checksum %s, want %s", ref.Checksum, vectorBChecksum)
	}
	var ac protocol.ActiveConfig
	wantOK(t, call(t, s, http.MethodGet, protocol.PathActive, tok, nil), &ac)
	if ac.SupportFiles == nil || len(ac.SupportFiles) != 0 {
		t.Fatalf("support files %+v, want [] (the renderer's runtime files stripped)", ac.SupportFiles)
	}
}

// Depends on agent/render: publishing fixture 01's source gives its checksum
// and E4 ships the renderer-added error page, like the real server.
func TestPublishFixture01(t *testing.T) {
	dir := testsupport.SharedDir(t, "fixtures/render/01-stock-defaults")
	var fixture protocol.ActiveConfig
	readJSON(t, filepath.Join(dir, "e4.json"), &fixture)
	s := startServer(t)
	_, tok := s.AddNode("n")
	ref, err := s.Publish(fixture.SourceConfigJSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Checksum != fixture.Checksum {
		t.Fatalf("checksum %s, want %s", ref.Checksum, fixture.Checksum)
	}
	var ac protocol.ActiveConfig
	wantOK(t, call(t, s, http.MethodGet, protocol.PathActive, tok, nil), &ac)
	if !reflect.DeepEqual(ac.SupportFiles, fixture.SupportFiles) {
		t.Fatalf("support files %d, want the fixture's %d", len(ac.SupportFiles), len(fixture.SupportFiles))
	}
}

// Depends on agent/render: an HTTPS route built with Source and a
// SelfSignedCert renders, and E4 ships the certificate pair.
func TestPublishHTTPSSource(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	cert, key := SelfSignedCert(1, "secure.example.com")
	src := Source{Routes: []Route{{ID: 1, SiteName: "secure", Domains: []string{"secure.example.com"},
		OriginURL: "http://127.0.0.1:8080", EnableHTTPS: true, DomainCertIDs: []uint64{1}, RedirectHTTP: true}}}
	ref, err := s.Publish(src.JSON(), CertFiles(1, cert, key))
	if err != nil {
		t.Fatal(err)
	}
	if ref.Checksum == placeholderChecksum(src.JSON()) {
		t.Fatal("placeholder checksum for a renderable source")
	}
	var ac protocol.ActiveConfig
	wantOK(t, call(t, s, http.MethodGet, protocol.PathActive, tok, nil), &ac)
	var paths []string
	for _, f := range ac.SupportFiles {
		paths = append(paths, f.Path)
	}
	if want := []string{"1.crt", "1.key", "error_pages/origin_error.html.tmpl"}; !reflect.DeepEqual(paths, want) {
		t.Fatalf("support files %v, want %v", paths, want)
	}
}

func TestActivateRollsBack(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	v1 := s.PublishWithChecksum(vectorBSource, nil, "c1")
	s.PublishWithChecksum(vectorBSource, nil, "c2")
	if err := s.Activate(v1.Version); err != nil {
		t.Fatal(err)
	}
	hb, _ := heartbeat(t, s, tok, payload("v1"))
	if hb.ActiveConfig == nil || *hb.ActiveConfig != v1 {
		t.Fatalf("heartbeat active_config %+v, want %+v", hb.ActiveConfig, v1)
	}
	var ac protocol.ActiveConfig
	wantOK(t, call(t, s, http.MethodGet, protocol.PathActive, tok, nil), &ac)
	if ac.Version != v1.Version || ac.Checksum != "c1" {
		t.Fatalf("E4 %+v, want %+v", ac, v1)
	}
	if err := s.Activate("19990101-001"); err == nil {
		t.Fatal("activating an unknown version succeeded")
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
