// Command demo runs openflare-agent against the bundled test control plane
// with a real nginx, in private namespaces (no root needed, the host's
// port 80 untouched), and forwards a few host ports into them so you can
// try it with curl. `make demo` builds the agent and runs this.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/controlplane"
	"openflare/testing/nstest"
)

// Host ports forwarded into the namespace, in order: nginx :80, nginx
// :443, the control plane.
var wanted = []int{8080, 8443, 9080}

func main() {
	agentBin := flag.String("agent", "bin/openflare-agent", "agent binary to run")
	workDir := flag.String("dir", ".demo", "working directory for the demo's files")
	flag.Parse()
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			fatal(err)
		}
		return a
	}
	bin, dir := abs(*agentBin), abs(*workDir)

	// Listeners on the host are opened before entering the namespaces and
	// inherited: the only way in from outside.
	var files []*os.File
	if os.Getenv("OPENFLARE_NSTEST_ROLE") == "" {
		for _, p := range wanted {
			f, err := listenFile(p)
			if err != nil {
				fatal(err)
			}
			files = append(files, f)
		}
	}
	os.Exit(nstest.Run(func() int { return demo(bin, dir) }, files))
}

func listenFile(port int) (*os.File, error) {
	for p := port; p < port+20; p++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		f, err := ln.(*net.TCPListener).File()
		ln.Close()
		return f, err
	}
	return nil, fmt.Errorf("no free port on 127.0.0.1 from %d to %d", port, port+19)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "demo:", err)
	os.Exit(1)
}

// demo runs inside the namespaces.
func demo(bin, dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, bin, dir); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, bin, dir string) error {
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("agent binary: %w (run `make build`)", err)
	}
	nginxBin, err := exec.LookPath("nginx")
	if err != nil {
		return errors.New("nginx not found (run `make deps`)")
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}

	// The origin: a small backend the demo routes to.
	originLn, err := net.Listen("tcp", "127.0.0.1:8081")
	if err != nil {
		return err
	}
	go http.Serve(originLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "Hello from the demo origin: %s %s (Host %s, X-Forwarded-For %s)\n", r.Method, r.URL.Path, r.Host, r.Header.Get("X-Forwarded-For"))
	}))

	cp := controlplane.New()
	if err := cp.StartAt("127.0.0.1:9080"); err != nil {
		return err
	}
	defer cp.Close()
	cp.UpdateSettings("", func(s *protocol.AgentSettings) { s.HeartbeatInterval = 3000 })
	cp.SetIPGroup(protocol.WAFIPGroup{ID: 1, Name: "demo-blocklist", Type: "manual", Enabled: true, IPList: []string{"127.0.0.66", "203.0.113.0/24"}})
	certPEM, keyPEM := controlplane.SelfSignedCert(1, "secure.demo.localhost")
	src := controlplane.Source{
		Routes: []controlplane.Route{
			{ID: 1, SiteName: "demo", Domains: []string{"demo.localhost"}, OriginURL: "http://127.0.0.1:8081"},
			{ID: 2, SiteName: "secure", Domains: []string{"secure.demo.localhost"}, OriginURL: "http://127.0.0.1:8081",
				EnableHTTPS: true, DomainCertIDs: []uint64{1}, RedirectHTTP: true},
		},
		WAF: &controlplane.WAF{RuleGroups: []controlplane.RuleGroup{
			controlplane.DefaultRuleGroup(),
			controlplane.IPMatchRuleGroup(2, "block the demo IP group", 1),
		}},
	}
	ref, err := cp.Publish(src.JSON(), controlplane.CertFiles(1, certPEM, keyPEM))
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	fmt.Printf("control plane: published version %s with a proxy route, an HTTPS route and an IP-group block rule\n", ref.Version)

	conf := map[string]any{
		"server_url":      cp.URL(),
		"discovery_token": cp.DiscoveryToken(),
		"node_name":       "demo-node",
		"node_ip":         "198.51.100.10",
		"openresty_path":  nginxBin,
		"data_dir":        filepath.Join(dir, "data"),
		// The demo stays on this machine: no GeoIP download.
		"mmdb_download_url":      "off",
		"city_mmdb_download_url": "off",
	}
	confPath := filepath.Join(dir, "agent.json")
	b, _ := json.MarshalIndent(conf, "", "  ")
	if err := os.WriteFile(confPath, append(b, '\n'), 0o600); err != nil {
		return err
	}
	logPath := filepath.Join(dir, "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	agent := exec.Command(bin, "-config", confPath)
	agent.Stdout, agent.Stderr = logFile, logFile
	if err := agent.Start(); err != nil {
		return err
	}
	defer stopAll(agent, filepath.Join(dir, "data", "var", "run", "nginx.pid"))
	fmt.Printf("agent: started (%s), registering with the discovery token; log in %s\n", bin, logPath)

	if err := waitServes(ctx, "demo.localhost"); err != nil {
		return fmt.Errorf("%w (see %s)", err, logPath)
	}
	fmt.Println("nginx: serving demo.localhost through the agent's rendered config")

	ports := forward(ctx)
	fmt.Printf(`
The demo runs in private namespaces; these host ports lead into it:
  127.0.0.1:%[1]d → nginx :80    127.0.0.1:%[2]d → nginx :443    127.0.0.1:%[3]d → control plane

Try:
  curl http://demo.localhost:%[1]d/hello
  curl -k --resolve secure.demo.localhost:%[2]d:127.0.0.1 https://secure.demo.localhost:%[2]d/
  curl -i http://secure.demo.localhost:%[1]d/            # redirects to HTTPS
  curl -i --interface 127.0.0.66 http://demo.localhost:%[1]d/   # in the blocked IP group: 403
  curl http://127.0.0.1:%[3]d/_admin/state -H 'X-Admin-Token: %[4]s'
  go run ./testing/controlplane/cmd/of-controlplane ip-group -server http://127.0.0.1:%[3]d -admin-token %[4]s -id 1 -ips 127.0.0.1
                                                          # block yourself, no reload: 403 within seconds
Files: %[5]s (agent.json, agent.log, data/). Ctrl-C stops everything.
`, ports[0], ports[1], ports[2], cp.AdminToken(), dir)
	<-ctx.Done()
	fmt.Println("\nstopping")
	return nil
}

func waitServes(ctx context.Context, host string) error {
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1/", nil)
		req.Host = host
		if resp, err := c.Do(req); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.Contains(string(body), "demo origin") {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return errors.New("the route did not serve within 60 s")
}

// forward relays the inherited host listeners to ports inside the
// namespace, keeping the client's source address (every 127.x address is
// local on both sides), so IP rules see who really connected.
func forward(ctx context.Context) []int {
	targets := []string{"127.0.0.1:80", "127.0.0.1:443", "127.0.0.1:9080"}
	var ports []int
	for i, target := range targets {
		ln, err := net.FileListener(os.NewFile(uintptr(3+i), "host"))
		if err != nil {
			fatal(err)
		}
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
		go func() {
			<-ctx.Done()
			ln.Close()
		}()
		go accept(ln, target)
	}
	return ports
}

func accept(ln net.Listener, target string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			src := c.RemoteAddr().(*net.TCPAddr)
			d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: src.IP}}
			up, err := d.Dial("tcp", target)
			if err != nil {
				return
			}
			defer up.Close()
			go io.Copy(up, c)
			io.Copy(c, up)
		}()
	}
}

// stopAll stops the agent, then nginx (the agent never stops nginx).
func stopAll(agent *exec.Cmd, pidFile string) {
	agent.Process.Signal(syscall.SIGTERM)
	agent.Wait()
	if b, err := os.ReadFile(pidFile); err == nil {
		var pid int
		fmt.Sscan(strings.TrimSpace(string(b)), &pid)
		if pid > 0 {
			syscall.Kill(pid, syscall.SIGTERM)
		}
	}
}
