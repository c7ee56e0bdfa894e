package landing

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"openflare/agent/luaassets"
	"openflare/testing/testsupport"
)

// The one table covers every placeholder the texts write: none is left in
// the agent's Lua or the server's rendered versions as they land, and a
// Lua-only name in nginx text stays as written.
func TestPlaceholderTable(t *testing.T) {
	p := testPaths("/x")
	for _, f := range luaassets.Files(p.LuaReplacer()) {
		if names := placeholderNames(string(f.Content)); len(names) > 0 {
			t.Errorf("%s lands with %q", f.Path, names)
		}
	}
	fixtures := testsupport.SharedDir(t, "fixtures/render")
	versions, err := os.ReadDir(fixtures)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		for _, name := range []string{"main.conf", "routes.conf"} {
			text, err := os.ReadFile(filepath.Join(fixtures, v.Name(), name))
			if err != nil {
				continue
			}
			landed := p.MainText(string(text))
			if name == "routes.conf" {
				landed = p.RouteText(string(text))
			}
			if left := placeholderNames(landed); len(left) > 0 {
				t.Errorf("%s/%s lands with %q", v.Name(), name, left)
			}
		}
	}
	const luaOnlyLine = `set $x "__OPENFLARE_RUNTIME_CONFIG_DIR__";`
	if got := p.MainText("http {\n    " + luaOnlyLine + "\n}\n"); !strings.Contains(got, luaOnlyLine) {
		t.Errorf("a Lua-only name substituted in nginx text:\n%s", got)
	}
}

// placeholderNames lists the __OPENFLARE_*__ names text writes.
func placeholderNames(text string) []string {
	var names []string
	for {
		i := strings.Index(text, "__OPENFLARE_")
		if i < 0 {
			return names
		}
		text = text[i:]
		end := strings.Index(text[len("__OPENFLARE_"):], "__")
		if end < 0 {
			return append(names, text)
		}
		n := len("__OPENFLARE_") + end + len("__")
		names = append(names, text[:n])
		text = text[n:]
	}
}
