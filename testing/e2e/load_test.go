package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/controlplane"
	"openflare/testing/loadgen"
)

// slowOrigin is loadgen's origin on a test server.
func slowOrigin(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(loadgen.Origin())
	t.Cleanup(srv.Close)
	return srv.URL
}

// Applies under load drop nothing: five publishes pushed over the
// WebSocket while ~200 requests/s flow over keep-alive connections and
// two slow 5 MiB downloads run through nginx. No answer is other than 2xx,
// no connection is reset under a request, no body is cut short.
func TestAppliesUnderLoadDropNothing(t *testing.T) {
	cp := wsControlPlane(t)
	o := slowOrigin(t)
	src := func(gen int) controlplane.Source {
		return controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "load.test", fmt.Sprintf("%s/gen%d", o, gen))}, OpenResty: noErrorPages}
	}
	v := publish(t, cp, src(0))
	n, _ := connectedNode(t, cp)
	waitApplyLog(t, cp, v.Version, protocol.ResultSuccess)
	waitServes(t, "load.test", "/", "gen 0")
	master := n.nginxPID()

	load := loadgen.Start(context.Background(), loadgen.Options{
		Addr: "127.0.0.1:80", Host: "load.test", Path: "/", Rate: 200, Conns: 8,
		Download: "/big", DownloadSize: loadgen.DownloadSize, Downloads: 2,
	})
	for gen := 1; gen <= 5; gen++ {
		v := publish(t, cp, src(gen))
		waitApplyLog(t, cp, v.Version, protocol.ResultSuccess)
		waitServes(t, "load.test", "/", fmt.Sprintf("gen %d", gen))
		// Let the downloads started before this reload run into the next.
		time.Sleep(300 * time.Millisecond)
	}
	res := load.Stop()
	t.Log(res.String())
	if !res.OK() {
		t.Fatalf("clients saw failures during applies: %s", res.String())
	}
	if res.Requests < 300 || res.Downloads < 2 {
		t.Fatalf("too little traffic to show anything: %s", res.String())
	}
	if n.nginxPID() != master {
		t.Fatalf("nginx was restarted (master %d → %d), not reloaded", master, n.nginxPID())
	}
}
