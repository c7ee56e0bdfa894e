package luaassets

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"openflare/testing/luamin"
)

// testExpand substitutes the scripts' placeholders as agent/landing's table
// does for a node whose runtime files are in runtimeDir, the paths a rig
// does not name left empty (landing imports this package: its table cannot
// be used here).
func testExpand(runtimeDir, countryMMDB, cityMMDB string) *strings.Replacer {
	return strings.NewReplacer(
		"__OPENFLARE_RUNTIME_CONFIG_DIR__", runtimeDir,
		"__OPENFLARE_COUNTRY_MMDB_PATH__", countryMMDB,
		"__OPENFLARE_CITY_MMDB_PATH__", cityMMDB,
		"__OPENFLARE_WAF_IP_GROUPS_MAX_SNAPSHOT_BYTES__", MaxSnapshotBytes,
		"__OPENFLARE_LUA_DIR__", "",
		"__OPENFLARE_CERT_DIR__", "",
		"__OPENFLARE_NGINX_CACHE_DIR__", "",
	)
}

func TestFiles(t *testing.T) {
	expand := testExpand("/var/lib/openflare/runtime", "/geo/country.mmdb", "/geo/city.mmdb")
	files := Files(expand)
	var paths []string
	byPath := map[string][]byte{}
	for _, f := range files {
		paths = append(paths, f.Path)
		byPath[f.Path] = f.Content
		if bytes.Contains(f.Content, []byte("__OPENFLARE_")) {
			t.Errorf("%s still holds a placeholder", f.Path)
		}
	}
	want := []string{
		"init.lua", "log.lua",
		"observability/init.lua", "observability/log.lua", "observability/read.lua",
		"pow/challenge.lua", "pow/runtime.lua",
		"pow/static/css/pow.css", "pow/static/js/main.mjs", "pow/static/js/worker/sha256-purejs.js",
		"pow/static/js/worker/sha256-webcrypto.js", "pow/static/locales/en.json", "pow/static/locales/zh-CN.json",
		"pow/verify.lua",
		"probe.lua", "read.lua",
		"sw/challenge.lua", "sw/runtime.lua",
		"waf/aho.lua", "waf/check.lua", "waf/cmdi.lua", "waf/code.lua", "waf/decode.lua", "waf/geo.lua", "waf/ip_groups.lua", "waf/ipmatch.lua", "waf/lists.lua",
		"waf/paths.lua", "waf/ranges.lua", "waf/regex.lua", "waf/runtime.lua", "waf/security.lua", "waf/sqli.lua", "waf/ua.lua", "waf/xss.lua",
	}
	if !slices.Equal(paths, want) {
		t.Errorf("paths = %q\nwant    %q", paths, want)
	}
	// The self-test's probe.lua loads every script by name: its list must
	// be the tree.
	probe := string(byPath["probe.lua"])
	start := strings.Index(probe, "local LUA_FILES = {")
	end := strings.Index(probe[start:], "}")
	var listed []string
	for _, f := range strings.Split(probe[start+len("local LUA_FILES = {"):start+end], ",") {
		if f = strings.Trim(strings.TrimSpace(f), `"`); f != "" {
			listed = append(listed, f)
		}
	}
	slices.Sort(listed)
	// The PoW page's static files are not scripts.
	scripts := slices.DeleteFunc(slices.Clone(paths), func(p string) bool { return !strings.HasSuffix(p, ".lua") })
	if !slices.Equal(listed, scripts) {
		t.Errorf("probe.lua LUA_FILES = %q\nwant %q", listed, scripts)
	}
	if !bytes.Equal(byPath["read.lua"], byPath["observability/read.lua"]) {
		t.Error("read.lua differs from observability/read.lua")
	}
	for path, want := range map[string]string{
		"waf/runtime.lua":   `"/var/lib/openflare/runtime/waf_config.json"`,
		"waf/ip_groups.lua": `tonumber("20971520")`,
	} {
		if !strings.Contains(string(byPath[path]), want) {
			t.Errorf("%s lacks %s", path, want)
		}
	}

	cert := CertDirFiles(files)
	if len(cert) != 2 || cert[0].Path != "sw/challenge.lua" || cert[1].Path != "sw/runtime.lua" {
		t.Fatalf("CertDirFiles = %v", cert)
	}
	for _, f := range cert {
		if !bytes.Equal(f.Content, byPath[f.Path]) {
			t.Errorf("cert_dir %s differs from the lua_dir copy", f.Path)
		}
	}
}

// TestPackMatchesTree compares contents rather than regenerating the pack
// and comparing bytes: xz versions differ in their output.
func TestPackMatchesTree(t *testing.T) {
	packed := map[string][]byte{}
	if err := unpack(func(p string, b []byte) { packed[p] = b }); err != nil {
		t.Fatalf("agent/luaassets/lua.pack.xz is unreadable (%v): run `go generate ./agent/luaassets`", err)
	}
	if d := drift(t, packed, "lua"); len(d) > 0 {
		t.Fatalf("agent/luaassets/lua.pack.xz is stale: run `go generate ./agent/luaassets`\n%s", strings.Join(d, "\n"))
	}
}

func TestDriftFindsEachKind(t *testing.T) {
	dir := t.TempDir()
	for p, b := range map[string]string{"same.lua": "a", "edited.lua": "new", "sub/added.lua": "c"} {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	packed := map[string][]byte{"same.lua": []byte("a"), "edited.lua": []byte("old"), "removed.lua": []byte("d")}
	want := []string{"edited.lua: differs", "removed.lua: in the pack, not in lua/", "sub/added.lua: in lua/, not in the pack"}
	if got := drift(t, packed, dir); !slices.Equal(got, want) {
		t.Errorf("drift = %q\nwant    %q", got, want)
	}
}

// drift lists how the files under dir differ from packed, sorted.
func drift(t *testing.T, packed map[string][]byte, dir string) []string {
	var d []string
	seen := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		seen[rel] = true
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b = []byte(luamin.Pack(rel, string(b)))
		if want, ok := packed[rel]; !ok {
			d = append(d, rel+": in lua/, not in the pack")
		} else if !bytes.Equal(b, want) {
			d = append(d, rel+": differs")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range packed {
		if !seen[p] {
			d = append(d, p+": in the pack, not in lua/")
		}
	}
	slices.Sort(d)
	return d
}

// BenchmarkFiles is the cost of an install's decode, paid on every call.
func BenchmarkFiles(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Files(testExpand("", "", ""))
	}
}
