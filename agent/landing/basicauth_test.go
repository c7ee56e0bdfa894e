package landing

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"openflare/agent/protocol"
	"openflare/agent/render"
	"openflare/testing/testsupport"
)

// openArgs are the locations basic auth leaves open: the agent's PoW, SW
// and error-page machinery.
var openArgs = map[string]bool{
	"= /.within.website/x/cmd/anubis/api/pass-challenge": true,
	"= /.within.website/x/cmd/anubis/api/make-challenge": true,
	"/.within.website/x/cmd/anubis/static/":              true,
	"= /sw.js":                                           true,
	"= /offline.html":                                    true,
	"= /__openflare_sw_challenge":                        true,
	"@__openflare_origin_error":                          true,
}

const authLine = `            if auth ~= "Basic `

// checkCovered asserts that got is orig with lines added only, and that
// in every server block of got with a basic-auth check every location
// but the open ones starts with the check, and every location matching a
// prefix not ending in `/` holds a guard that keeps the prefix to a path
// segment. It returns the number of checks and guards in got.
func checkCovered(t *testing.T, name, orig, got string) (checks, guards int) {
	t.Helper()
	gl := strings.SplitAfter(got, "\n")
	j := 0
	for _, l := range strings.SplitAfter(orig, "\n") {
		for j < len(gl) && gl[j] != l {
			j++
		}
		if j == len(gl) {
			t.Fatalf("%s: the rewrite removed or changed %q:\n%s", name, l, got)
		}
		j++
	}
	for _, server := range strings.Split(got, "\nserver {\n")[1:] {
		server, _, _ = strings.Cut(server, "\n}\n")
		if !strings.Contains(server, authLine) {
			continue
		}
		lines := strings.Split(server, "\n")
		for i, l := range lines {
			arg, ok := strings.CutPrefix(strings.TrimSpace(l), "location ")
			if !ok {
				continue
			}
			arg = strings.TrimSuffix(arg, " {")
			checked := i+3 < len(lines) && strings.TrimSpace(lines[i+1]) == "rewrite_by_lua_block {" && strings.HasPrefix(strings.TrimSpace(lines[i+3]), `if auth ~= "Basic `)
			if openArgs[arg] {
				if checked {
					t.Errorf("%s: the agent's own location %q asks for credentials", name, arg)
				}
				continue
			}
			if !checked {
				t.Errorf("%s: location %q is not covered by basic auth:\n%s", name, arg, server)
			}
			checks++
			if pattern, ok := strings.CutPrefix(arg, "~ "); ok {
				guards++
				if !strings.HasPrefix(l, "        location ") {
					t.Errorf("%s: guard %q is not nested in a location", name, arg)
				}
				prefix := strings.TrimSuffix(strings.TrimPrefix(pattern, "^"), "[^/]")
				re := regexp.MustCompile(pattern)
				if !re.MatchString(unquote(prefix)+"foo") || re.MatchString(unquote(prefix)) || re.MatchString(unquote(prefix)+"/x") {
					t.Errorf("%s: guard %q does not take exactly what goes on past its prefix without a /", name, arg)
				}
			}
			if strings.HasPrefix(arg, "/") && !strings.HasSuffix(arg, "/") {
				guard := "        location ~ ^" + regexp.QuoteMeta(arg) + "[^/] {"
				rest := strings.Join(lines[i+1:], "\n")
				end := strings.Index(rest, "\n    }")
				if end < 0 || !strings.Contains(rest[:end], guard) {
					t.Errorf("%s: location %q also takes %sfoo: no %q in it", name, arg, arg, guard)
				}
			}
		}
	}
	return checks, guards
}

// unquote undoes regexp.QuoteMeta on a literal.
func unquote(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// On every captured render, a route config without basic auth lands as
// rendered, and one with it is covered in every location that is not the
// agent's own: fixture 22's API proxy gains the check and a guard that
// keeps /apifoo out of it.
func TestBasicAuthCoversEveryFixture(t *testing.T) {
	root := testsupport.SharedDir(t, "fixtures/render")
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	protected := 0
	for _, e := range entries {
		path := filepath.Join(root, e.Name(), "routes.conf")
		if _, err := os.Stat(path); err != nil {
			continue
		}
		route := testsupport.ReadFile(t, path)
		got := coverBasicAuth(route)
		if !strings.Contains(route, authLine) {
			if got != route {
				t.Errorf("%s has no basic auth, and the rewrite changed it", e.Name())
			}
			continue
		}
		protected++
		checks, guards := checkCovered(t, e.Name(), route, got)
		before := strings.Count(route, authLine)
		if e.Name() == "22-pages-spa-api-http" && (checks != before+2 || guards != 1) {
			t.Errorf("%s: %d checks and %d guards, want %d and 1:\n%s", e.Name(), checks, guards, before+2, got)
		}
	}
	if protected < 2 {
		t.Fatalf("%d fixtures with basic auth: fixtures 14 and 22 are missing", protected)
	}
	// What lands is the rewrite with this node's paths.
	route := testsupport.ReadFile(t, filepath.Join(root, "22-pages-spa-api-http", "routes.conf"))
	if got := testPaths("/r").RouteText(route); !strings.Contains(got, "    location /api {\n        rewrite_by_lua_block {\n") || !strings.Contains(got, "        location ~ ^/api[^/] {\n") {
		t.Errorf("the landed route config is not covered:\n%s", got)
	}
}

// renderFixture renders a fixture's source after edit changes it.
func renderFixture(t *testing.T, name string, edit func(src map[string]any)) string {
	t.Helper()
	var e4 protocol.ActiveConfig
	if err := json.Unmarshal([]byte(testsupport.ReadFile(t, filepath.Join(testsupport.SharedDir(t, "fixtures/render/"+name), "e4.json"))), &e4); err != nil {
		t.Fatal(err)
	}
	var src map[string]any
	if err := json.Unmarshal([]byte(e4.SourceConfigJSON), &src); err != nil {
		t.Fatal(err)
	}
	edit(src)
	b, err := json.Marshal(src)
	if err != nil {
		t.Fatal(err)
	}
	out, err := render.Config(string(b), e4.SupportFiles)
	if err != nil {
		t.Fatalf("render %s: %v", name, err)
	}
	return out.Route
}

func withBasicAuth(r any) {
	m := r.(map[string]any)
	m["basic_auth_enabled"], m["basic_auth_username"], m["basic_auth_password"] = true, "alice", "s3cret"
}

// Every server shape render gives a protected route is covered: HTTP and
// HTTPS servers with PoW and the service worker (their locations stay
// open), a Pages site behind an HTTPS redirect, and an API prefix with
// regular-expression metacharacters in it.
func TestBasicAuthCoversRenderedShapes(t *testing.T) {
	pow := func(src map[string]any) {
		g := src["waf"].(map[string]any)["rule_groups"].([]any)[0].(map[string]any)
		g["graph"] = map[string]any{"entry": "start", "nodes": map[string]any{
			"start": map[string]any{"type": "start", "config": map[string]any{}, "next": map[string]any{"next": "pow"}},
			"pow":   map[string]any{"type": "pow", "config": map[string]any{"algorithm": "fast", "difficulty": 4}, "next": map[string]any{"next": "allow"}},
			"allow": map[string]any{"type": "allow", "config": map[string]any{}},
		}}
	}
	for _, c := range []struct {
		name, fixture string
		edit          func(src map[string]any)
		checks        int // per protected server: the locations besides the open ones
		guards        int
		servers       int
		guard         string
	}{
		{"proxy with PoW and SW", "21-waf-pow-and-block", func(src map[string]any) {
			withBasicAuth(src["routes"].([]any)[0])
		}, 1, 0, 2, ""},
		{"Pages with PoW, SW and a redirect", "23-pages-https-redirect-sw", func(src map[string]any) {
			withBasicAuth(src["routes"].([]any)[0])
			pow(src)
		}, 4, 1, 1, "        location ~ ^/api[^/] {\n"},
		{"Pages API prefix with metacharacters", "23-pages-https-redirect-sw", func(src map[string]any) {
			r := src["routes"].([]any)[0].(map[string]any)
			withBasicAuth(r)
			r["pages_deployment"].(map[string]any)["api_proxy_path"] = "/v1.0/a+b(c)[d]|e*?^#"
		}, 4, 1, 1, `        location ~ ^/v1\.0/a\+b\(c\)\[d\]\|e\*\?\^#[^/] {` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			route := renderFixture(t, c.fixture, c.edit)
			got := coverBasicAuth(route)
			checks, guards := checkCovered(t, c.name, route, got)
			if checks != c.checks*c.servers || guards != c.guards*c.servers {
				t.Errorf("%d checks and %d guards, want %d and %d:\n%s", checks, guards, c.checks*c.servers, c.guards*c.servers, got)
			}
			if c.guard != "" && !strings.Contains(got, c.guard) {
				t.Errorf("no %q:\n%s", c.guard, got)
			}
		})
	}
}

// Text that is not render's shape lands as it is: a server whose location
// never closes, and a check whose credentials are not base64.
func TestBasicAuthLeavesOtherShapes(t *testing.T) {
	check := basicAuthHead + "YWxpY2U6czNjcmV0" + basicAuthTail
	for name, text := range map[string]string{
		"unclosed location": "server {\n    location / {\n" + check + "        proxy_pass http://o;\n    location /api {\n        proxy_pass http://a;\n}\n",
		"not base64":        "server {\n    location / {\n" + strings.Replace(check, "YWxpY2U6czNjcmV0", `x" or "y`, 1) + "    }\n    location /api {\n    }\n}\n",
	} {
		if got := coverBasicAuth(text); got != text {
			t.Errorf("%s: changed:\n%s", name, got)
		}
	}
}
