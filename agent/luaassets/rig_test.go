package luaassets

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"openflare/testing/nginxtest"
	"openflare/testing/nstest"
	"openflare/testing/testsupport"
)

func TestMain(m *testing.M) { nstest.Main(m) }

// Client addresses: every 127.x.y.z is local inside the test namespace.
const (
	blockedIP = "127.0.0.10"
	otherIP   = "127.0.0.11"
)

const failBody = "OpenFlare WAF runtime error\n"

// rig is one nginx with the Lua tree installed the way the agent installs
// it, a runtime config dir and an origin answering "origin-ok".
type rig struct {
	t          testing.TB
	luaDir     string
	certDir    string
	runtimeDir string
	originHits atomic.Int64
	origin     *httptest.Server
	nginx      *nginxtest.Server
}

func newRig(t testing.TB) *rig {
	t.Helper()
	root := t.TempDir()
	r := &rig{
		t:          t,
		luaDir:     filepath.Join(root, "lua"),
		certDir:    filepath.Join(root, "certs"),
		runtimeDir: filepath.Join(root, "runtime"),
	}
	expand := testExpand(r.runtimeDir, filepath.Join(root, "country.mmdb"), filepath.Join(root, "city.mmdb"))
	files := Files(expand)
	writeFiles(t, r.luaDir, files)
	writeFiles(t, r.certDir, CertDirFiles(files))
	if err := os.MkdirAll(r.runtimeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.origin = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.originHits.Add(1)
		io.WriteString(w, "origin-ok")
	}))
	t.Cleanup(r.origin.Close)
	return r
}

func writeFiles(t testing.TB, dir string, files []File) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(dir, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// start runs nginx with the main-config pieces the agent renders (shared
// dicts, rewritten init_worker, observability server) plus servers.
func (r *rig) start(servers string) {
	r.t.Helper()
	body := fmt.Sprintf(`
    lua_package_path "%[1]s/?.lua;%[1]s/?/init.lua;;";
    lua_shared_dict openflare_observability 10m;
    lua_shared_dict openflare_pow_challenges 10m;
    lua_shared_dict openflare_pow_sessions 10m;
    lua_shared_dict openflare_pow_config 1m;
    lua_shared_dict openflare_waf_config 1m;
    lua_shared_dict openflare_waf_ip_groups 64m;
    init_worker_by_lua_block { require("waf.runtime").init() dofile("%[1]s/observability/init.lua") }
    log_by_lua_file %[1]s/observability/log.lua;
    upstream origin { server %[2]s; }
    server {
        listen 127.0.0.1:9145;
        server_name openflare-observability;
        access_log off;
        location = /openflare/stub_status { stub_status; }
        location = /openflare/observability {
            default_type application/json;
            content_by_lua_file %[1]s/observability/read.lua;
        }
    }
%[3]s
`, r.luaDir, r.origin.Listener.Addr(), servers)
	r.nginx = nginxtest.Start(r.t, body)
	r.t.Cleanup(func() {
		log := r.nginx.ErrorLog()
		for _, bad := range []string{"lua entry thread aborted", "writing a global Lua variable"} {
			if strings.Contains(log, bad) {
				r.t.Errorf("error log has %q:\n%s", bad, log)
			}
		}
	})
	nginxtest.WaitPort(r.t, "127.0.0.1:9145")
	// Start returns once one worker is up; tests that count workers need all.
	conf, err := os.ReadFile(r.nginx.Conf)
	if err != nil {
		r.t.Fatal(err)
	}
	m := regexp.MustCompile(`worker_processes (\d+);`).FindSubmatch(conf)
	if m == nil {
		r.t.Fatalf("no worker_processes in %s", r.nginx.Conf)
	}
	workers, _ := strconv.Atoi(string(m[1]))
	testsupport.WaitFor(r.t, 5*time.Second, "all nginx workers", func() bool { return len(r.nginx.WorkerPIDs()) == workers })
}

// wafServer renders a plain proxy server block guarded by waf/check.lua, as
// the renderer does for a route without PoW or SW. Its host is <site>.test.
func (r *rig) wafServer(site string) string {
	return fmt.Sprintf(`
    server {
        listen 80;
        server_name %[1]s.test;
        set $openflare_waf_site "%[1]s";
        access_by_lua_file %[2]s/waf/check.lua;
        location / { proxy_pass http://origin; }
    }
`, site, r.luaDir)
}

// mergedAccess is the access_by_lua_block the renderer emits when PoW or SW
// is on; extra is the code after the WAF check.
func (r *rig) mergedAccess(extra string) string {
	return fmt.Sprintf(`access_by_lua_block {
            if not string.find(package.path, "%[1]s/?.lua", 1, true) then
                package.path = "%[1]s/?.lua;%[1]s/?/init.lua;" .. package.path
            end
            require("waf.runtime").check()
            if ngx.ctx.openflare_waf_blocked then
                return
            end
            %[2]s
        }`, r.luaDir, extra)
}

func (r *rig) writeRuntime(name string, data []byte) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.runtimeDir, name), data, 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) writeWAF(doc any) {
	r.t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		r.t.Fatal(err)
	}
	r.writeRuntime("waf_config.json", b)
}

// writeAtomic replaces name in the runtime dir the way the agent does:
// temp file in the same dir, fsync, rename.
func (r *rig) writeAtomic(name string, data []byte) {
	r.t.Helper()
	f, err := os.CreateTemp(r.runtimeDir, "."+name+".tmp-*")
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		r.t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		r.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(f.Name(), filepath.Join(r.runtimeDir, name)); err != nil {
		r.t.Fatal(err)
	}
}

// writeSnapshot writes waf_ip_groups.json and then its checksum file and
// returns the checksum and the time the checksum file landed.
func (r *rig) writeSnapshot(groups map[string]obj) (string, time.Time) {
	r.t.Helper()
	data, err := json.Marshal(obj{"groups": groups})
	if err != nil {
		r.t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	checksum := hex.EncodeToString(sum[:])
	r.writeAtomic("waf_ip_groups.json", data)
	r.writeAtomic("waf_ip_groups.json.checksum", []byte(checksum+"\n"))
	return checksum, time.Now()
}

type reply struct {
	status int
	body   string
	header http.Header
}

// request sends one request to 127.0.0.1:80 from the client address from,
// on a fresh connection so that requests spread over the workers.
func (r *rig) request(from, method, host, target string, header http.Header) reply {
	r.t.Helper()
	return send(r.t, from, method, "http://127.0.0.1"+target, host, header, nil)
}

func send(t testing.TB, from, method, url, host string, header http.Header, body io.Reader) reply {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	client := &http.Client{
		Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true},
		Timeout:   10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s) from %s: %v", method, url, host, from, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{status: resp.StatusCode, body: string(b), header: resp.Header}
}

func (r *rig) get(from, host, target string) reply {
	r.t.Helper()
	return r.request(from, http.MethodGet, host, target, nil)
}

// expect checks status, body and (when non-empty) Content-Type.
func (r *rig) expect(got reply, status int, body, contentType string) {
	r.t.Helper()
	if got.status != status || got.body != body {
		r.t.Errorf("got %d %q, want %d %q", got.status, got.body, status, body)
	}
	if ct := got.header.Get("Content-Type"); contentType != "" && ct != contentType {
		r.t.Errorf("Content-Type = %q, want %q", ct, contentType)
	}
}

func (r *rig) expectFailClosed(got reply) {
	r.t.Helper()
	r.expect(got, http.StatusInternalServerError, failBody, "text/plain; charset=utf-8")
}

// obj is a JSON object literal.
type obj = map[string]any

// Graph builders: every graph enters at "start".

func graph(nodes obj) obj { return obj{"entry": "start", "nodes": nodes} }

func startNode(next string) obj {
	return obj{"type": "start", "config": obj{}, "next": obj{"next": next}}
}

func allowNode() obj { return obj{"type": "allow", "config": obj{}} }

func blockNode(status int, body string) obj {
	return obj{"type": "block", "config": obj{"status_code": status, "response_body": body}}
}

// branchNode is a true/false node; an empty target leaves that edge out.
func branchNode(typ string, config obj, onTrue, onFalse string) obj {
	next := obj{}
	if onTrue != "" {
		next["true"] = onTrue
	}
	if onFalse != "" {
		next["false"] = onFalse
	}
	return obj{"type": typ, "config": config, "next": next}
}

// allowGraph is start → allow.
func allowGraph() obj {
	return graph(obj{"start": startNode("allow"), "allow": allowNode()})
}

// blockGraph is start → block(status, body).
func blockGraph(status int, body string) obj {
	return graph(obj{"start": startNode("block"), "block": blockNode(status, body)})
}

// ipGraph is start → ip_match(config), true → block(status, body), false → allow.
func ipGraph(config obj, status int, body string) obj {
	return graph(obj{
		"start": startNode("m"),
		"m":     branchNode("ip_match", config, "block", "allow"),
		"block": blockNode(status, body),
		"allow": allowNode(),
	})
}

func group(id int, global bool, g obj) obj {
	return obj{"id": id, "name": fmt.Sprintf("group-%d", id), "enabled": true, "is_global": global, "block_status_code": 0, "graph": g}
}

func binding(site string, ids ...int) obj {
	if ids == nil {
		ids = []int{}
	}
	return obj{"route_id": 1, "site_name": site, "rule_group_ids": ids}
}

// countLines counts error-log lines containing s.
func (r *rig) countLines(s string) int {
	return strings.Count(r.nginx.ErrorLog(), s)
}

// waitAdopted waits until the error log holds n lines containing adopted:
// each worker adopts a snapshot on its own tick and logs it, and a request
// is answered by whichever worker accepts it.
func (r *rig) waitAdopted(adopted string, n int) {
	r.t.Helper()
	testsupport.WaitFor(r.t, snapshotPickup, fmt.Sprintf("%d workers' %q", n, adopted), func() bool {
		return r.countLines(adopted) >= n
	})
}
