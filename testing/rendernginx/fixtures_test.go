package rendernginx

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"openflare/agent/protocol"
	"openflare/agent/render"
	"openflare/testing/testsupport"
)

// fixtureOriginHosts are the made-up upstream names of fixtures 06
// (origin.internal.example) and 23 (api.internal.example).
var fixtureOriginHosts = []string{"origin.internal.example", "api.internal.example"}

// TestFixturesPassNginxT loads every successful render fixture, rendered
// from its e4.json as an agent would, into the installed nginx.
func TestFixturesPassNginxT(t *testing.T) {
	root := testsupport.SharedDir(t, "fixtures/render")
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatalf("read fixtures: %v", err)
	}
	l := newLoader(t)
	hostsErr := mapHosts(t, fixtureOriginHosts...)
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if _, err := os.Stat(filepath.Join(dir, "e4.json")); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "agent_error.txt")); err == nil {
			continue // a failing case: nothing renders, nothing to load
		}
		t.Run(e.Name(), func(t *testing.T) {
			var e4 protocol.ActiveConfig
			if err := json.Unmarshal(readFile(t, filepath.Join(dir, "e4.json")), &e4); err != nil {
				t.Fatalf("decode e4.json: %v", err)
			}
			if hostsErr != nil && namesAny(e4.SourceConfigJSON, fixtureOriginHosts) {
				t.Skipf("nginx resolves upstream host names while loading, and %v exist nowhere; mapping them in /etc/hosts failed: %v", fixtureOriginHosts, hostsErr)
			}
			out, err := render.Config(e4.SourceConfigJSON, e4.SupportFiles)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if err := l.load(out, l.cacheInside); err != nil {
				t.Fatalf("nginx -t: %v", err)
			}
		})
	}
}

func namesAny(s string, names []string) bool {
	for _, n := range names {
		if strings.Contains(s, n) {
			return true
		}
	}
	return false
}

// mapHosts bind-mounts over /etc/hosts a copy that also maps names to
// 127.0.0.1. nginx resolves upstream host names while it loads a config
// (getaddrinfo, so /etc/hosts counts), and the fixtures' origin names
// resolve nowhere. The mount is made in this test binary's own mount
// namespace, where nstest made every mount private and the process is root,
// so neither the host nor other test binaries see it; it is undone when
// the test ends.
func mapHosts(t *testing.T, names ...string) error {
	orig, err := os.ReadFile("/etc/hosts")
	if err != nil {
		return fmt.Errorf("read /etc/hosts: %w", err)
	}
	hosts := filepath.Join(t.TempDir(), "hosts")
	extra := "\n127.0.0.1 " + strings.Join(names, " ") + "\n"
	if err := os.WriteFile(hosts, append(orig, extra...), 0o644); err != nil {
		return fmt.Errorf("write hosts copy: %w", err)
	}
	if err := unix.Mount(hosts, "/etc/hosts", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mount %s over /etc/hosts: %w", hosts, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount("/etc/hosts", unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the /etc/hosts copy: %v", err)
		}
	})
	return nil
}

var cachePathRe = regexp.MustCompile(`(?m)^([ \t]*proxy_cache_path[ \t]+)(\S+)`)

// cacheInside points a proxy_cache_path outside the loader's directory (such
// as fixture 13's /data/openflare/cache) into it: nginx -t creates the cache
// directory, and as root would chown it, so the test must not name a real
// system path. The fixtures' own README did the same for its nginx -t run.
func (l *loader) cacheInside(mainText string) (string, error) {
	return cachePathRe.ReplaceAllStringFunc(mainText, func(line string) string {
		m := cachePathRe.FindStringSubmatch(line)
		if strings.HasPrefix(m[2], l.root+string(filepath.Separator)) {
			return line
		}
		return m[1] + filepath.Join(l.root, "fixture-cache")
	}), nil
}
