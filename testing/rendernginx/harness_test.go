package rendernginx

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"openflare/agent/landing"
	"openflare/agent/nginx"
	"openflare/agent/osuser"
	"openflare/agent/render"
	"openflare/testing/nginxtest"
)

// probed caches `nginx -V`: the fuzz target builds a loader per input.
var probed struct {
	once sync.Once
	caps *nginx.Caps
	err  error
}

func probe(t testing.TB) *nginx.Caps {
	t.Helper()
	bin := nginxtest.Binary(t)
	probed.once.Do(func() { probed.caps, probed.err = nginx.ReadCaps(context.Background(), bin) })
	if probed.err != nil {
		t.Fatalf("probe nginx: %v", probed.err)
	}
	if !probed.caps.HasLua() {
		t.Skipf("%s has no Lua module (run `make deps`)", probed.caps.Binary)
	}
	return probed.caps
}

// loader does what the agent does to validate a version (agent/apply):
// adapt the rendered text to the installed nginx, land it with the support
// files, and run `nginx -t` on the landed main config.
type loader struct {
	root    string
	paths   landing.Paths
	adapter *nginx.Adapter
	ctl     *nginx.Ctl
}

// newLoader lays out a node's directories under a fresh temp dir.
func newLoader(t testing.TB) *loader {
	t.Helper()
	caps := probe(t)
	root := t.TempDir()
	p := landing.Paths{
		Main:              filepath.Join(root, "etc", "nginx", "nginx.conf"),
		Route:             filepath.Join(root, "etc", "nginx", "openflare_routes.conf"),
		AccessLog:         filepath.Join(root, "var", "log", "openflare", "access.log"),
		ErrorLog:          filepath.Join(root, "var", "log", "openflare", "error.log"),
		PID:               filepath.Join(root, "var", "run", "nginx.pid"),
		TempDir:           filepath.Join(root, "var", "cache", "nginx"),
		ProxyCache:        filepath.Join(root, "var", "cache", "openflare_proxy"),
		CertDir:           filepath.Join(root, "etc", "nginx", "certs"),
		OpenRestyCertDir:  filepath.Join(root, "etc", "nginx", "certs"),
		LuaDir:            filepath.Join(root, "lua"),
		OpenRestyLuaDir:   filepath.Join(root, "lua"),
		RuntimeConfigDir:  filepath.Join(root, "etc", "openflare"),
		PagesDir:          filepath.Join(root, "pages"),
		ObservabilityPort: 19180,
		HTTPErrorLog:      filepath.Join(root, "var", "log", "openflare", "http-error.log"),
		SelfTestDir:       filepath.Join(root, "var", "run", "selftest"),
		EmptyDir:          filepath.Join(root, "var", "empty"),
	}
	// Workers here are the namespace's one uid: nothing to check for them.
	tree := landing.Tree{Paths: p, DataDir: root, StateDir: filepath.Join(root, "state")}
	if err := tree.Prepare(osuser.Identity{}, false); err != nil {
		t.Fatalf("create node directories: %v", err)
	}
	return &loader{
		root:    root,
		paths:   p,
		adapter: &nginx.Adapter{Caps: caps, Host: osuser.CurrentHost()},
		ctl:     &nginx.Ctl{Caps: caps, ErrorLog: p.ErrorLog},
	}
}

// load adapts, lands and tests a rendered version. edit, when set, changes
// the adapted main config before it is landed, or refuses it.
func (l *loader) load(out *render.Output, edit func(string) (string, error)) error {
	mainText, err := l.adapter.Main(out.Main)
	if err != nil {
		return fmt.Errorf("adapt main config: %w", err)
	}
	if edit != nil {
		if mainText, err = edit(mainText); err != nil {
			return err
		}
	}
	mainText = l.workersAsRoot(mainText)
	set, err := landing.Plan(l.paths, mainText, l.adapter.Route(out.Route), out.Files)
	if err != nil {
		return err
	}
	if err := set.Write(nil); err != nil {
		return err
	}
	return l.ctl.Test(context.Background(), l.paths.Main)
}

var userLineRe = regexp.MustCompile(`(?m)^[ \t]*user[ \t]`)

// workersAsRoot adds `user root;` to a main config without a user line.
// nginx started as root then runs workers as nobody and, even for -t,
// chowns its temp directories to that user; the test's user namespace maps
// a single uid, so the chown fails (EINVAL) where a real host would succeed.
// Configs that have a user line are already adapted by nginx.Adapter.
func (l *loader) workersAsRoot(mainText string) string {
	if !l.adapter.Host.SingleUID || l.adapter.Host.EUID != 0 || userLineRe.MatchString(mainText) {
		return mainText
	}
	return "user root;\n" + mainText
}

// readFile reads a file the test cannot do without.
func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
