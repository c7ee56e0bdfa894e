package policy

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"openflare/agent/protocol"
)

// adapted stands in for agent/nginx's adaptation of a rendered main
// config for Debian's nginx 1.22: its Lua module lines first, the worker
// user line, no QUIC.
func adapted(main string) string {
	main = regexp.MustCompile(`(?m)^.*quic.*\n`).ReplaceAllString(main, "")
	main = regexp.MustCompile(`(?m)^user [^;]*;`).ReplaceAllString(main, "user nobody nogroup; # openflare-agent: agent.json nginx_user")
	return "load_module /usr/lib/nginx/modules/ndk_http_module.so;\nload_module /usr/lib/nginx/modules/ngx_http_lua_module.so;\n" + main
}

var modules = []string{"/usr/lib/nginx/modules/ndk_http_module.so", "/usr/lib/nginx/modules/ngx_http_lua_module.so"}

// parseNginx runs nginx -t on a ParseCopy with its placeholders in a
// throw-away directory, as the agent does (landing.Set.WriteParseCopy), and
// returns nginx's complaint ("" when it accepts the text).
func parseNginx(t *testing.T, text string) string {
	t.Helper()
	bin := nginxBinary(t)
	dir := t.TempDir()
	text = regexp.MustCompile(`__OPENFLARE_[A-Z_]+__`).ReplaceAllStringFunc(text, func(p string) string {
		switch p {
		case "__OPENFLARE_ROUTE_CONFIG__":
			return filepath.Join(dir, "routes.conf")
		case "__OPENFLARE_OBSERVABILITY_LISTEN__":
			return "127.0.0.1:18999"
		}
		sub := filepath.Join(dir, strings.ToLower(strings.Trim(p, "_")))
		if strings.HasSuffix(p, "_DIR__") || strings.HasSuffix(p, "_PATH__") && p != "__OPENFLARE_PID_PATH__" {
			os.MkdirAll(sub, 0o755)
		}
		return sub
	})
	// The route config declares the variables the main config's zones
	// use; the copy stands in with the same declarations.
	routes := "map $host $openflare_waf_site { default \"\"; }\n"
	for name, body := range map[string]string{"main.conf": text, "routes.conf": routes, "mime.types": "types { text/html html; }\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(bin, "-t", "-q", "-p", dir+"/", "-e", filepath.Join(dir, "e.log"), "-c", filepath.Join(dir, "main.conf")).CombinedOutput()
	if err == nil {
		return ""
	}
	return string(out)
}

// Every config the real server rendered passes the policy parse: nginx reads in
// it no directive of reach that the policy did not accept as plain text.
func TestParseCopyAcceptsFixtures(t *testing.T) {
	renderedFixtures(t, func(name, main, _ string, _ protocol.ActiveConfig) {
		text := adapted(Policy{}.Confine(main))
		if err := (Policy{}).CheckAdapted(text, modules); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		copied, err := Policy{}.ParseCopy(text, modules)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if strings.Contains(copied, "lua") {
			t.Errorf("%s: the copy still names Lua:\n%s", name, copied)
		}
		if msg := parseNginx(t, copied); msg != "" {
			t.Errorf("%s: nginx refuses the copy: %s\n%s", name, msg, copied)
		}
	})
}

// What the policy's reader misses, nginx.s parse refuses: Blind makes the
// reader skip a directive outright, the worst a reader bug can do.
func TestParseCopyRefusesWhatTheReaderMissed(t *testing.T) {
	cases := []struct {
		name, blind, line, word string
	}{
		{"Lua block", "content_by_lua_block", `    server { listen 81; location /x { content_by_lua_block { os.execute("id") } } }`, "content_By_lua_block"},
		{"init Lua", "init_by_lua_file", `    init_by_lua_file /tmp/evil.lua;`, "init_By_lua_file"},
		{"include", "include", `    include /etc/shadow;`, "Include"},
		{"log", "access_log", `    access_log /etc/cron.d/x;`, "Access_log"},
		{"alias", "alias", `    server { listen 81; location /x/ { alias /etc/; } }`, "Alias"},
		{"socket", "proxy_pass", `    server { listen 81; location / { proxy_pass http://unix:/run/docker.sock:/; } }`, "proxy_Pass"},
		// An upstream the reader missed, behind a proxy_pass it saw.
		{"upstream", "upstream", `    upstream hidden { server 169.254.169.254:80; }
    server { listen 81; location / { proxy_pass http://hidden; } }`, "Upstream"},
		// A server line the reader missed, inside an upstream it saw.
		{"upstream server", "server", `    upstream seen { server UNIX:/run/docker.sock; }`, "Server"},
		{"module", "load_module", `    load_module /tmp/x.so;`, "Load_module"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			main := adapted(withHTTP(tc.line))
			if tc.blind == "load_module" {
				main = "load_module /tmp/x.so;\n" + adapted(withHTTP(""))
			}
			p := Policy{Blind: tc.blind}
			if err := p.CheckAdapted(main, modules); err != nil {
				t.Fatalf("the blinded reader still refuses: %v", err)
			}
			copied, err := p.ParseCopy(main, modules)
			if err != nil {
				t.Fatal(err)
			}
			msg := parseNginx(t, copied)
			if !strings.Contains(strings.ToLower(msg), `unknown directive "`+strings.ToLower(tc.word)+`"`) || strings.Contains(msg, `"`+strings.ToLower(tc.word)+`"`) {
				t.Fatalf("nginx accepted the copy or refused it for another reason: %q\n%s", msg, copied)
			}
			// The same text with a reader that sees it is refused by the
			// policy itself (where it connects: by the origins check).
			err = (Policy{}).CheckAdapted(main, modules)
			if err == nil {
				err = (Policy{}).CheckOrigins(main, nil, func(string) ([]netip.Addr, error) { return nil, nil })
			}
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("the policy accepts it: %v", err)
			}
		})
	}
}

// A directive of reach the policy accepts, written in a way its plain
// form does not cover (quoted, over two lines), is refused by the parse:
// only one plain line reads the same to every reader.
func TestParseCopyWantsPlainLines(t *testing.T) {
	for _, line := range []string{
		`    include "mime.types";`,
		"    access_log\n        __OPENFLARE_ACCESS_LOG__;",
		`    log_by_lua_file '__OPENFLARE_LUA_DIR__/observability/log.lua';`,
	} {
		main := adapted(withHTTP(line))
		if err := (Policy{}).CheckAdapted(main, modules); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		copied, err := Policy{}.ParseCopy(main, modules)
		if err != nil {
			t.Fatal(err)
		}
		if msg := parseNginx(t, copied); !strings.Contains(msg, "unknown directive") {
			t.Errorf("%q: copy accepted: %q", line, msg)
		}
	}
}

// Letters inside strings, variables and host names change case only:
// nginx reads those without regard to case, so the copy stays valid.
func TestParseCopyKeepsVariables(t *testing.T) {
	main := adapted(withHTTP(`    log_format x '$remote_user $document_root $pid "user" root.example.com';
    server { listen 81; server_name include.example.com; location / { return 200 "$realpath_root $remote_user"; } }`))
	copied, err := Policy{}.ParseCopy(main, modules)
	if err != nil {
		t.Fatal(err)
	}
	if msg := parseNginx(t, copied); msg != "" {
		t.Fatalf("nginx refuses the copy: %s\n%s", msg, copied)
	}
}
