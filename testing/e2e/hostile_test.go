package e2e

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/agent/testhook"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

// A hostile control plane publishes a template that runs Lua at nginx -t
// time, reads a root-only file and writes a log anywhere: nothing of it
// happens, the version is refused naming the directive, and the previous
// config keeps serving.
func TestHostileTemplateRefused(t *testing.T) {
	cp := controlPlane(t)
	appV1(t, cp)
	dir := t.TempDir()
	pwned := filepath.Join(dir, "pwned")
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("s3cr3t-token\n"), 0o600)
	for _, evil := range []struct{ line, directive string }{
		{`    init_by_lua_block { local f = io.open("` + pwned + `", "w") f:write("x") f:close() }`, "init_by_lua_block"},
		{`    include ` + secret + `;`, "include"},
		{`    error_log ` + pwned + `.log;`, "error_log"},
	} {
		tmpl := strings.Replace(controlplane.StockMainTemplate, "http {\n", "http {\n"+evil.line+"\n", 1)
		v := publish(t, cp, controlplane.Source{
			Routes:    []controlplane.Route{proxyRoute(1, "app.test", origin(t, "evil"))},
			OpenResty: map[string]any{"main_config_template": tmpl, "origin_error_page_enabled": false},
		})
		rec := waitApplyLog(t, cp, v.Version, protocol.ResultWarning)
		if !strings.Contains(rec.Message, "template policy") || !strings.Contains(rec.Message, evil.directive) {
			t.Fatalf("apply log does not name the refusal: %s", rec.Message)
		}
		if strings.Contains(rec.Message, "s3cr3t") {
			t.Fatal("the secret file's content reached the server")
		}
		if !strings.Contains(rec.Message, "held until the agent restarts") {
			t.Fatalf("apply log does not say the version is held: %s", rec.Message)
		}
		waitServes(t, "app.test", "/", "origin-ok v1")
	}
	for _, p := range []string{pwned, pwned + ".log"} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s was created", p)
		}
	}
}

// Issue 20 B1, and what the template policy's reader could ever miss: a
// Lua block behind an escaped '$' (nginx opens the location's block where
// a careless reader sees the word go on) is refused by the reader; and
// with the reader made blind to the Lua block on purpose (a test hook),
// nginx's own reading of the probe refuses it. Either way the Lua never
// runs, no request reaches it, and v1 keeps serving.
func TestTemplateReaderCannotBeFooled(t *testing.T) {
	cp := controlPlane(t)
	n, _ := appV1(t, cp)
	dir := t.TempDir()
	for _, tc := range []struct {
		name, blind, location, path, want string
	}{
		{"escaped dollar", "", `/x\${`, "/x%5C$", "backslash outside quotes escapes '$'"},
		{"blind reader", "content_by_lua_block", `/blind {`, "/blind", `nginx reads a directive "content_by_lua_block"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.blind != "" {
				n.stop()
				n.start(testhook.PolicyBlindEnv + "=" + tc.blind)
			}
			marker := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			evil := `    server { listen 80; server_name evil.test; location ` + tc.location +
				` content_by_lua_block { local f = io.open("` + marker + `", "w") f:write("x") f:close() ngx.say("pwned") } } }`
			tmpl := strings.Replace(controlplane.StockMainTemplate, "http {\n", "http {\n"+evil+"\n", 1)
			v := publish(t, cp, controlplane.Source{
				Routes:    []controlplane.Route{proxyRoute(1, "app.test", origin(t, "evil"))},
				OpenResty: map[string]any{"main_config_template": tmpl, "origin_error_page_enabled": false},
			})
			rec := waitApplyLog(t, cp, v.Version, protocol.ResultWarning)
			if !strings.Contains(rec.Message, "template policy") || !strings.Contains(rec.Message, tc.want) {
				t.Fatalf("apply log does not name the refusal: %s", rec.Message)
			}
			waitServes(t, "app.test", "/", "origin-ok v1")
			if r := get("evil.test", tc.path); strings.Contains(r.body, "pwned") {
				t.Fatalf("the Lua answered: %d %q", r.status, r.body)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the Lua ran: its marker file exists")
			}
		})
	}
}

// A server that redirects its agent elsewhere gets nothing: the token never
// reaches the redirect's target, and the agent says why it is not talking.
func TestRedirectNotFollowed(t *testing.T) {
	cp := controlPlane(t)
	n, _ := appV1(t, cp)
	var mu sync.Mutex
	var stolen []string
	thief := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		stolen = append(stolen, r.Header.Get(protocol.TokenHeader))
		mu.Unlock()
	}))
	t.Cleanup(thief.Close)
	cp.Inject(controlplane.Fault{Path: protocol.PathHeartbeat, RedirectTo: thief.URL, Times: 3})
	n.waitLog("redirect, not followed", 30*time.Second)
	// The agent recovers once the server stops redirecting.
	before := len(cp.Heartbeats())
	testsupport.WaitFor(t, 60*time.Second, "a heartbeat after the redirects", func() bool { return len(cp.Heartbeats()) > before })
	mu.Lock()
	defer mu.Unlock()
	if len(stolen) != 0 {
		t.Fatalf("the redirect target received %d requests", len(stolen))
	}
}

// A visitor picks the host name under a wildcard domain; the origin error
// page shows it escaped, never as markup.
func TestErrorPageEscapesHost(t *testing.T) {
	cp := controlPlane(t)
	// A raw origin: Go's server would refuse the Host itself.
	ln := listen(t, "127.0.0.1:0")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 4096)
				c.Read(buf)
				io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}()
		}
	}()
	route := proxyRoute(1, "*.wild.test", "http://"+ln.Addr().String())
	ref := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{route}})
	n := newNode(t, cp, nil)
	n.start()
	waitApplyLog(t, cp, ref.Version, protocol.ResultSuccess)
	var body string
	testsupport.WaitFor(t, 30*time.Second, "the origin error page", func() bool {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:80", 2*time.Second)
		if err != nil {
			return false
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x<img>y.wild.test\r\nConnection: close\r\n\r\n")
		b, _ := io.ReadAll(conn)
		body = string(b)
		return strings.Contains(body, " 502 ")
	})
	if strings.Contains(body, "x<img>y") || !strings.Contains(body, "x&#60;img&#62;y.wild.test") {
		t.Fatalf("error page:\n%s", body)
	}
}
