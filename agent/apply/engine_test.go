package apply

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"openflare/agent/controlplane"
	"openflare/agent/landing"
	"openflare/agent/nginx"
	"openflare/agent/osuser"
	"openflare/agent/protocol"
	"openflare/agent/render"
	"openflare/agent/state"
	tcp "openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

// Markers a test version's main template carries to make the fake nginx
// fail at one step.
const (
	brokenMark       = "# TEST: -t fails"
	reloadFailMark   = "# TEST: reload fails"
	selfTestFailMark = "# TEST: self-test fails"
	// hiddenMark stands for a directive of reach nginx reads where the
	// template policy's reader found none.
	hiddenMark = "# TEST: nginx sees a hidden directive"
)

// fakeCP is the server: one active version (or an error), and the apply
// logs it received.
type fakeCP struct {
	mu      sync.Mutex
	active  protocol.ActiveConfig
	err     error
	logErr  error
	fetches int
	logs    []protocol.ApplyLog
}

// ActiveConfig hands the version's support files on, as the client does
// while it decodes them.
func (c *fakeCP) ActiveConfig(_ context.Context, files func(protocol.SupportFile) error) (protocol.ActiveConfig, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fetches++
	ac := c.active
	if c.err != nil {
		return ac, c.err
	}
	for _, f := range ac.SupportFiles {
		if err := files(f); err != nil {
			return protocol.ActiveConfig{}, err
		}
	}
	ac.SupportFiles = nil
	return ac, nil
}

func (c *fakeCP) ApplyLog(_ context.Context, l *protocol.ApplyLog) (protocol.ApplyLogRecord, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logErr != nil {
		return protocol.ApplyLogRecord{}, c.logErr
	}
	c.logs = append(c.logs, *l)
	return protocol.ApplyLogRecord{}, nil
}

func (c *fakeCP) lastLog(t *testing.T) protocol.ApplyLog {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.logs) == 0 {
		t.Fatal("no apply log")
	}
	return c.logs[len(c.logs)-1]
}

// fakeNginx is the data plane: -t, reload and self-test outcomes follow the
// markers in the config files, as a real nginx follows their content.
type fakeNginx struct {
	live        string // the live main config's path
	usable      error
	mainErr     error
	workersErr  error
	running     bool
	restartErr  error
	activations int
	selfTests   int
	// policyParses counts the template policy's nginx parses; tests counts
	// nginx -t of live configs.
	policyParses, tests int
}

func (n *fakeNginx) Usable() error { return n.usable }
func (n *fakeNginx) Main(text string) (string, error) {
	if n.mainErr != nil {
		return "", n.mainErr
	}
	return text, nil
}
func (n *fakeNginx) FallbackMain(text string) (string, error) { return text, nil }
func (n *fakeNginx) Route(text string) string                 { return text }
func (n *fakeNginx) Modules() []string                        { return nil }
func (n *fakeNginx) Workers(_ string, fallback bool) (osuser.Identity, error) {
	if n.workersErr != nil && !fallback {
		return osuser.Identity{}, n.workersErr
	}
	return osuser.Identity{User: "root", Group: "root", Why: "test"}, nil
}
func (n *fakeNginx) Test(_ context.Context, conf string) error {
	n.tests++
	b, err := os.ReadFile(conf)
	if err != nil {
		return err
	}
	if strings.Contains(string(b), brokenMark) {
		return errors.New("nginx -t: [emerg] unknown directive")
	}
	return nil
}
func (n *fakeNginx) PolicyParse(_ context.Context, conf string) error {
	n.policyParses++
	b, err := os.ReadFile(conf)
	if err != nil {
		return err
	}
	if strings.Contains(string(b), hiddenMark) {
		return errors.New(`nginx -t of the policy parse: exit status 1: nginx: [emerg] unknown directive "content_By_Lua_block" in /x/main.conf:3`)
	}
	return nil
}
func (n *fakeNginx) Activate(context.Context) error {
	n.activations++
	if n.liveHas(reloadFailMark) {
		return errors.New("reload rejected by nginx: [emerg] bind() failed")
	}
	n.running = true
	return nil
}
func (n *fakeNginx) Restart(context.Context) error {
	if n.restartErr != nil {
		n.running = false
		return n.restartErr
	}
	n.running = true
	return nil
}
func (n *fakeNginx) Running() bool            { return n.running }
func (n *fakeNginx) LogMark() int64           { return 0 }
func (n *fakeNginx) Handover(context.Context) {}
func (n *fakeNginx) SelfTest(context.Context, int64) error {
	n.selfTests++
	if n.liveHas(selfTestFailMark) {
		return fmt.Errorf("%w: GET answered 500: load cannot open /lua/waf/check.lua: Permission denied", nginx.ErrSelfTest)
	}
	return nil
}

func (n *fakeNginx) liveHas(mark string) bool {
	b, _ := os.ReadFile(n.live)
	return strings.Contains(string(b), mark)
}

type rig struct {
	t     *testing.T
	e     *Engine
	cp    *fakeCP
	ng    *fakeNginx
	now   time.Time
	ipg   [][]uint64
	dir   string
	paths landing.Paths
}

func newRig(t *testing.T) *rig {
	t.Helper()
	dir := t.TempDir()
	dd := filepath.Join(dir, "data")
	p := landing.Paths{
		Main: dd + "/etc/nginx/nginx.conf", Route: dd + "/etc/nginx/conf.d/routes.conf",
		AccessLog: dd + "/var/log/openflare/access.log", ErrorLog: dd + "/var/log/openflare/error.log",
		PID: dd + "/var/run/nginx.pid", TempDir: dd + "/var/cache/nginx", ProxyCache: dd + "/var/cache/openflare_proxy",
		CertDir: dd + "/etc/nginx/certs", OpenRestyCertDir: dd + "/etc/nginx/certs",
		LuaDir: dd + "/etc/nginx/lua", OpenRestyLuaDir: dd + "/etc/nginx/lua",
		RuntimeConfigDir: dd + "/etc/openflare", PagesDir: dd + "/var/lib/openflare/pages",
		ObservabilityPort: 18081,
		HTTPErrorLog:      dd + "/var/log/openflare/http-error.log",
		SelfTestDir:       dd + "/var/run/selftest",
		EmptyDir:          dd + "/var/empty",
	}
	stateDir := dd + "/var/lib/openflare"
	store, err := state.Open(filepath.Join(stateDir, "agent-state.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, cp: &fakeCP{}, ng: &fakeNginx{live: p.Main}, now: time.Unix(1_800_000_000, 0), dir: dir, paths: p}
	r.e = &Engine{
		CP: r.cp, Nginx: r.ng, Store: store, Paths: p,
		Tree:                 landing.Tree{Paths: p, DataDir: dd, StateDir: stateDir},
		Fallback:             "# safe fallback\nevents {}\nhttp {\n}\n",
		BackupDir:            filepath.Join(stateDir, "apply-backup"),
		ParseDir:             filepath.Join(stateDir, "policy-probe"),
		StageDir:             filepath.Join(stateDir, "support-stage"),
		Log:                  slog.New(slog.DiscardHandler),
		Now:                  func() time.Time { return r.now },
		OnIPGroupsReferenced: func(_ context.Context, ids []uint64) { r.ipg = append(r.ipg, ids) },
	}
	return r
}

// version makes an active config whose main template carries marks and
// whose one route proxies name.test; ids are the IP groups its WAF uses.
func version(t *testing.T, v, name string, marks string, ids ...uint64) protocol.ActiveConfig {
	t.Helper()
	return versionTo(t, v, name, "http://127.0.0.1:9/"+name, marks, ids...)
}

// versionTo is version with its route proxying to origin.
func versionTo(t *testing.T, v, name, origin string, marks string, ids ...uint64) protocol.ActiveConfig {
	t.Helper()
	src := tcp.Source{
		Routes:    []tcp.Route{{ID: 1, SiteName: "s1", Domains: []string{name + ".test"}, OriginURL: origin}},
		OpenResty: map[string]any{"main_config_template": "events {}\nhttp {\n" + marks + "\n    include {{OpenRestyRouteConfigInclude}};\n}\n", "origin_error_page_enabled": false},
	}
	if len(ids) > 0 {
		// Global, so the group applies to every site.
		rg := tcp.IPMatchRuleGroup(2, "deny", ids...)
		rg.IsGlobal = true
		src.WAF = &tcp.WAF{RuleGroups: []tcp.RuleGroup{tcp.DefaultRuleGroup(), rg}}
	}
	json := src.JSON()
	out, err := render.Config(json, nil)
	if err != nil {
		t.Fatal(err)
	}
	return protocol.ActiveConfig{Version: v, Checksum: out.Checksum(), SourceConfigJSON: json}
}

func ref(ac protocol.ActiveConfig) protocol.ConfigRef {
	return protocol.ConfigRef{Version: ac.Version, Checksum: ac.Checksum}
}

// publish makes ac the server's active version and applies it as a beat
// naming it would.
func (r *rig) publish(ac protocol.ActiveConfig, mode Mode) error {
	r.cp.active = ac
	target := ref(ac)
	return r.e.Apply(context.Background(), &target, mode)
}

func (r *rig) state() state.State { return r.e.Store.Get() }

// read is a live file's content, "" when it does not exist.
func (r *rig) read(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func (r *rig) liveMain() string { return r.read(r.paths.Main) }

func TestApplyAndSkipCurrent(t *testing.T) {
	r := newRig(t)
	v1 := version(t, "v1", "one", "", 7, 3)
	if err := r.publish(v1, Normal); err != nil {
		t.Fatal(err)
	}
	if st := r.state(); st.Current != ref(v1) || st.Blocked != (protocol.ConfigRef{}) || st.Workers == "" {
		t.Fatalf("state %+v", st)
	}
	if l := r.cp.lastLog(t); l.Result != protocol.ResultSuccess || l.Version != "v1" || l.Checksum != v1.Checksum {
		t.Fatalf("apply log %+v", l)
	}
	if !r.ng.running || r.ng.selfTests != 1 || len(r.ipg) != 1 || !slices.Equal(r.ipg[0], []uint64{3, 7}) {
		t.Fatalf("running %v self-tests %d ip groups %v", r.ng.running, r.ng.selfTests, r.ipg)
	}
	if !strings.Contains(testsupport.ReadFile(t, r.paths.Route), "one.test") {
		t.Fatal("route config not landed")
	}
	// Current: nothing is fetched again.
	fetches := r.cp.fetches
	if err := r.publish(v1, Normal); err != nil || r.cp.fetches != fetches {
		t.Fatalf("current version fetched again (%v)", err)
	}
	// The startup apply re-checks the disk; unchanged and running, nothing
	// is reloaded and no second apply log goes out.
	acts, logs := r.ng.activations, len(r.cp.logs)
	if err := r.publish(v1, Startup); err != nil || r.ng.activations != acts || len(r.cp.logs) != logs {
		t.Fatalf("startup re-apply reloaded (%d→%d) or reported (%d→%d): %v", acts, r.ng.activations, logs, len(r.cp.logs), err)
	}
	// No target and nothing to do.
	if err := r.e.Apply(context.Background(), nil, Normal); err != nil {
		t.Fatal(err)
	}
	if err := r.e.Apply(context.Background(), &protocol.ConfigRef{Version: " ", Checksum: "x"}, Normal); err != nil {
		t.Fatal(err)
	}
}

// Each way a version can fail, and where the node ends up.
func TestFailuresRollBack(t *testing.T) {
	cases := []struct {
		name       string
		before     string // "" nothing landed, else v1 serving first
		mark       string
		result     string
		blocked    bool
		current    string
		liveHas    string
		messageHas string
	}{
		{"-t fails, v1 keeps serving", "v1", brokenMark, protocol.ResultWarning, true, "v1", "one.test", "rolled back to previous config: apply version v2: nginx -t"},
		{"first deployment bad: fallback", "", brokenMark, protocol.ResultWarning, true, "", "safe fallback", "fallback runtime started"},
		{"reload fails: backup restored", "v1", reloadFailMark, protocol.ResultWarning, true, "v1", "one.test", "rolled back to previous config"},
		{"self-test fails: restored, held, not blocked", "v1", selfTestFailMark, protocol.ResultFailed, false, "v1", "one.test", "Permission denied"},
		{"self-test fails on first deployment: nothing to restore", "", selfTestFailMark, protocol.ResultFailed, false, "", "", "data-plane self-test failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			if tc.before != "" {
				if err := r.publish(version(t, "v1", "one", ""), Normal); err != nil {
					t.Fatal(err)
				}
			}
			v2 := version(t, "v2", "two", tc.mark)
			err := r.publish(v2, Normal)
			if err == nil {
				t.Fatal("a failed apply returned no error")
			}
			l := r.cp.lastLog(t)
			if l.Version != "v2" || l.Result != tc.result || !strings.Contains(l.Message, tc.messageHas) {
				t.Fatalf("apply log %+v", l)
			}
			st := r.state()
			if (st.Blocked == ref(v2)) != tc.blocked || st.Current.Version != tc.current {
				t.Fatalf("state %+v", st)
			}
			if !strings.Contains(r.liveMain()+r.read(r.paths.Route), tc.liveHas) {
				t.Fatalf("live config lacks %q:\n%s", tc.liveHas, r.liveMain())
			}
			if !tc.blocked && !strings.Contains(l.Message, "not blocklisted") {
				t.Fatalf("a local failure does not say it is not blocklisted: %s", l.Message)
			}
			// Blocked or held: the same version is not fetched again...
			fetches := r.cp.fetches
			if err := r.publish(v2, Normal); err != nil || r.cp.fetches != fetches {
				t.Fatalf("failed version fetched again: %v", err)
			}
			// ...until a force sync.
			r.cp.active = version(t, "v3", "three", "")
			if err := r.publish(r.cp.active, Force); err != nil {
				t.Fatal(err)
			}
			if st := r.state(); st.Current.Version != "v3" || st.Blocked != (protocol.ConfigRef{}) {
				t.Fatalf("after force: %+v", st)
			}
		})
	}
}

// Problems of this node never blocklist the version.
func TestLocalProblemsHold(t *testing.T) {
	cases := []struct {
		name string
		set  func(*fakeNginx)
		has  string
	}{
		{"no usable binary", func(n *fakeNginx) {
			n.usable = fmt.Errorf("%w: not installed", nginx.ErrUnusable)
			n.mainErr = n.usable
		}, "not installed"},
		{"no Lua module", func(n *fakeNginx) { n.mainErr = fmt.Errorf("%w: install lua", nginx.ErrNoLua) }, "install lua"},
		{"nginx_user unknown", func(n *fakeNginx) { n.workersErr = fmt.Errorf("%w: ghost", osuser.ErrUnknownUser) }, "ghost"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			tc.set(r.ng)
			v1 := version(t, "v1", "one", "")
			if err := r.publish(v1, Normal); err == nil {
				t.Fatal("no error")
			}
			l := r.cp.lastLog(t)
			if l.Result != protocol.ResultFailed || !strings.Contains(l.Message, tc.has) || !strings.Contains(l.Message, "not blocklisted") {
				t.Fatalf("apply log %+v", l)
			}
			if st := r.state(); st.Blocked != (protocol.ConfigRef{}) || st.OpenRestyStatus != protocol.StatusUnhealthy {
				t.Fatalf("state %+v", st)
			}
			fetches := r.cp.fetches
			r.publish(v1, Normal)
			if r.cp.fetches != fetches {
				t.Fatal("a held version was fetched again")
			}
		})
	}
}

// A version that does not render is left alone for a minute, then tried
// again.
func TestRenderFailureBackoff(t *testing.T) {
	r := newRig(t)
	bad := protocol.ActiveConfig{Version: "v9", Checksum: "c9", SourceConfigJSON: `{"routes":[{"id":1,"domains":[],"origin_url":"http://x"}],"openresty_config":{},"waf":{}}`}
	err := r.publish(bad, Normal)
	if err == nil || !strings.Contains(err.Error(), "render version v9") {
		t.Fatalf("err %v", err)
	}
	fetches := r.cp.fetches
	if err2 := r.publish(bad, Normal); err2 == nil || err2.Error() != err.Error() || r.cp.fetches != fetches {
		t.Fatalf("retried at once: %v (fetches %d→%d)", err2, fetches, r.cp.fetches)
	}
	r.now = r.now.Add(renderRetry)
	r.publish(bad, Normal)
	if r.cp.fetches != fetches+1 {
		t.Fatal("not retried after the back-off")
	}
	if st := r.state(); !strings.Contains(st.LastError, "render version v9") {
		t.Fatalf("last error %q", st.LastError)
	}
}

func TestFetchProblems(t *testing.T) {
	r := newRig(t)
	// No active version on the server (E4 answers 400): nothing to do.
	r.cp.err = &controlplane.Error{Endpoint: "active config", Status: 400, Message: "none"}
	if err := r.e.Apply(context.Background(), nil, Startup); err != nil {
		t.Fatalf("no active version: %v", err)
	}
	r.cp.err = &controlplane.Error{Endpoint: "active config", Status: 502, Message: "down"}
	if err := r.e.Apply(context.Background(), nil, Startup); err == nil || !strings.Contains(err.Error(), "fetch active config") {
		t.Fatalf("err %v", err)
	}
	r.cp.err = nil
	// A reply naming no usable version is refused without storing or
	// echoing what it said.
	for _, bad := range []protocol.ActiveConfig{
		{Version: "v1"},
		{Version: strings.Repeat("9", 5<<20), Checksum: "c"},
		{Version: "v1\r\nX: y", Checksum: "c"},
	} {
		r.cp.active = bad
		err := r.e.Apply(context.Background(), nil, Startup)
		if err == nil || !strings.Contains(err.Error(), "no usable version") || len(err.Error()) > 200 {
			t.Fatalf("err %.300v", err)
		}
		if st := r.state(); len(st.LastError) > 200 {
			t.Fatalf("stored a last error of %d bytes", len(st.LastError))
		}
	}
	// A beat naming a malformed version is no target at all.
	huge := protocol.ConfigRef{Version: strings.Repeat("9", 5<<20), Checksum: "c"}
	fetches := r.cp.fetches
	if err := r.e.Apply(context.Background(), &huge, Normal); err != nil || r.cp.fetches != fetches {
		t.Fatalf("a malformed target was fetched: %v", err)
	}
	// The server moved on between the beat and the fetch: the fetched
	// version counts, and it is already current.
	v1 := version(t, "v1", "one", "")
	if err := r.publish(v1, Normal); err != nil {
		t.Fatal(err)
	}
	stale := protocol.ConfigRef{Version: "v0", Checksum: "c0"}
	logs := len(r.cp.logs)
	if err := r.e.Apply(context.Background(), &stale, Normal); err != nil || len(r.cp.logs) != logs {
		t.Fatalf("re-applied the current version: %v", err)
	}
}

// Being current clears what a failure left behind.
func TestCurrentClearsStaleErrors(t *testing.T) {
	r := newRig(t)
	v1 := version(t, "v1", "one", "")
	if err := r.publish(v1, Normal); err != nil {
		t.Fatal(err)
	}
	r.e.Store.Update(func(st *state.State) {
		st.LastError = "old"
		st.Blocked = protocol.ConfigRef{Version: "v0", Checksum: "c0"}
	})
	if err := r.publish(v1, Normal); err != nil {
		t.Fatal(err)
	}
	if st := r.state(); st.LastError != "" || st.Blocked != (protocol.ConfigRef{}) {
		t.Fatalf("state %+v", st)
	}
}

func TestChecksumMismatchAndReportFailure(t *testing.T) {
	r := newRig(t)
	v1 := version(t, "v1", "one", "")
	v1.Checksum = "0000"
	if err := r.publish(v1, Normal); err != nil {
		t.Fatal(err)
	}
	if l := r.cp.lastLog(t); !strings.Contains(l.Message, "differs from server checksum 0000") {
		t.Fatalf("apply log %+v", l)
	}
	r.cp.logErr = errors.New("server down")
	v2 := version(t, "v2", "two", "", 5)
	err := r.publish(v2, Normal)
	if err == nil || !strings.Contains(err.Error(), "report apply of v2") {
		t.Fatalf("err %v", err)
	}
	// Applied all the same, and the IP groups were synced.
	if st := r.state(); st.Current != ref(v2) || len(r.ipg) != 2 || !slices.Equal(r.ipg[1], []uint64{5}) {
		t.Fatalf("state %+v, ip groups %v", st, r.ipg)
	}
}

func TestBoot(t *testing.T) {
	t.Run("starts the landed config", func(t *testing.T) {
		r := newRig(t)
		if err := r.publish(version(t, "v1", "one", ""), Normal); err != nil {
			t.Fatal(err)
		}
		r.ng.running = false
		if !r.e.Down() {
			t.Fatal("Down false with the landed config not running")
		}
		if err := r.e.Boot(context.Background()); err != nil || !r.ng.running {
			t.Fatalf("boot: %v, running %v", err, r.ng.running)
		}
		if r.e.Down() {
			t.Fatal("Down true while running")
		}
	})
	t.Run("self-tests what an older agent left running", func(t *testing.T) {
		r := newRig(t)
		if err := r.publish(version(t, "v1", "one", ""), Normal); err != nil {
			t.Fatal(err)
		}
		// The files break under the running nginx.
		os.WriteFile(r.paths.Main, []byte(r.liveMain()+"\n"+selfTestFailMark+"\n"), 0o640)
		if err := r.e.Boot(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := r.state(); !strings.Contains(st.SelfTestError, "Permission denied") {
			t.Fatalf("self-test error %q", st.SelfTestError)
		}
	})
	t.Run("landed config broken, nothing running: fallback", func(t *testing.T) {
		r := newRig(t)
		if err := r.publish(version(t, "v1", "one", ""), Normal); err != nil {
			t.Fatal(err)
		}
		r.ng.running = false
		os.WriteFile(r.paths.Main, []byte(brokenMark), 0o640)
		if err := r.e.Boot(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r.liveMain(), "safe fallback") || r.state().Current.Version != "" {
			t.Fatalf("fallback not started: %q %+v", r.liveMain(), r.state())
		}
	})
	t.Run("landed config fails its self-test at start: no fallback", func(t *testing.T) {
		r := newRig(t)
		if err := r.publish(version(t, "v1", "one", selfTestFailMark), Normal); err == nil {
			t.Fatal("self-test failure not reported")
		}
		r.ng.running = false
		os.MkdirAll(filepath.Dir(r.paths.Main), 0o755)
		os.WriteFile(r.paths.Main, []byte("http {\n"+selfTestFailMark+"\n}\n"), 0o640)
		err := r.e.Boot(context.Background())
		if !errors.Is(err, nginx.ErrSelfTest) || strings.Contains(r.liveMain(), "safe fallback") {
			t.Fatalf("boot: %v\n%s", err, r.liveMain())
		}
	})
	t.Run("interrupted apply restored", func(t *testing.T) {
		r := newRig(t)
		v1 := version(t, "v1", "one", "")
		if err := r.publish(v1, Normal); err != nil {
			t.Fatal(err)
		}
		before := r.liveMain()
		// A crash mid-apply: backup complete, live file half replaced.
		txn, err := landing.Begin(r.e.BackupDir, ref(v1), protocol.ConfigRef{Version: "v2", Checksum: "c2"}, []string{r.paths.Main}, nil)
		if err != nil || txn == nil {
			t.Fatal(err)
		}
		os.WriteFile(r.paths.Main, []byte("half"), 0o640)
		r.e.Store.Update(func(st *state.State) { st.Current = protocol.ConfigRef{Version: "v2", Checksum: "c2"} })
		if err := r.e.Boot(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r.liveMain() != before || r.state().Current != ref(v1) {
			t.Fatalf("not restored: %q %+v", r.liveMain(), r.state())
		}
	})
	t.Run("no usable nginx", func(t *testing.T) {
		r := newRig(t)
		r.ng.usable = fmt.Errorf("%w: missing", nginx.ErrUnusable)
		os.MkdirAll(filepath.Dir(r.paths.Main), 0o755)
		os.WriteFile(r.paths.Main, []byte("x"), 0o640)
		if err := r.e.Boot(context.Background()); err == nil || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("boot: %v", err)
		}
		if r.e.Down() {
			t.Fatal("Down true without a usable nginx: nothing to restart")
		}
	})
}

// A restart the server asked for that fails is kept as RestartError (the
// beat reports the node unhealthy from it), survives the applies that
// follow, and goes with the next restart that succeeds. The node is never
// left dark by it.
func TestRestart(t *testing.T) {
	r := newRig(t)
	if err := r.e.Restart(context.Background()); err == nil || !strings.Contains(r.state().RestartError, "no landed config") {
		t.Fatalf("restart with nothing landed: %v, recorded %q", err, r.state().RestartError)
	}
	v1 := version(t, "v1", "one", "")
	if err := r.publish(v1, Normal); err != nil {
		t.Fatal(err)
	}
	selfTests := r.ng.selfTests
	if err := r.e.Restart(context.Background()); err != nil || r.ng.selfTests != selfTests+1 || r.state().RestartError != "" {
		t.Fatalf("restart: %v, self-tests %d→%d, recorded %q", err, selfTests, r.ng.selfTests, r.state().RestartError)
	}
	// The new master does not come up: never left dark.
	r.ng.restartErr = errors.New("bind failed")
	err := r.e.Restart(context.Background())
	if st := r.state(); err == nil || !r.ng.running || !strings.Contains(st.RestartError, "nginx restart failed: bind failed") || st.LastError != "" {
		t.Fatalf("restart failure: %v, running %v, state %+v", err, r.ng.running, st)
	}
	// An up-to-date sync clears last_error, not the failed restart.
	if err := r.publish(v1, Normal); err != nil || r.state().RestartError == "" {
		t.Fatalf("the failed restart was forgotten by a sync: %v, %+v", err, r.state())
	}
	r.ng.restartErr = nil
	if err := r.e.Restart(context.Background()); err != nil || r.state().RestartError != "" {
		t.Fatalf("a successful restart left %q (%v)", r.state().RestartError, err)
	}
	r.ng.usable = fmt.Errorf("%w: gone", nginx.ErrUnusable)
	if err := r.e.Restart(context.Background()); err == nil || !strings.Contains(r.state().RestartError, "gone") {
		t.Fatalf("restart without a usable nginx: %v, recorded %q", err, r.state().RestartError)
	}
	if err := r.e.Ensure(context.Background()); err == nil {
		t.Fatal("ensure without a usable nginx succeeded")
	}
}

func TestModeNames(t *testing.T) {
	if Normal.String() != "normal" || Startup.String() != "startup" || Force.String() != "force" {
		t.Fatal(Normal, Startup, Force)
	}
}

// A server flip-flopping between two versions gets a bounded number of
// reloads per minute; the version waits, and applies once the minute
// moves. New versions are never held back.
func TestFlipFlopRateLimited(t *testing.T) {
	r := newRig(t)
	a, b := version(t, "va", "a", ""), version(t, "vb", "b", "")
	seq := []protocol.ActiveConfig{a, b, a, b} // two returns: a, then b
	for i, v := range seq {
		if err := r.publish(v, Normal); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
		r.now = r.now.Add(time.Second)
	}
	acts := r.ng.activations
	err := r.publish(a, Normal) // a third return within the minute
	if err == nil || !strings.Contains(err.Error(), "rate-limited") || r.ng.activations != acts {
		t.Fatalf("flip-flop not limited: %v (activations %d→%d)", err, acts, r.ng.activations)
	}
	// A new version is not a flip-flop.
	if err := r.publish(version(t, "vc", "c", ""), Normal); err != nil {
		t.Fatalf("new version held back: %v", err)
	}
	// A force apply is the operator's: not limited.
	if err := r.publish(a, Force); err != nil || r.state().Current.Version != "va" {
		t.Fatalf("force: %v", err)
	}
	r.now = r.now.Add(applyWindow)
	if err := r.publish(b, Normal); err != nil || r.state().Current.Version != "vb" {
		t.Fatalf("after the window: %v", err)
	}
}

// A reply that fails to fetch (too large, cut, not JSON) is not asked for
// again on every beat: the retries back off.
func TestFetchFailuresBackOff(t *testing.T) {
	r := newRig(t)
	r.cp.err = errors.New("active config: reply exceeds 16 MiB: reply too large")
	v := &protocol.ConfigRef{Version: "v1", Checksum: "c1"}
	for i := 0; i < 5; i++ {
		r.e.Apply(context.Background(), v, Normal)
	}
	if r.cp.fetches != 1 {
		t.Fatalf("%d fetches in a burst of beats, want 1", r.cp.fetches)
	}
	r.now = r.now.Add(fetchBackoff(1))
	r.e.Apply(context.Background(), v, Normal)
	if r.cp.fetches != 2 {
		t.Fatalf("not retried after the back-off (%d fetches)", r.cp.fetches)
	}
	// A force apply asks at once; success resets the back-off.
	r.cp.err = nil
	r.cp.active = version(t, "v1", "one", "")
	if err := r.publish(r.cp.active, Force); err != nil || r.e.fetchFailed.n != 0 {
		t.Fatalf("force: %v, failures %d", err, r.e.fetchFailed.n)
	}
}

// A config the owner's policy refuses never reaches nginx (not even -t):
// held in memory, not blocklisted on disk, so a policy change and a
// restart let it apply.
func TestPolicyRefusalHeld(t *testing.T) {
	r := newRig(t)
	if err := r.publish(version(t, "v1", "one", ""), Normal); err != nil {
		t.Fatal(err)
	}
	evil := version(t, "v2", "two", `    init_by_lua_block { os.execute("id") }`)
	err := r.publish(evil, Normal)
	if err == nil || !strings.Contains(err.Error(), "template policy") {
		t.Fatalf("err %v", err)
	}
	l := r.cp.lastLog(t)
	if l.Result != protocol.ResultWarning || !strings.Contains(l.Message, "init_by_lua_block") || !strings.Contains(l.Message, "held") {
		t.Fatalf("apply log %+v", l)
	}
	if st := r.state(); st.Blocked != (protocol.ConfigRef{}) || st.Current.Version != "v1" {
		t.Fatalf("state %+v", st)
	}
	fetches := r.cp.fetches
	r.publish(evil, Normal)
	if r.cp.fetches != fetches {
		t.Fatal("a held version was fetched again")
	}
	// A trusting owner (after a restart: a new engine) applies it.
	r.e.held = protocol.ConfigRef{}
	r.e.Policy.Trusted = true
	if err := r.publish(evil, Normal); err != nil || r.state().Current.Version != "v2" {
		t.Fatalf("trusted: %v", err)
	}
}

// The fetch back-off belongs to the version that failed: a newly
// published one is fetched at once.
func TestFetchBackOffPerVersion(t *testing.T) {
	r := newRig(t)
	r.cp.err = errors.New("active config: reply too large")
	x := &protocol.ConfigRef{Version: "vx", Checksum: "cx"}
	r.e.Apply(context.Background(), x, Normal)
	r.e.Apply(context.Background(), x, Normal)
	if r.cp.fetches != 1 {
		t.Fatalf("%d fetches of the failing version", r.cp.fetches)
	}
	y := &protocol.ConfigRef{Version: "vy", Checksum: "cy"}
	r.e.Apply(context.Background(), y, Normal)
	if r.cp.fetches != 2 {
		t.Fatal("a new version waited for the old one's back-off")
	}
}

// A version whose main config nginx reads differently from the policy
// (nginx's parse finds a directive of reach the policy did not accept) is
// refused before anything lands or nginx tests it: held, not blocklisted,
// the previous version serving, the parse's files gone.
func TestPolicyParseRefusal(t *testing.T) {
	r := newRig(t)
	v1 := version(t, "v1", "one", "")
	if err := r.publish(v1, Normal); err != nil {
		t.Fatal(err)
	}
	live, tests := r.liveMain(), r.ng.tests
	v2 := version(t, "v2", "two", hiddenMark)
	err := r.publish(v2, Normal)
	if err == nil || !strings.Contains(err.Error(), `nginx reads a directive "content_by_lua_block"`) || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("apply: %v", err)
	}
	if r.liveMain() != live || r.ng.tests != tests {
		t.Fatalf("the refused version reached the live tree or nginx -t (%d tests)", r.ng.tests-tests)
	}
	st := r.state()
	if st.Current != ref(v1) || st.Blocked == ref(v2) || !strings.Contains(st.LastError, "template policy") {
		t.Fatalf("state %+v", st)
	}
	if l := r.cp.lastLog(t); l.Version != "v2" || l.Result == protocol.ResultSuccess {
		t.Fatalf("apply log %+v", l)
	}
	if _, err := os.Stat(r.e.ParseDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("parse copy left behind: %v", err)
	}
	// Held: the same version is not tried again until the agent restarts.
	parses := r.ng.policyParses
	if err := r.publish(v2, Normal); err != nil || r.ng.policyParses != parses {
		t.Fatalf("held version parsed again (%v)", err)
	}
}

// A version that proxies to a cloud metadata address is refused before
// anything lands, unless the owner allows such origins; a name the
// resolver maps there is refused too.
func TestLinkLocalOriginRefused(t *testing.T) {
	r := newRig(t)
	v1 := version(t, "v1", "one", "")
	if err := r.publish(v1, Normal); err != nil {
		t.Fatal(err)
	}
	live := r.liveMain()
	err := r.publish(versionTo(t, "v2", "two", "http://169.254.169.254/latest/meta-data/", ""), Normal)
	if err == nil || !strings.Contains(err.Error(), "169.254.169.254") || !strings.Contains(err.Error(), "link-local") || r.liveMain() != live {
		t.Fatalf("apply: %v", err)
	}
	r.e.Resolve = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
	}
	if err := r.publish(versionTo(t, "v3", "three", "http://metadata.example/", ""), Normal); err == nil || !strings.Contains(err.Error(), "resolves to 169.254.169.254") {
		t.Fatalf("apply of a name resolving to metadata: %v", err)
	}
	r.e.Policy.AllowLinkLocalOrigins = true
	if err := r.publish(versionTo(t, "v4", "four", "http://169.254.1.1:8080/", ""), Normal); err != nil {
		t.Fatalf("allowed link-local origin refused: %v", err)
	}
}
