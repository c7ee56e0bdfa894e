package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"openflare/agent/protocol"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

func TestServeAndClientCommands(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, outW := io.Pipe()
	logs := &testsupport.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-discovery-token", "disc0123", "-admin-token", "adm0123"}, outW, logs)
		outW.Close()
	}()
	banner := map[string]string{}
	sc := bufio.NewScanner(out)
	for len(banner) < 3 && sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		banner[k] = v
	}
	go io.Copy(io.Discard, out)
	if banner["discovery_token"] != "disc0123" || banner["admin_token"] != "adm0123" || !strings.HasPrefix(banner["url"], "http://127.0.0.1:") {
		t.Fatalf("banner %v", banner)
	}
	url := banner["url"]

	cli := func(args ...string) string {
		t.Helper()
		var stdout bytes.Buffer
		if err := run(ctx, append(args, "-server", url, "-admin-token", "adm0123"), &stdout, io.Discard); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return stdout.String()
	}

	var node controlplane.AdminNodeReply
	if err := json.Unmarshal([]byte(cli("add-node", "-name", "edge")), &node); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "source.json")
	support := filepath.Join(dir, "support")
	if err := os.MkdirAll(filepath.Join(support, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for path, content := range map[string]string{src: `{"routes":[]}`, filepath.Join(support, "sub", "a.txt"): "A"} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var pub controlplane.AdminPublishReply
	if err := json.Unmarshal([]byte(cli("publish", "-source", src, "-support", support, "-checksum", "abc")), &pub); err != nil {
		t.Fatal(err)
	}
	cli("activate", "-version", pub.Version)
	cli("ip-group", "-id", "3", "-ips", "192.0.2.1, 198.51.100.0/24")
	cli("settings", "-node", node.NodeID, "-json", `{"update_now":true}`)
	cli("fault", "-path", protocol.PathActive, "-status", "503", "-delay", "1ms")

	req, err := http.NewRequest(http.MethodGet, url+protocol.PathActive, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(protocol.TokenHeader, node.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("faulted E4: %d, want 503", resp.StatusCode)
	}

	var st controlplane.AdminState
	if err := json.Unmarshal([]byte(cli("state")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 1 || st.Active == nil || st.Active.Checksum != "abc" || len(st.IPGroups) != 1 ||
		len(st.IPGroups[0].IPList) != 2 || len(st.Versions) != 1 || st.Versions[0].SupportFiles[0] != "sub/a.txt" {
		t.Fatalf("state %+v", st)
	}
	if err := run(ctx, []string{"state", "-server", url, "-admin-token", "wrong"}, io.Discard, io.Discard); err == nil {
		t.Fatal("a wrong admin token was accepted")
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); !strings.Contains(l, "path="+protocol.PathActive) || strings.Contains(l, node.Token) ||
		strings.Contains(l, "adm0123") || strings.Contains(l, "disc0123") {
		t.Fatalf("request log missing or leaking tokens:\n%s", l)
	}
}

func TestUnknownCommand(t *testing.T) {
	if err := run(context.Background(), []string{"bogus"}, io.Discard, io.Discard); err == nil {
		t.Fatal("unknown command accepted")
	}
	if err := run(context.Background(), nil, io.Discard, io.Discard); err == nil {
		t.Fatal("no command accepted")
	}
}
