package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

// recordingOrigin is a backend answering "<name> <path>" that keeps the
// request URI of everything it is sent.
type recordingOrigin struct {
	url  string
	mu   sync.Mutex
	uris []string
}

func newRecordingOrigin(t *testing.T, name string) *recordingOrigin {
	t.Helper()
	o := &recordingOrigin{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.uris = append(o.uris, r.URL.RequestURI())
		o.mu.Unlock()
		fmt.Fprintf(w, "%s %s", name, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	o.url = srv.URL
	return o
}

func (o *recordingOrigin) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.uris)
}

// authGet sends GET http://host/path to nginx with the given Authorization
// header ("" sends none).
func authGet(host, path, auth string) reply {
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:80"+path, nil)
	if err != nil {
		return reply{err: err}
	}
	req.Host = host
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	c := &http.Client{
		Transport:     &http.Transport{DisableKeepAlives: true},
		Timeout:       5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: string(b), header: resp.Header}
}

func basicAuth(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// withAPIProxy sets fields of route i's pages_deployment in a source:
// controlplane.PagesDeployment has no API proxy fields.
func withAPIProxy(t *testing.T, source string, i int, fields map[string]any) string {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal([]byte(source), &doc); err != nil {
		t.Fatal(err)
	}
	d := doc["routes"].([]any)[i].(map[string]any)["pages_deployment"].(map[string]any)
	for k, v := range fields {
		d[k] = v
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantDenied asserts a 401 that asks for basic credentials.
func wantDenied(t *testing.T, host, path, auth string) {
	t.Helper()
	r := authGet(host, path, auth)
	if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") != `Basic realm="Restricted"` {
		t.Errorf("GET %s with Authorization %q: %d %q %v, want 401 asking for credentials", path, auth, r.status, r.body, r.err)
	}
}

// Basic auth on a Pages site covers its API proxy: without credentials
// (or with wrong ones) every path, the API's included, is refused and the
// API origin sees nothing; with them the API answers for /api and /api/…,
// and /apifoo, which is no path under /api, is the site's (its SPA shell),
// never the API's.
func TestBasicAuthPagesAPIProxy(t *testing.T) {
	cp := controlPlane(t)
	api := newRecordingOrigin(t, "api-ok")
	pkg, files, total := sitePackage(t, map[string]string{"index.html": "private home", "guide.html": "private guide"})
	cp.SetPagesPackage(5, pkg, files, total)
	src := controlplane.Source{Routes: []controlplane.Route{{
		ID: 1, SiteName: "private", Domains: []string{"private.test"},
		BasicAuthEnabled: true, BasicAuthUsername: "alice", BasicAuthPassword: "s3cret",
		Pages: &controlplane.PagesDeployment{ProjectID: 5, SPAFallbackEnabled: true},
	}}}
	// With a rewrite: its `rewrite … break` runs in the check's phase,
	// before it, and must not skip it.
	source := withAPIProxy(t, src.JSON(), 0, map[string]any{
		"api_proxy_enabled": true, "api_proxy_path": "/api", "api_proxy_pass": api.url, "api_proxy_rewrite": "/v2/",
	})
	ref, err := cp.Publish(source, nil)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	n := newNode(t, cp, nil)
	n.start()
	waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	creds := basicAuth("alice", "s3cret")
	testsupport.WaitFor(t, 60*time.Second, "the site to serve with credentials", func() bool {
		r := authGet("private.test", "/", creds)
		return r.status == 200 && r.body == "private home"
	})

	for _, path := range []string{"/", "/guide.html", "/api", "/api/", "/api/secret", "/api/secret?k=v", "/apifoo", "/apifoo/x", "/nope"} {
		wantDenied(t, "private.test", path, "")
	}
	for _, auth := range []string{basicAuth("alice", "wrong"), "basic " + base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))} {
		wantDenied(t, "private.test", "/api/secret", auth)
	}
	if got := api.seen(); len(got) != 0 {
		t.Fatalf("the API origin was sent requests without valid credentials: %q", got)
	}

	for path, want := range map[string]string{
		"/api/secret": "api-ok /v2/secret",
		"/api":        "api-ok /v2",
		"/apifoo":     "private home",
		"/apifoo/x":   "private home",
		"/guide.html": "private guide",
	} {
		if r := authGet("private.test", path, creds); r.status != 200 || r.body != want {
			t.Errorf("GET %s with credentials: %d %q %v, want 200 %q", path, r.status, r.body, r.err, want)
		}
	}
	got := api.seen()
	slices.Sort(got)
	if want := []string{"/v2", "/v2/secret"}; !slices.Equal(got, want) {
		t.Errorf("the API origin was sent %q, want %q", got, want)
	}
}

// A proxy route with basic auth (fixture 14's shape) keeps working: the
// origin answers only requests with the exact credentials.
func TestBasicAuthProxyRoute(t *testing.T) {
	cp := controlPlane(t)
	o := newRecordingOrigin(t, "origin-ok")
	r := proxyRoute(1, "guarded.test", o.url)
	r.BasicAuthEnabled, r.BasicAuthUsername, r.BasicAuthPassword = true, "admin", `p@ss:w0rd "q" ü`
	ref := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{r}})
	n := newNode(t, cp, nil)
	n.start()
	waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	creds := basicAuth("admin", `p@ss:w0rd "q" ü`)
	testsupport.WaitFor(t, 60*time.Second, "the route to serve with credentials", func() bool {
		r := authGet("guarded.test", "/x", creds)
		return r.status == 200 && r.body == "origin-ok /x"
	})
	before := len(o.seen())
	for _, auth := range []string{"", basicAuth("admin", "wrong"), "basic " + creds[len("Basic "):]} {
		for _, path := range []string{"/", "/x"} {
			wantDenied(t, "guarded.test", path, auth)
		}
	}
	if got := o.seen()[before:]; len(got) != 0 {
		t.Fatalf("the origin was sent requests without valid credentials: %q", got)
	}
	if r := authGet("guarded.test", "/", creds); r.status != 200 || r.body != "origin-ok /" {
		t.Errorf("GET / with credentials: %d %q %v", r.status, r.body, r.err)
	}
}
