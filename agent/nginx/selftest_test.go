package nginx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"openflare/agent/selftest"
)

// selfTestRig is a landed main config whose self-test socket a fake
// worker answers on.
func selfTestRig(t *testing.T, answer func(n int32) (int, string)) (*Ctl, *atomic.Int32) {
	t.Helper()
	dir := t.TempDir()
	const gen = "0123456789abcdef"
	text := "http {\n" + selftest.Stamp(selftest.Block(dir, ""), gen) + "}\n"
	main := filepath.Join(dir, "nginx.conf")
	os.WriteFile(main, []byte(text), 0o644)
	target, ok := selftest.Find(text)
	if !ok || target.Generation != gen || filepath.Dir(target.Socket) != dir {
		t.Fatalf("stamped block not found: %+v\n%s", target, text)
	}
	ln, err := net.Listen("unix", target.Socket)
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != selftest.Path || r.Host != selftest.ServerName {
			http.NotFound(w, r)
			return
		}
		code, body := answer(asked.Add(1))
		w.WriteHeader(code)
		fmt.Fprintln(w, body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &Ctl{MainConfig: main, ErrorLog: filepath.Join(dir, "error.log")}, &asked
}

// The self-test is confirmed by a worker of the landed generation only:
// another generation's answer is asked again, and a data plane that only
// ever answers with it fails, saying so.
func TestSelfTestWaitsForTheNewGeneration(t *testing.T) {
	oldFor := int32(3)
	n, asked := selfTestRig(t, func(i int32) (int, string) {
		if i <= oldFor {
			return 200, "ok fedcba9876543210"
		}
		return 200, "ok 0123456789abcdef"
	})
	if err := n.SelfTest(context.Background(), 0); err != nil || asked.Load() != oldFor+1 {
		t.Fatalf("err = %v after %d answers", err, asked.Load())
	}
	asked.Store(0)
	oldFor = 1 << 30
	err := n.SelfTest(context.Background(), 0)
	if !errors.Is(err, ErrSelfTest) || !strings.Contains(err.Error(), "another generation") && !strings.Contains(err.Error(), "previous configuration") {
		t.Fatalf("only the old generation answering: %v", err)
	}
}

// A failing worker's report, and the lines its block and the master's own
// log hold, make the error; a request's text in the log does not.
func TestSelfTestQuotesOwnLogsOnly(t *testing.T) {
	n, _ := selfTestRig(t, func(int32) (int, string) { return 500, "open /lua/waf/check.lua: Permission denied" })
	target, _ := selftest.Find(string(must(os.ReadFile(n.MainConfig))))
	blockLog := selftest.LogPath(filepath.Dir(target.Socket))
	os.WriteFile(blockLog, []byte("2026/12/01 22:00:00 [error] 41#41: *1 open() \"/lua/x\" failed (13: Permission denied)\n"), 0o644)
	os.WriteFile(n.ErrorLog, []byte("2026/12/01 22:00:00 [emerg] 40#40: init_worker_by_lua error: boom\n"+
		"x [emerg] 40#40: a line nginx did not start\n"), 0o644)
	err := n.SelfTest(context.Background(), 0)
	msg := fmt.Sprint(err)
	if !errors.Is(err, ErrSelfTest) || !strings.Contains(msg, "Permission denied") || !strings.Contains(msg, "init_worker_by_lua error: boom") || strings.Contains(msg, "did not start") {
		t.Fatalf("error: %v", err)
	}
	if b, _ := os.ReadFile(blockLog); len(b) != 0 {
		t.Fatalf("the block's log was not emptied for the next test: %q", b)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// After a snapshot landed the workers are asked, on the self-test socket,
// to publish it; what they refuse to publish is an error naming their
// report, and a config without Lua (nothing there could publish) is not
// asked at all.
func TestPublishSnapshots(t *testing.T) {
	dir := t.TempDir()
	text := "http {\n" + selftest.Stamp(selftest.Block(dir, "/lua/probe.lua"), "0123456789abcdef") + "}\n"
	main := filepath.Join(dir, "nginx.conf")
	os.WriteFile(main, []byte(text), 0o644)
	target, _ := selftest.Find(text)
	ln, err := net.Listen("unix", target.Socket)
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	answer := atomic.Value{}
	answer.Store("ip_groups abc\ngeo nil")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != selftest.PublishPath || r.Host != selftest.ServerName {
			http.NotFound(w, r)
			return
		}
		asked.Add(1)
		body := answer.Load().(string)
		if strings.Contains(body, "failed") {
			w.WriteHeader(http.StatusInternalServerError)
		}
		fmt.Fprintln(w, body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	n := &Ctl{MainConfig: main}

	if err := n.PublishSnapshots(context.Background()); err != nil || asked.Load() != 1 {
		t.Fatalf("publish: %v, asked %d times", err, asked.Load())
	}
	answer.Store("ip_groups abc\ngeo geo refresh failed: boom")
	if err := n.PublishSnapshots(context.Background()); err == nil || !strings.Contains(err.Error(), "answered 500: ip_groups abc; geo geo refresh failed: boom") {
		t.Fatalf("refused publish: %v", err)
	}

	os.WriteFile(main, []byte("http {\n"+selftest.Stamp(selftest.Block(dir, ""), "0123456789abcdef")+"}\n"), 0o644)
	if err := n.PublishSnapshots(context.Background()); err != nil || asked.Load() != 2 {
		t.Fatalf("without Lua: %v, asked %d times", err, asked.Load())
	}
}
