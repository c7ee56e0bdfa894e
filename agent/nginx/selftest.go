package nginx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"openflare/agent/selftest"
)

// ErrSelfTest marks a data plane that took its config but cannot serve:
// the workers answer the self-test with a failure, or not at all. It is a
// problem of this node (file access, a worker that cannot start), so the
// version is not blocklisted for it.
var ErrSelfTest = errors.New("data-plane self-test failed")

// selfTestWait bounds how long the self-test waits for an answer: new
// workers exist before it runs, so this covers their init (IP groups and
// geo snapshots to load) and a slow first request.
const selfTestWait = 5 * time.Second

// clearStaleSockets removes the self-test sockets of the live config's
// directory that nothing listens on any more. nginx leaves a socket's
// file behind when a reload it refused had bound it already, or when it
// was killed, and then refuses to bind that name again (the same version
// retried, a restart after a crash). A socket some worker still accepts
// on is left alone: nginx reuses it.
func (n *Ctl) clearStaleSockets() {
	main, err := os.ReadFile(n.MainConfig)
	if err != nil {
		return
	}
	target, ok := selftest.Find(string(main))
	if !ok {
		return
	}
	dir := filepath.Dir(target.Socket)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 {
			continue
		}
		p := filepath.Join(dir, e.Name())
		c, err := net.DialTimeout("unix", p, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			os.Remove(p)
		}
	}
}

// LogMark is the error log's current size: errors logged after it belong
// to what happens next.
func (n *Ctl) LogMark() int64 { return fileSize(n.ErrorLog) }

// SelfTest sends one request through the running data plane to the
// agent's self-test block (agent/selftest: a socket of the landed
// generation's own, which only the agent's user can reach) and checks the
// answer. The error wraps ErrSelfTest and quotes the self-test's own
// report, the lines its block logged, and the master's and workers' own error-log
// lines written since mark, which name the file and the reason (e.g.
// "Permission denied").
func (n *Ctl) SelfTest(ctx context.Context, mark int64) error {
	main, err := os.ReadFile(n.MainConfig)
	target, ok := selftest.Find(string(main))
	if err != nil || !ok {
		// A config landed by an older release, or a template whose http
		// block the agent could not find: there is nothing to ask.
		if n.Log != nil {
			n.Log.Warn("the running config has no self-test block; not tested", "config", n.MainConfig)
		}
		n.previous = generation0{}
		return nil
	}
	want := selftest.Answer(target.Generation)
	client := socketClient(target.Socket)
	defer client.CloseIdleConnections()
	logPath := selftest.LogPath(filepath.Dir(target.Socket))
	// The block's own log holds what this test's requests log; emptied
	// after each test (nginx appends, so it writes on at the new end).
	defer os.Truncate(logPath, 0)
	deadline := time.Now().Add(selfTestWait)
	var last error
	for {
		last = n.askOnce(ctx, client, want)
		if last == nil {
			return nil
		}
		if !errors.Is(last, errNotListening) && !errors.Is(last, errOldGeneration) || time.Now().After(deadline) {
			break
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return fmt.Errorf("%w: interrupted: %v", ErrSelfTest, err)
		}
	}
	msg := last.Error()
	logged := append(readLog(logPath, 0, 0, "emerg", "alert", "crit", "error"), startupLines(n.logSince(mark, 0, "emerg", "crit", "error"))...)
	if s := distinct(logged, 4); s != "" {
		msg += "; nginx error log: " + s
	}
	return fmt.Errorf("%w: %s", ErrSelfTest, msg)
}

// socketClient sends requests to the self-test block listening on socket.
func socketClient(socket string) *http.Client {
	return &http.Client{
		Timeout: selfTestWait,
		Transport: &http.Transport{
			Proxy:             nil,
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// PublishSnapshots asks the running workers, on their self-test socket, to
// publish the IP-group and geo snapshots on disk at once (DATAPLANE 3):
// each worker then matches the new one from its next request, rather
// than from the next tick of the workers' refresher, up to a second later.
// It reads only the landed main config, so any goroutine may call it. A
// config without the block (no Lua, an older release's) has nothing to
// ask: the tick alone brings the snapshot in.
func (n *Ctl) PublishSnapshots(ctx context.Context) error {
	main, err := os.ReadFile(n.MainConfig)
	if err != nil {
		return fmt.Errorf("publish snapshots: %w", err)
	}
	target, ok := selftest.Find(string(main))
	if !ok || !strings.Contains(string(main), selftest.PublishPath) {
		return nil
	}
	client := socketClient(target.Socket)
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+selftest.ServerName+selftest.PublishPath, nil)
	if err != nil {
		return fmt.Errorf("publish snapshots: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("publish snapshots: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("publish snapshots: answered %d: %s", resp.StatusCode, strings.ReplaceAll(strings.TrimSpace(string(body)), "\n", "; "))
	}
	return nil
}

// startupLines keeps the master's and workers' lines that say why workers
// could not initialise: a busy node's other errors say nothing about the
// self-test.
func startupLines(entries []logEntry) []logEntry {
	var keep []logEntry
	for _, e := range entries {
		if e.level == "emerg" || e.level == "crit" || strings.Contains(e.line, "init_worker_by_lua") {
			keep = append(keep, e)
		}
	}
	return keep
}

// distinct joins the first max lines that differ once the time stamp and
// pid are set aside: every worker logs the same failure.
func distinct(entries []logEntry, max int) string {
	seen := map[string]bool{}
	var keep []string
	for _, e := range entries {
		key := e.line
		if i := strings.Index(key, "#"); i >= 0 {
			if j := strings.Index(key[i:], ": "); j >= 0 {
				key = key[i+j:]
			}
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		if keep = append(keep, e.line); len(keep) == max {
			break
		}
	}
	return strings.Join(keep, "; ")
}

var (
	errNotListening  = errors.New("self-test socket not answering")
	errOldGeneration = errors.New("a worker of the previous configuration answered")
)

// askOnce asks once; want is the answer of a healthy worker of the
// landed configuration ("ok <generation>").
func (n *Ctl) askOnce(ctx context.Context, client *http.Client, want string) error {
	ctx, cancel := context.WithTimeout(ctx, selfTestWait)
	defer cancel()
	url := "http://" + selftest.ServerName + selftest.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", errNotListening, err)
	}
	defer resp.Body.Close()
	// One line per failing file; a few dozen lines say everything.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	text := strings.TrimSpace(string(body))
	if resp.StatusCode == http.StatusOK && text == want {
		return nil
	}
	if resp.StatusCode != http.StatusInternalServerError {
		// Not the self-test's own failure report: only a worker of another
		// generation answers otherwise (its socket is the new one's only
		// if their names meet), and it leaves at the master's signal.
		return fmt.Errorf("%w (%d %q, want %q)", errOldGeneration, resp.StatusCode, text, want)
	}
	return fmt.Errorf("GET %s answered %d: %s", url, resp.StatusCode, strings.ReplaceAll(text, "\n", "; "))
}
