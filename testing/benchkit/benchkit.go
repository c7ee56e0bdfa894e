// Package benchkit holds what the measurement programs (testing/bench,
// testing/applybench) share: a release agent run against the test control
// plane, an origin, process figures from /proc, and percentiles.
package benchkit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"openflare/testing/controlplane"
)

// Fatal ends the program with err.
func Fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// Agent is a release agent process with its own data directory.
type Agent struct {
	Cmd  *exec.Cmd
	Dir  string
	Conf map[string]any
}

// StartAgent starts bin as node "bench" of cp in dir, nginx from PATH;
// extra keys go into agent.json.
func StartAgent(bin, dir string, cp *controlplane.Server, extra map[string]any) *Agent {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		Fatal(err)
	}
	_, tok := cp.AddNode("bench")
	conf := map[string]any{
		"server_url": cp.URL(), "agent_token": tok, "node_name": "bench", "node_ip": "198.51.100.10",
		"openresty_path": nginx, "data_dir": filepath.Join(dir, "data"),
		// Measurements stay on this machine: no GeoIP download.
		"mmdb_download_url": "off", "city_mmdb_download_url": "off",
	}
	for k, v := range extra {
		conf[k] = v
	}
	b, _ := json.Marshal(conf)
	path := filepath.Join(dir, "agent.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		Fatal(err)
	}
	cmd := exec.Command(bin, "-config", path)
	log, _ := os.Create(filepath.Join(dir, "agent.log"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		Fatal(err)
	}
	return &Agent{Cmd: cmd, Dir: dir, Conf: conf}
}

// PID is the agent's process id.
func (a *Agent) PID() int { return a.Cmd.Process.Pid }

// Data is a path under the agent's data directory.
func (a *Agent) Data(p ...string) string {
	return filepath.Join(append([]string{a.Conf["data_dir"].(string)}, p...)...)
}

// Stop ends the agent with SIGTERM and waits for it.
func (a *Agent) Stop() {
	a.Cmd.Process.Signal(syscall.SIGTERM)
	a.Cmd.Wait()
}

// RestartWith stops the agent, adds extra to its agent.json and starts it
// again.
func (a *Agent) RestartWith(extra map[string]any) {
	a.Stop()
	for k, v := range extra {
		a.Conf[k] = v
	}
	b, _ := json.Marshal(a.Conf)
	if err := os.WriteFile(filepath.Join(a.Dir, "agent.json"), b, 0o600); err != nil {
		Fatal(fmt.Errorf("restart agent: %w", err))
	}
	cmd := exec.Command(a.Cmd.Path, a.Cmd.Args[1:]...)
	cmd.Stdout, cmd.Stderr = a.Cmd.Stdout, a.Cmd.Stderr
	if err := cmd.Start(); err != nil {
		Fatal(fmt.Errorf("restart agent: %w", err))
	}
	a.Cmd = cmd
}

// Get fetches http://127.0.0.1/ for host over a fresh connection (a kept
// one could still reach a worker of the previous configuration) and
// returns the body, or "" on any error.
func Get(host string) string {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// WaitServes polls host until its body is want, every poll apart, for at
// most two minutes.
func WaitServes(host, want string, poll time.Duration) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if Get(host) == want {
			return
		}
		time.Sleep(poll)
	}
	Fatal(fmt.Errorf("%s never served %q", host, want))
}

// StatusKiB reads one "<key> N kB" line of /proc/<pid>/status (key with
// its colon).
func StatusKiB(pid int, key string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if f := strings.Fields(s.Text()); len(f) >= 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// RSS reads VmRSS in KiB.
func RSS(pid int) int64 { return StatusKiB(pid, "VmRSS:") }

// RSSParts says how much of the RSS is the program's own memory and how
// much the mapped binary.
func RSSParts(pid int) string {
	return fmt.Sprintf("anon %s + file %s", MiB(StatusKiB(pid, "RssAnon:")), MiB(StatusKiB(pid, "RssFile:")))
}

// MiB formats KiB as MiB.
func MiB(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }

// CPUTime is user+system CPU time of pid.
func CPUTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	// USER_HZ is 100 on every Linux this runs on.
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// MinorFaults is how many page faults pid took that read nothing from
// disk: code faulted back in from the page cache, fresh heap pages.
func MinorFaults(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	n, _ := strconv.ParseInt(f[7], 10, 64)
	return n
}

// Pct is the p-th percentile of d.
func Pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// Duration formats d for a report: milliseconds below ten seconds.
func Duration(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(100 * time.Millisecond).String()
}

// CleanQuery4K is a 4 KiB query string of 64 arguments that no
// security_check flag catches, with percent-encoding and '+' so that both
// decodes have work to do: the WAF's worst common case.
func CleanQuery4K() string {
	var b strings.Builder
	for i := 0; b.Len() < 4096-64; i++ {
		if i > 0 {
			b.WriteByte('&')
		}
		fmt.Fprintf(&b, "k%02d=hello+world%%2C+item+%d+of+the+list%%3A+value_%d", i, i, i*7)
	}
	for b.Len() < 4096 {
		b.WriteByte('x')
	}
	return b.String()
}
