package selftest_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"openflare/agent/landing"
	"openflare/agent/nginx"
	"openflare/agent/selftest"
)

// The block agent/landing emits and the request agent/nginx sends meet:
// a stand-in for nginx serves the landed main config's self-test block as
// nginx reads it (its listen socket, server_name, location and handler,
// the generation its set line names), knowing nothing of package
// selftest, and nginx's self-test passes against it, with Lua (probe.lua
// answers) and without (the safe fallback's return).
func TestLandedBlockAnswersTheSelfTest(t *testing.T) {
	for name, mainText := range map[string]string{
		"fallback": "events {}\nhttp {\n}\n",
		"lua":      "events {}\nhttp {\n    lua_shared_dict openflare_waf_config 1m;\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			p := landing.Paths{
				Main:             filepath.Join(root, "nginx.conf"),
				Route:            filepath.Join(root, "routes.conf"),
				LuaDir:           filepath.Join(root, "lua"),
				OpenRestyLuaDir:  filepath.Join(root, "lua"),
				CertDir:          filepath.Join(root, "certs"),
				OpenRestyCertDir: filepath.Join(root, "certs"),
				RuntimeConfigDir: filepath.Join(root, "runtime"),
				SelfTestDir:      filepath.Join(root, "selftest"),
			}
			set, err := landing.Plan(p, mainText, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			landed := map[string]string{}
			for _, f := range set.Files {
				landed[f.Path] = string(f.Data)
			}
			if err := os.Mkdir(p.SelfTestDir, selftest.DirMode); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(p.Main, []byte(landed[p.Main]), 0o640)
			serveBlock(t, landed[p.Main], landed)
			ctl := &nginx.Ctl{MainConfig: p.Main, ErrorLog: filepath.Join(root, "error.log")}
			if err := ctl.SelfTest(context.Background(), 0); err != nil {
				t.Fatalf("self-test of the landed block: %v\n%s", err, landed[p.Main])
			}
		})
	}
}

// serveBlock answers on the socket of mainText's self-test server block
// as nginx would: only its server name and exact location, with its
// handler, `return 200 "…";` or content_by_lua_file of a landed script
// whose answer is one ngx.say of a string and a variable.
func serveBlock(t *testing.T, mainText string, landed map[string]string) {
	t.Helper()
	var socket, host, path, body string
	vars := map[string]string{}
	for _, l := range strings.Split(mainText, "\n") {
		l = strings.TrimSpace(l)
		switch f := strings.Fields(strings.TrimSuffix(l, ";")); {
		case strings.HasPrefix(l, "listen unix:"):
			socket = strings.TrimPrefix(f[1], "unix:")
		case socket != "" && host == "" && len(f) == 2 && f[0] == "server_name":
			host = f[1]
		case socket != "" && len(f) == 3 && f[0] == "set":
			vars[f[1]] = strings.Trim(f[2], `"`)
		case socket != "" && path == "" && len(f) == 4 && f[0] == "location" && f[1] == "=":
			path = f[2]
		case path != "" && body == "" && strings.HasPrefix(l, `return 200 "`):
			body = strings.ReplaceAll(strings.Trim(strings.TrimPrefix(l, "return 200 "), `";`), `\n`, "\n")
			for k, v := range vars {
				body = strings.ReplaceAll(body, k, v)
			}
		case path != "" && body == "" && len(f) == 2 && f[0] == "content_by_lua_file":
			body = luaAnswer(t, landed[f[1]], vars)
		}
	}
	if socket == "" || host == "" || path == "" || body == "" {
		t.Fatalf("no self-test block (socket %q, host %q, path %q, answer %q) in\n%s", socket, host, path, body, mainText)
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != host || r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// luaAnswer is what script says when it succeeds: its
// `ngx.say("<text>", ngx.var.<name> or "")`.
func luaAnswer(t *testing.T, script string, vars map[string]string) string {
	t.Helper()
	_, rest, ok := strings.Cut(script, `ngx.say("`)
	text, rest, ok2 := strings.Cut(rest, `", ngx.var.`)
	name, _, ok3 := strings.Cut(rest, " ")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("no answer found in the self-test's script:\n%s", script)
	}
	return text + vars["$"+name] + "\n"
}
