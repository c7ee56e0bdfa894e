package luaassets

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestFiles(t *testing.T) {
	v := Vars{RuntimeConfigDir: "/var/lib/openflare/runtime", CountryMMDBPath: "/geo/country.mmdb", CityMMDBPath: "/geo/city.mmdb"}
	files := Files(v)
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
		"waf/aho.lua", "waf/check.lua", "waf/geo.lua", "waf/ip_groups.lua", "waf/ipmatch.lua", "waf/ranges.lua", "waf/runtime.lua",
		"waf/security.lua", "waf/ua.lua",
	}
	if !slices.Equal(paths, want) {
		t.Errorf("paths = %q\nwant    %q", paths, want)
	}
	// The self-probe loads every script by name: its list must be the tree.
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

	cert := CertDirFiles(v)
	if len(cert) != 2 || cert[0].Path != "sw/challenge.lua" || cert[1].Path != "sw/runtime.lua" {
		t.Fatalf("CertDirFiles = %v", cert)
	}
	for _, f := range cert {
		if !bytes.Equal(f.Content, byPath[f.Path]) {
			t.Errorf("cert_dir %s differs from the lua_dir copy", f.Path)
		}
	}
}
