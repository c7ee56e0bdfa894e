package landing

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"openflare/agent/protocol"
	"openflare/agent/render"
	"openflare/testing/testsupport"
)

func testPaths(root string) Paths {
	return Paths{
		Main:              root + "/etc/nginx/nginx.conf",
		Route:             root + "/etc/nginx/conf.d/openflare_routes.conf",
		AccessLog:         root + "/var/log/openflare/access.log",
		ErrorLog:          root + "/var/log/openflare/error.log",
		PID:               root + "/var/run/nginx.pid",
		TempDir:           root + "/var/cache/nginx",
		ProxyCache:        root + "/var/cache/openflare_proxy",
		CertDir:           root + "/etc/nginx/certs",
		OpenRestyCertDir:  "/srv/certs",
		LuaDir:            root + "/etc/nginx/lua",
		OpenRestyLuaDir:   "/srv/lua",
		RuntimeConfigDir:  root + "/etc/openflare",
		PagesDir:          root + "/var/lib/openflare/pages",
		ObservabilityPort: 18081,
		HTTPErrorLog:      root + "/var/log/openflare/http-error.log",
		SelfTestDir:       root + "/var/run/selftest",
		EmptyDir:          root + "/var/empty",
	}
}

// Every placeholder of a real rendered version is replaced, and the WAF
// runtime initialisation is injected (PROTOCOL 6.2 [MUST]).
func TestSubstituteRenderedFixture(t *testing.T) {
	dir := testsupport.SharedDir(t, "fixtures/render/21-waf-pow-and-block")
	mainText, _ := os.ReadFile(filepath.Join(dir, "main.conf"))
	routeText, _ := os.ReadFile(filepath.Join(dir, "routes.conf"))
	p := testPaths("/x")
	m, r := p.MainText(string(mainText)), p.RouteText(string(routeText))
	for _, s := range []string{m, r} {
		if i := strings.Index(s, "__OPENFLARE_"); i >= 0 {
			t.Fatalf("placeholder left: %q", s[i:min(len(s), i+60)])
		}
	}
	for _, want := range []string{
		"pid /x/var/run/nginx.pid;",
		"error_log /x/var/log/openflare/error.log warn;",
		"access_log /x/var/log/openflare/access.log openflare_json;",
		"client_body_temp_path /x/var/cache/nginx/client_temp;",
		"listen 127.0.0.1:18081;",
		"include /x/etc/nginx/conf.d/openflare_routes.conf;",
		"http {\n    lua_package_path \"/srv/lua/?.lua;/srv/lua/?/init.lua;;\";\n",
		`init_worker_by_lua_block { require("waf.runtime").init() dofile("/srv/lua/observability/init.lua") }`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("main lacks %q", want)
		}
	}
	if strings.Contains(m, "init_worker_by_lua_file") {
		t.Error("init_worker_by_lua_file not replaced")
	}
	for _, want := range []string{"access_by_lua_block", "/srv/lua/pow/verify.lua", "alias /srv/lua/pow/static/;"} {
		if !strings.Contains(r, want) {
			t.Errorf("route lacks %q", want)
		}
	}
}

func TestMainTextInsertsWhatTheTemplateLacks(t *testing.T) {
	p := testPaths("/x")
	got := p.MainText("pid logs/nginx.pid;\nhttp {\n    lua_shared_dict openflare_waf_config 1m;\n    proxy_cache_path /var/cache/openresty levels=1:2;\n}\n")
	for _, want := range []string{
		"pid /x/var/run/nginx.pid;",
		"proxy_cache_path /x/var/cache/openflare_proxy levels",
		"    client_body_temp_path /x/var/cache/nginx/client_temp;\n    proxy_temp_path /x/var/cache/nginx/proxy_temp;\n",
		"    init_worker_by_lua_block { require(\"waf.runtime\").init() }\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	// A template without the WAF dict gets no Lua injected.
	if got := p.MainText("http {\n}\n"); strings.Contains(got, "lua") {
		t.Errorf("lua injected without the WAF dict:\n%s", got)
	}
}

func TestPlanModesAndRefusals(t *testing.T) {
	root := t.TempDir()
	p := testPaths(root)
	set, err := Plan(p, "http {\n}\n", "", []protocol.SupportFile{
		{Path: "7.crt", Content: "CERT"},
		{Path: "7.key", Content: "KEY"},
		{Path: "error_pages/origin_error.html.tmpl", Content: "<p>{{status}}</p>"},
		{Path: "waf_config.json", Content: "{}"},
		{Path: "openresty_config.json", Content: "{}"},
	})
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]os.FileMode{}
	for _, f := range set.Files {
		modes[f.Path] = f.Mode
	}
	if modes[p.CertDir+"/7.key"] != 0o600 || modes[p.CertDir+"/7.crt"] != 0o644 {
		t.Fatalf("modes: %v", modes)
	}
	if _, ok := modes[p.RuntimeConfigDir+"/waf_config.json"]; !ok {
		t.Fatal("waf_config.json not under runtime_config_dir")
	}
	if _, ok := modes[p.LuaDir+"/waf/runtime.lua"]; !ok {
		t.Fatal("Lua assets missing")
	}
	for _, bad := range []string{"../escape.crt", "/etc/passwd", "a/../../b", "a\\b", ""} {
		if _, err := Plan(p, "", "", []protocol.SupportFile{{Path: bad, Content: "x"}}); err == nil {
			t.Errorf("support file %q accepted", bad)
		}
	}
}

// Landing writes the set, removes foreign files from managed dirs (and only
// there), and a restore brings back exactly what was there before.
func TestWriteAndRestoreExactly(t *testing.T) {
	root := t.TempDir()
	p := testPaths(root)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// The previous version: a main config, a key, a foreign cert file, and
	// an unrelated file next to the cert dir that must never be touched.
	must(os.MkdirAll(p.CertDir+"/old/deep", 0o755))
	must(os.WriteFile(p.CertDir+"/old/deep/stale.crt", []byte("STALE"), 0o644))
	must(os.WriteFile(p.CertDir+"/3.key", []byte("OLDKEY"), 0o600))
	must(os.MkdirAll(filepath.Dir(p.Main), 0o755))
	must(os.WriteFile(p.Main, []byte("OLD MAIN"), 0o644))
	must(os.WriteFile(filepath.Dir(p.Main)+"/operator.conf", []byte("mine"), 0o644))

	set, err := Plan(p, "NEW MAIN", "NEW ROUTE", []protocol.SupportFile{{Path: "9.key", Content: "NEWKEY"}})
	must(err)
	touched, err := set.Touched()
	must(err)
	txn, err := Begin(filepath.Join(root, "backup"), protocol.ConfigRef{Version: "v1", Checksum: "c1"}, protocol.ConfigRef{Version: "v2", Checksum: "c2"}, touched, set.Managed)
	must(err)
	must(set.Write(nil))
	if !set.Unchanged() {
		t.Fatal("set not on disk after Write")
	}
	if _, err := os.Stat(p.CertDir + "/old"); !os.IsNotExist(err) {
		t.Fatal("foreign files / empty dirs left in cert_dir")
	}
	if fi, _ := os.Stat(p.CertDir + "/9.key"); fi.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", fi.Mode().Perm())
	}

	// Reopen as the next process would after a crash, and restore.
	pending, err := Leftover(filepath.Join(root, "backup"), p.Managed())
	must(err)
	if pending == nil || pending.From() != (protocol.ConfigRef{Version: "v1", Checksum: "c1"}) {
		t.Fatalf("pending = %+v", pending)
	}
	must(pending.Restore())
	read := func(path string) string { b, _ := os.ReadFile(path); return string(b) }
	if read(p.Main) != "OLD MAIN" || read(p.CertDir+"/3.key") != "OLDKEY" || read(p.CertDir+"/old/deep/stale.crt") != "STALE" {
		t.Fatal("previous files not restored")
	}
	if fi, _ := os.Stat(p.CertDir + "/3.key"); fi.Mode().Perm() != 0o600 {
		t.Fatalf("restored key mode %v", fi.Mode().Perm())
	}
	for _, added := range []string{p.Route, p.CertDir + "/9.key", p.LuaDir + "/waf/runtime.lua"} {
		if _, err := os.Stat(added); !os.IsNotExist(err) {
			t.Fatalf("%s, added by the apply, survived the restore", added)
		}
	}
	if read(filepath.Dir(p.Main)+"/operator.conf") != "mine" {
		t.Fatal("operator file touched")
	}
	must(txn.Commit())
	if again, err := Leftover(filepath.Join(root, "backup"), p.Managed()); err != nil || again != nil {
		t.Fatalf("backup survived commit: %v %v", again, err)
	}
}

// A backup interrupted before its manifest was written is discarded: the
// live files were never touched.
func TestIncompleteBackupIgnored(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "backup")
	os.MkdirAll(filepath.Join(dir, "files"), 0o750)
	os.WriteFile(filepath.Join(dir, "files", "0"), []byte("partial"), 0o600)
	txn, err := Leftover(dir, nil)
	if err != nil || txn != nil {
		t.Fatalf("txn %v err %v", txn, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatal("incomplete backup not removed")
	}
}

// A damaged manifest, or one naming paths outside the managed tree, is set
// aside: never restored, and never blocking the next apply.
func TestDamagedBackupQuarantined(t *testing.T) {
	root := t.TempDir()
	p := testPaths(root)
	for name, manifest := range map[string]string{
		"garbage": `{"from":`,
		"outside": `{"from":{"version":"v1","checksum":"c"},"entries":[{"path":"/etc/passwd","saved":"0"}]}`,
		"climbs":  `{"from":{"version":"v1","checksum":"c"},"entries":[{"path":"` + p.CertDir + `/../../../etc/x","saved":"0"}]}`,
		"managed": `{"from":{"version":"v1","checksum":"c"},"entries":[],"managed":["/"]}`,
		"saved":   `{"from":{"version":"v1","checksum":"c"},"entries":[{"path":"` + p.Main + `","saved":"../../x"}]}`,
	} {
		dir := filepath.Join(root, "backup-"+name)
		os.MkdirAll(filepath.Join(dir, "files"), 0o700)
		os.WriteFile(filepath.Join(dir, manifestName), []byte(manifest), 0o600)
		txn, err := Leftover(dir, p.Managed())
		if !errors.Is(err, ErrQuarantined) || txn != nil {
			t.Fatalf("%s: txn %v err %v", name, txn, err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%s: damaged backup left in place", name)
		}
		if again, err := Leftover(dir, p.Managed()); err != nil || again != nil {
			t.Fatalf("%s: the next apply is still blocked: %v", name, err)
		}
	}
}

func TestPlanLimitsSupportFiles(t *testing.T) {
	files := make([]protocol.SupportFile, MaxSupportFiles+1)
	for i := range files {
		files[i] = protocol.SupportFile{Path: fmt.Sprintf("f%d.crt", i)}
	}
	if _, err := Plan(testPaths(t.TempDir()), "m", "r", files); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("err = %v", err)
	}
}

// The origin error page never inserts the visitor's Host unescaped, in
// either of the renderer's two modes.
func TestErrorPageHostEscaped(t *testing.T) {
	for _, fixture := range []string{"18-origin-error-get-only", "19-origin-error-all-methods-custom"} {
		dir := testsupport.SharedDir(t, "fixtures/render/"+fixture)
		route, err := os.ReadFile(filepath.Join(dir, "routes.conf"))
		if err != nil {
			t.Fatal(err)
		}
		got := testPaths("/x").RouteText(string(route))
		if !strings.Contains(got, escapeHTML) || strings.Contains(got, `return ngx.var.host or "" end`) || strings.Contains(got, `local host = ngx.var.host or ""`) {
			t.Errorf("%s: host not escaped:\n%s", fixture, got)
		}
	}
}

// Configured paths need not be clean or absolute: a valid backup under a
// cert_dir written with a trailing slash, or a relative data_dir, is
// restored, not quarantined.
func TestLeftoverUncleanRoots(t *testing.T) {
	root := t.TempDir()
	p := testPaths(root)
	os.MkdirAll(p.CertDir, 0o755)
	os.WriteFile(p.CertDir+"/1.crt", []byte("OLD"), 0o644)
	dir := filepath.Join(root, "backup")
	if _, err := Begin(dir, protocol.ConfigRef{Version: "v1", Checksum: "c"}, protocol.ConfigRef{Version: "v2", Checksum: "c"}, []string{p.CertDir + "/1.crt"}, []string{p.CertDir}); err != nil {
		t.Fatal(err)
	}
	p.CertDir += "/"
	txn, err := Leftover(dir, p.Managed())
	if err != nil || txn == nil {
		t.Fatalf("txn %v err %v", txn, err)
	}
}

// Links planted in the managed tree are not followed: the backup does not
// copy what they point at, the apply replaces them with its own files and
// directories, and their targets stay as they were.
func TestLinksInTreeNotFollowed(t *testing.T) {
	root := t.TempDir()
	p := testPaths(root)
	outside := filepath.Join(root, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("SECRET"), 0o600)
	os.MkdirAll(p.CertDir, 0o755)
	os.MkdirAll(p.LuaDir, 0o755)
	// A key that is a link to a secret, and a Lua subdirectory that is a
	// link to a directory elsewhere.
	if err := os.Symlink(secret, filepath.Join(p.CertDir, "9.key")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(p.LuaDir, "waf")); err != nil {
		t.Fatal(err)
	}

	set, err := Plan(p, "MAIN", "ROUTE", []protocol.SupportFile{{Path: "9.key", Content: "NEWKEY"}})
	if err != nil {
		t.Fatal(err)
	}
	touched, err := set.Touched()
	if err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(root, "backup")
	txn, err := Begin(backup, protocol.ConfigRef{Version: "v1", Checksum: "c1"}, protocol.ConfigRef{Version: "v2", Checksum: "c2"}, touched, set.Managed)
	if err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(backup, func(path string, d fs.DirEntry, err error) error {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), "SECRET") {
			t.Errorf("the link's target was copied into the backup: %s", path)
		}
		return nil
	})
	if err := set.Write(nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(p.CertDir, "9.key"), filepath.Join(p.LuaDir, "waf")} {
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&fs.ModeSymlink != 0 {
			t.Errorf("%s is still a link (%v)", p, err)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "SECRET" {
		t.Fatalf("the key link's target was overwritten: %q", b)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("files landed through the directory link: %v", entries)
	}
	if !set.Unchanged() {
		t.Fatal("set not on disk after Write")
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
}

// WriteConfig lands only what nginx reads when it loads a configuration:
// the files workers read while serving (the WAF JSON, Lua, error pages)
// wait for WriteRuntime, which runs once `nginx -t` passed.
func TestWriteConfigBeforeRuntime(t *testing.T) {
	p := testPaths(t.TempDir())
	set, err := Plan(p, "MAIN", "ROUTE", []protocol.SupportFile{{Path: "9.crt", Content: "CERT"}, {Path: render.WAFConfigFile, Content: "{}"}, {Path: "error_pages/origin_error.html.tmpl", Content: "PAGE"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.Touched(); err != nil {
		t.Fatal(err)
	}
	if err := set.WriteConfig(nil); err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	for _, f := range []string{p.Main, p.Route, filepath.Join(p.CertDir, "9.crt")} {
		if !exists(f) {
			t.Errorf("%s not landed by WriteConfig", f)
		}
	}
	late := []string{filepath.Join(p.RuntimeConfigDir, render.WAFConfigFile), filepath.Join(p.CertDir, "error_pages", "origin_error.html.tmpl"), filepath.Join(p.LuaDir, "waf", "runtime.lua")}
	for _, f := range late {
		if exists(f) {
			t.Errorf("%s landed before the test", f)
		}
	}
	if err := set.WriteRuntime(); err != nil {
		t.Fatal(err)
	}
	for _, f := range late {
		if !exists(f) {
			t.Errorf("%s not landed by WriteRuntime", f)
		}
	}
}

// A configured directory that is itself a link (cert_dir pointing
// elsewhere, the owner's choice) is a root: it is kept, its files are
// backed up and rewritten in place, never treated as a link inside the tree.
func TestConfiguredDirLinkKept(t *testing.T) {
	root := t.TempDir()
	p := testPaths(root)
	elsewhere := filepath.Join(root, "elsewhere-certs")
	os.MkdirAll(elsewhere, 0o755)
	os.WriteFile(filepath.Join(elsewhere, "9.crt"), []byte("OLD"), 0o644)
	os.MkdirAll(filepath.Dir(p.CertDir), 0o755)
	if err := os.Symlink(elsewhere, p.CertDir); err != nil {
		t.Fatal(err)
	}
	set, err := Plan(p, "MAIN", "ROUTE", []protocol.SupportFile{{Path: "9.crt", Content: "NEW"}})
	if err != nil {
		t.Fatal(err)
	}
	touched, err := set.Touched()
	if err != nil {
		t.Fatal(err)
	}
	txn, err := Begin(filepath.Join(root, "backup"), protocol.ConfigRef{Version: "v1", Checksum: "c1"}, protocol.ConfigRef{Version: "v2", Checksum: "c2"}, touched, set.Managed)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Write(nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(p.CertDir); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the configured cert_dir link was replaced: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(elsewhere, "9.crt")); string(b) != "NEW" {
		t.Fatalf("certificate not written through the configured dir: %q", b)
	}
	if err := txn.Restore(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(elsewhere, "9.crt")); string(b) != "OLD" {
		t.Fatalf("the restore did not bring the old certificate back: %q", b)
	}
}

// Every Pages server gets a location that hides the release marker; other
// servers and the rest of the text are untouched.
func TestPagesMarkerHidden(t *testing.T) {
	dir := testsupport.SharedDir(t, "fixtures/render/22-pages-spa-api-http")
	route := testsupport.ReadFile(t, filepath.Join(dir, "routes.conf"))
	got := testPaths("/r").RouteText(route)
	if n := strings.Count(got, "location = /.openflare-pages.json {\n        return 404;\n    }"); n != strings.Count(route, pagesRoot) || n == 0 {
		t.Fatalf("%d marker locations for %d Pages roots:\n%s", n, strings.Count(route, pagesRoot), got)
	}
	plain := testsupport.ReadFile(t, filepath.Join(testsupport.SharedDir(t, "fixtures/render/01-stock-defaults"), "routes.conf"))
	if strings.Contains(testPaths("/r").RouteText(plain), "openflare-pages.json") {
		t.Fatal("a site without Pages got the marker location")
	}
}
