package landing

import (
	"path"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"openflare/agent/render"
)

// acceptable is the reference for which support-file names the server may
// ship, written from PROTOCOL 6.1 independently of cleanRel: a non-empty,
// relative, already clean slash path with no ".." element, no backslash
// and no NUL or other control character (a name a log line or a terminal
// would show as something else).
func acceptable(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, `\`) {
		return false
	}
	for _, r := range p {
		if unicode.IsControl(r) {
			return false
		}
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == "" || elem == "." || elem == ".." {
			return false
		}
	}
	return true
}

// FuzzPlace: support-file names come from the server, so from anyone who
// controls it. Place never panics, decides the same way twice, accepts
// exactly what acceptable does, and what it accepts lands strictly inside
// its directory, under a relative name with no "..", NUL or control
// character.
func FuzzPlace(f *testing.F) {
	for _, seed := range []string{
		// The names the unit tests and the fixtures use.
		"7.crt", "7.key", "1.key", "error_pages/origin_error.html.tmpl", "sw/sw.js", "sw/offline.html",
		render.WAFConfigFile, render.SourceConfigFile, legacyPowConfig,
		"../escape.crt", "../../escape.crt", "/etc/passwd", "a/../../b", `a\b`, "",
		// Hostile: traversal in every spelling, encoded once and twice
		// (Place decodes nothing, so these are literal names), very long,
		// deeply nested, and control characters.
		".", "..", "./7.crt", "a/./b", "a//b", "a/", "a/..", "a/b/../../..", "/", "//etc/passwd",
		"%2e%2e/etc/passwd", "%252e%252e%252fetc%252fpasswd", "..%2f..%2fetc%2fpasswd", "..%5c..%5cwindows",
		"..\\..\\etc\\passwd", "sw/..\\../x", "a\x00b", "7.crt\x00.key", "a\nb.crt", "\x1b[31mred.crt", "x\x7f.crt",
		"sw/\u0085.js", "..\u2215etc", "\u202e.key", "\xff\xfe.crt", "waf_config.json/..", "waf_config.json/x",
		strings.Repeat("a/", 1100) + "x.crt", strings.Repeat("../", 500) + "etc/passwd", strings.Repeat("x", 5000) + ".key",
	} {
		f.Add(seed)
	}
	const certDir, runtimeDir = "/srv/node/certs", "/srv/node/runtime"
	p := Paths{CertDir: certDir, RuntimeConfigDir: runtimeDir}
	f.Fuzz(func(t *testing.T, name string) {
		pl, err := Place(name)
		again, err2 := Place(name)
		if pl != again || (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("Place(%q) is not deterministic: %+v, %v then %+v, %v", name, pl, err, again, err2)
		}
		if ok := acceptable(name); (err == nil) != ok {
			t.Fatalf("Place(%q) = %+v, %v; the reference says acceptable = %v", name, pl, err, ok)
		}
		if err != nil {
			if pl != (Placement{}) {
				t.Fatalf("Place(%q) failed but placed it: %+v", name, pl)
			}
			return
		}
		rel := pl.Rel
		if rel == "" || filepath.IsAbs(rel) || strings.ContainsAny(rel, "\x00\\") {
			t.Fatalf("Place(%q): Rel %q is empty, absolute or has a NUL or backslash", name, rel)
		}
		for _, r := range rel {
			if unicode.IsControl(r) {
				t.Fatalf("Place(%q): Rel %q has control character %U", name, rel, r)
			}
		}
		for _, elem := range strings.Split(filepath.ToSlash(rel), "/") {
			if elem == ".." || elem == "." || elem == "" {
				t.Fatalf("Place(%q): Rel %q has element %q", name, rel, elem)
			}
		}
		if path.Clean(filepath.ToSlash(rel)) != filepath.ToSlash(rel) {
			t.Fatalf("Place(%q): Rel %q is not clean", name, rel)
		}
		dir := certDir
		if pl.Runtime {
			dir = runtimeDir
		}
		full := pl.Path(p)
		if back, err := filepath.Rel(dir, full); err != nil || back != rel || !strings.HasPrefix(full, dir+string(filepath.Separator)) {
			t.Fatalf("Place(%q) lands at %s, outside %s (rel %q, %v)", name, full, dir, back, err)
		}
		// Only the three runtime names go to runtime_config_dir; keys
		// alone are private.
		if runtime := name == render.WAFConfigFile || name == render.SourceConfigFile || name == legacyPowConfig; pl.Runtime != runtime {
			t.Fatalf("Place(%q): Runtime %v", name, pl.Runtime)
		}
		if want := strings.HasSuffix(name, ".key") || name == render.SourceConfigFile; (pl.Mode == 0o600) != want || (pl.Mode != 0o600 && pl.Mode != 0o644) {
			t.Fatalf("Place(%q): mode %v", name, pl.Mode)
		}
		if pl.Skip != (name == legacyPowConfig) {
			t.Fatalf("Place(%q): Skip %v", name, pl.Skip)
		}
	})
}

// Found by FuzzPlace's reference: a name with a newline, an escape
// sequence, DEL or a C1 control was placed as written, and the errors and
// events naming the landed file would have carried it.
func TestPlaceRefusesControlCharacters(t *testing.T) {
	for _, name := range []string{"a\nb.crt", "\x1b[31mred.crt", "x\x7f.crt", "sw/\u0085.js", "7.key\r", "\t7.crt"} {
		if pl, err := Place(name); err == nil {
			t.Errorf("Place(%q) = %+v, want a refusal", name, pl)
		}
	}
	if _, err := Place("error_pages/origin_error.html.tmpl"); err != nil {
		t.Fatal(err)
	}
}
