package qemu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"openflare/agent/config"
	"openflare/agent/protocol"
	"openflare/agent/render"
	"openflare/testing/controlplane"
	"openflare/testing/crosstest"
	"openflare/testing/nstest"
	"openflare/testing/testsupport"
)

// binary is the release binary of tg, checked to exist and to have its
// emulator installed.
func binary(t *testing.T, dist string, tg crosstest.Target) string {
	t.Helper()
	p := filepath.Join(dist, tg.BinaryName())
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: run make cross first", err)
	}
	if tg.Qemu != "" {
		if _, err := exec.LookPath(tg.Qemu); err != nil {
			t.Fatalf("%s not found: install the Debian package qemu-user-static", tg.Qemu)
		}
	}
	return p
}

// runBinary runs tg's binary with args in dir and returns stdout, stderr
// and the exit code.
func runBinary(t *testing.T, tg crosstest.Target, bin, dir string, args ...string) (string, string, int) {
	t.Helper()
	argv := tg.Command(bin, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// Each binary in dist has a .sha256 file as sha256sum prints it.
func TestCrossChecksums(t *testing.T) {
	dist := crosstest.Dist(t)
	for _, tg := range crosstest.Targets {
		b, err := os.ReadFile(filepath.Join(dist, tg.BinaryName()))
		if err != nil {
			t.Fatalf("%v: run make cross first", err)
		}
		sum := sha256.Sum256(b)
		want := hex.EncodeToString(sum[:]) + "  " + tg.BinaryName() + "\n"
		got, err := os.ReadFile(filepath.Join(dist, tg.BinaryName()+".sha256"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s.sha256 is %q, want %q", tg.BinaryName(), got, want)
		}
	}
}

// Every binary starts on its oldest supported CPU and reports its own
// architecture.
func TestCrossVersion(t *testing.T) {
	dist := crosstest.Dist(t)
	for _, tg := range crosstest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			bin := binary(t, dist, tg)
			stdout, stderr, code := runBinary(t, tg, bin, t.TempDir(), "-version")
			if code != 0 || !strings.HasPrefix(stdout, "openflare-agent ") || !strings.HasSuffix(stdout, " linux/"+tg.GOARCH+"\n") {
				t.Fatalf("-version: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
			}
			t.Logf("%s: %s", strings.Join(tg.Command(tg.BinaryName()), " "), strings.TrimSpace(stdout))
		})
	}
}

// The CPU pinning is strict: the ARMv7 binary dies with SIGILL on the
// ARMv6 CPU the armv6 binary is run on, so the armv6 pass means something.
func TestCrossCPUPinning(t *testing.T) {
	dist := crosstest.Dist(t)
	armv6 := crosstest.TargetByName(t, "armv6")
	bin := binary(t, dist, crosstest.TargetByName(t, "armv7"))
	stdout, _, code := runBinary(t, armv6, bin, t.TempDir(), "-version")
	if code == 0 {
		t.Fatalf("the armv7 binary ran on %s: %s", armv6.CPU, stdout)
	}
}

const sampleToken = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"

// `check` reads cross/testdata/agent.json and probes the stub nginx on
// every architecture, without printing the token.
func TestCrossCheck(t *testing.T) {
	dist := crosstest.Dist(t)
	// check also proves the nginx workers can reach data_dir: run it from a
	// copy in a directory they can traverse, wherever the clone lives.
	dir := nstest.TraversableTempDir(t)
	for _, name := range []string{"agent.json", "nginx-stub"} {
		src := filepath.Join(testsupport.ModuleRoot(t), "cross", "testdata", name)
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(src)
		if err := os.WriteFile(filepath.Join(dir, name), b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	const wantCaps = "nginx: nginx 1.22.1 (core 1.22.1): http2=true http3=false stub_status=true lua=built in\n"
	for _, tg := range crosstest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			bin := binary(t, dist, tg)
			stdout, stderr, code := runBinary(t, tg, bin, dir, "-config", "agent.json", "check")
			if code != 0 || !strings.Contains(stdout, wantCaps) || !strings.Contains(stdout, "0f1e****") {
				t.Fatalf("check: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
			}
			if strings.Contains(stdout+stderr, sampleToken) {
				t.Fatalf("check printed the token:\n%s%s", stdout, stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("check created data_dir")
	}
}

// The arm64, ARMv7 and big-endian MIPS agents register with a discovery
// token, persist the node token, heartbeat over HTTP and then over the
// WebSocket, stop cleanly on SIGTERM, and render the server's active
// version byte for byte as the server does.
func TestCrossEndToEnd(t *testing.T) {
	dist := crosstest.Dist(t)
	stub := filepath.Join(testsupport.ModuleRoot(t), "cross", "testdata", "nginx-stub")
	for _, name := range []string{"arm64", "armv7", "mips"} {
		tg := crosstest.TargetByName(t, name)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bin := binary(t, dist, tg)
			cp := controlplane.New()
			if err := cp.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cp.Close)
			cp.UpdateSettings("", func(s *protocol.AgentSettings) {
				s.HeartbeatInterval = 300
				s.WebsocketUpgradeEnabled = true
			})

			dir := t.TempDir()
			confPath := filepath.Join(dir, "agent.json")
			conf, _ := json.MarshalIndent(map[string]any{
				"server_url":         cp.URL(),
				"discovery_token":    cp.DiscoveryToken(),
				"node_name":          "cross-" + name,
				"node_ip":            "198.51.100.20",
				"openresty_path":     stub,
				"data_dir":           filepath.Join(dir, "data"),
				"heartbeat_interval": 300,
				// No GeoIP download from the internet.
				"mmdb_download_url":      "off",
				"city_mmdb_download_url": "off",
			}, "", "  ")
			if err := os.WriteFile(confPath, conf, 0o600); err != nil {
				t.Fatal(err)
			}

			argv := tg.Command(bin, "-config", confPath)
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "LOG_LEVEL=debug")
			logs := &testsupport.Buffer{}
			cmd.Stdout, cmd.Stderr = logs, logs
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() {
				cmd.Wait()
				close(exited)
			}()
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-exited
				if t.Failed() {
					t.Logf("agent log:\n%s", logs.String())
				}
			})

			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			for _, channel := range []string{controlplane.ChannelHTTP, controlplane.ChannelWS} {
				beat, err := cp.WaitHeartbeat(ctx, func(b controlplane.Beat) bool { return b.Channel == channel })
				if err != nil {
					t.Fatalf("no %s heartbeat: %v", channel, err)
				}
				if beat.Payload.ExtVersion != "1.22.1" {
					t.Errorf("%s heartbeat ext_version %q, want the stub's 1.22.1", channel, beat.Payload.ExtVersion)
				}
				t.Logf("%s: %s heartbeat after %v", name, channel, time.Since(start).Round(time.Millisecond))
			}

			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				t.Fatal("agent did not exit within 30 s of SIGTERM")
			}
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("agent exited %d after SIGTERM, want 0", code)
			}
			if !strings.Contains(logs.String(), "nginx left running") {
				t.Errorf("no shutdown message in the log")
			}

			nodes := cp.Nodes()
			cfg, _, err := config.Load(confPath, func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			if len(nodes) != 1 || cfg.AgentToken != nodes[0].Token || cfg.DiscoveryToken != "" {
				t.Fatalf("after registration: %d nodes, agent.json token matches: %v, discovery token cleared: %v",
					len(nodes), len(nodes) == 1 && cfg.AgentToken == nodes[0].Token, cfg.DiscoveryToken == "")
			}

			renderActive(t, tg, bin, cp, cfg.AgentToken, dir)
		})
	}
}

// renderActive publishes a version, fetches it as the node (E4), renders it
// with the target's binary and compares every file with the host's render.
func renderActive(t *testing.T, tg crosstest.Target, bin string, cp *controlplane.Server, token, dir string) {
	t.Helper()
	cert, key := controlplane.SelfSignedCert(1, "secure.example.com", "www.secure.example.com")
	src := controlplane.Source{Routes: []controlplane.Route{
		{ID: 1, SiteName: "secure", Domains: []string{"secure.example.com", "www.secure.example.com"},
			OriginURL: "http://127.0.0.1:8080", EnableHTTPS: true, DomainCertIDs: []uint64{1, 1}, RedirectHTTP: true,
			LimitReqPerIP: "20r/s", LimitRate: "512k",
			CustomHeaders: []controlplane.Header{{Key: "X-Edge", Value: "cross"}}},
		{ID: 2, SiteName: "plain", Domains: []string{"plain.example.com"}, OriginURL: "http://127.0.0.1:8081",
			LimitConnPerIP: -1, LimitReqPerIP: "120r/m"},
	}}
	ref, err := cp.Publish(src.JSON(), controlplane.CertFiles(1, cert, key))
	if err != nil {
		t.Fatal(err)
	}

	req, err := http.NewRequest(http.MethodGet, cp.URL()+protocol.PathActive, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(protocol.TokenHeader, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("E4 as the node: %s %v", resp.Status, err)
	}
	snapshot := filepath.Join(dir, "active.json")
	if err := os.WriteFile(snapshot, body, 0o600); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(dir, "rendered")
	stdout, stderr, code := runBinary(t, tg, bin, dir, "render", "-snapshot", snapshot, "-out", out)
	if code != 0 || !strings.Contains(stdout, "checksum matches: "+ref.Checksum+"\n") {
		t.Fatalf("render: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}

	var env protocol.Envelope
	var ac protocol.ActiveConfig
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(env.Data, &ac); err != nil {
		t.Fatal(err)
	}
	host, err := render.Config(ac.SourceConfigJSON, ac.SupportFiles)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"nginx.conf": host.Main, "openflare_routes.conf": host.Route}
	for _, f := range host.Files {
		want[filepath.Join("files", filepath.FromSlash(f.Path))] = f.Content
	}
	for name, content := range want {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != content {
			t.Errorf("%s rendered on %s differs from the host's render", name, tg.Name)
		}
	}
}

// The server is a 64-bit Go program, so integers in source_config_json past
// 32 bits render there; they must render the same on the 32-bit targets,
// where Go's int has 32 bits, or those nodes fail every checksum of such a
// version.
func TestCrossRenderWideIntegers(t *testing.T) {
	dist := crosstest.Dist(t)
	route := controlplane.Route{ID: 1, SiteName: "wide", Domains: []string{"wide.example.com"}, OriginURL: "http://127.0.0.1:8080"}
	limited := route
	limited.LimitReqPerIP = "3000000000r/s" // limit_req burst=6000000000
	cases := []struct {
		name string
		src  controlplane.Source
	}{
		{"limit_req_per_ip", controlplane.Source{Routes: []controlplane.Route{limited}}},
		{"keepalive_requests", controlplane.Source{Routes: []controlplane.Route{route}, OpenResty: map[string]any{"keepalive_requests": int64(3000000000)}}},
	}
	for _, c := range cases {
		host, err := render.Config(c.src.JSON(), nil)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := json.Marshal(protocol.ActiveConfig{Version: c.name, Checksum: host.Checksum(), SourceConfigJSON: c.src.JSON()})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "active.json"), snap, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tg := range crosstest.Targets {
			t.Run(c.name+"/"+tg.Name, func(t *testing.T) {
				bin := binary(t, dist, tg)
				stdout, stderr, code := runBinary(t, tg, bin, dir, "render", "-snapshot", "active.json", "-out", t.TempDir())
				if code != 0 || !strings.Contains(stdout, "checksum matches") {
					t.Fatalf("render on %s: exit %d\n%s%s", tg.Name, code, stdout, stderr)
				}
			})
		}
	}
}
