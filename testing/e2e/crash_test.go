package e2e

import (
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/agent/testhook"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

// Killing the agent (SIGKILL) at each step of an apply never leaves the
// node dark: after a restart it serves the old or the new version, and
// state names the version nginx serves. Once the server is reachable the
// new version lands.
func TestCrashDuringApply(t *testing.T) {
	for _, point := range []string{"after-backup", "mid-write", "after-swap", "before-reload", "after-state"} {
		t.Run(point, func(t *testing.T) {
			cp := controlPlane(t)
			o1, o2 := origin(t, "old"), origin(t, "new")
			v1 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", o1)}})
			n := newNode(t, cp, nil)
			n.start()
			waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
			waitServes(t, "app.test", "/", "origin-ok old")
			n.stop()

			// The new version adds a certificate-free second route, so the
			// apply adds files as well as changing them.
			v2 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "app.test", o2), proxyRoute(2, "two.test", o2)}})
			n.start(testhook.CrashEnv + "=" + point)
			n.waitCrash(60 * time.Second)

			// Restart with the server unreachable: only local recovery runs.
			if err := cp.SetDown(true); err != nil {
				t.Fatal(err)
			}
			n.start()
			// Three starts so far; wait until this one finished its local
			// recovery before looking at what nginx serves.
			testsupport.WaitFor(t, 30*time.Second, "local recovery", func() bool {
				return strings.Count(n.logs.String(), `msg="local config ready"`) == 3
			})
			var body string
			testsupport.WaitFor(t, 30*time.Second, "the node to serve after recovery", func() bool {
				r := get("app.test", "/")
				body = r.body
				return r.status == 200
			})
			st := n.state()
			switch {
			case strings.Contains(body, "origin-ok old") && st.Current.Version == v1.Version:
			case strings.Contains(body, "origin-ok new") && st.Current.Version == v2.Version:
			default:
				t.Fatalf("nginx serves %q but state says %q (v1 %s, v2 %s)", body, st.Current.Version, v1.Version, v2.Version)
			}
			// A few more requests: the answer is stable, not a mix.
			for i := 0; i < 5; i++ {
				if r := get("app.test", "/"); r.body != body {
					t.Fatalf("answer changed from %q to %q without an apply", body, r.body)
				}
			}

			if err := cp.SetDown(false); err != nil {
				t.Fatal(err)
			}
			waitServes(t, "two.test", "/", "origin-ok new")
			testsupport.WaitFor(t, 30*time.Second, "state to record the new version", func() bool { return n.state().Current.Version == v2.Version })
			n.stop()
			n.stopNginx()
		})
	}
}
