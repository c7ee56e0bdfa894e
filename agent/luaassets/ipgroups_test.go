package luaassets

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openflare/openflare-agent/testing/testsupport"
)

// snapshotPickup is how long every worker may take to adopt a new snapshot
// without a reload: the lock holder reads the files within one 1 s tick and
// every other worker adopts on its own next tick, well inside 5 s.
const snapshotPickup = 5 * time.Second

// ipGroup is a WAFIPGroup as the agent stores it in waf_ip_groups.json.
func ipGroup(id int, enabled bool, ips []string) obj {
	return obj{"id": id, "name": fmt.Sprintf("g%d", id), "type": "manual", "enabled": enabled, "ip_list": ips, "checksum": strings.Repeat("0", 64)}
}

// bigGroupList returns 100 000 distinct entries: /32s spread over
// 10.0.0.0/8, a few CIDRs of both families, and blockedIP.
func bigGroupList() []string {
	extra := []string{blockedIP, "172.16.0.0/12", "192.168.7.0/24", "10.0.0.0/30", "2001:db8::/32", "fd00::/8", "2001:db8:1::5", "203.0.113.77"}
	list := make([]string, 0, 100000)
	list = append(list, extra...)
	for i := 0; len(list) < cap(list); i++ {
		// An odd multiplier permutes the 24-bit host space.
		n := (i*40503 + 12345) & 0xffffff
		list = append(list, fmt.Sprintf("10.%d.%d.%d", n>>16, n>>8&0xff, n&0xff))
	}
	return list
}

// §11 cases 14 and 15, then a 100 000-entry group and an oversized file,
// all without a reload.
func TestIPGroupSnapshots(t *testing.T) {
	r := newRig(t)
	r.writeWAF(obj{
		"rule_groups": []obj{group(1, true, allowGraph()), group(2, false, ipGraph(obj{"ip_group_ids": []int{3}}, 403, "grp"))},
		"bindings":    []obj{binding("demo", 2)},
	})
	r.start(r.wafServer("demo") + `
    server {
        listen 80;
        server_name lua.test;
        location = /raw-snapshots {
            content_by_lua_block {
                local n = 0
                for _, k in ipairs(ngx.shared.openflare_waf_ip_groups:get_keys(0)) do
                    if k:find("ip_groups_raw:", 1, true) == 1 then
                        n = n + 1
                    end
                end
                ngx.print(n)
            }
        }
    }
`)
	workers := r.nginx.WorkerPIDs()
	slices.Sort(workers)

	// adopted waits until every worker has logged the adoption of checksum.
	adopted := func(checksum string) {
		t.Helper()
		testsupport.WaitFor(t, snapshotPickup, "every worker to adopt snapshot "+checksum, func() bool {
			return r.countLines("adopted IP group snapshot "+checksum) >= len(workers)
		})
	}

	t.Run("case15 no snapshot on disk", func(t *testing.T) {
		r.expect(r.get(blockedIP, "demo.test", "/"), 200, "origin-ok", "")
	})

	t.Run("case14 snapshot change without reload", func(t *testing.T) {
		sum, _ := r.writeSnapshot(map[string]obj{"3": ipGroup(3, true, []string{"127.0.0.0/24"})})
		adopted(sum)
		r.expect(r.get(blockedIP, "demo.test", "/"), 403, "grp\n", "text/html; charset=utf-8")

		sum, _ = r.writeSnapshot(map[string]obj{"3": ipGroup(3, false, []string{})})
		adopted(sum)
		r.expect(r.get(blockedIP, "demo.test", "/"), 200, "origin-ok", "")
	})

	t.Run("100000-entry group", func(t *testing.T) {
		sum, written := r.writeSnapshot(map[string]obj{
			"3": ipGroup(3, true, bigGroupList()),
			"4": ipGroup(4, true, []string{otherIP}), // not referenced by the graph
		})
		testsupport.WaitFor(t, snapshotPickup, "the first block of "+blockedIP, func() bool {
			return r.get(blockedIP, "demo.test", "/").status == http.StatusForbidden
		})
		t.Logf("100 000-entry snapshot: checksum file written → first 403 for %s after %v", blockedIP, time.Since(written).Round(time.Millisecond))
		adopted(sum)
		t.Logf("100 000-entry snapshot: adopted by all %d workers after %v", len(workers), time.Since(written).Round(time.Millisecond))
		for range 10 {
			r.expect(r.get(blockedIP, "demo.test", "/"), 403, "grp\n", "")
			r.expect(r.get(otherIP, "demo.test", "/"), 200, "origin-ok", "")
		}
	})

	t.Run("oversized snapshot is refused", func(t *testing.T) {
		big := []byte(`{"groups":{}}` + strings.Repeat(" ", 20971521-len(`{"groups":{}}`)))
		r.writeAtomic("waf_ip_groups.json", big)
		r.writeAtomic("waf_ip_groups.json.checksum", []byte("oversized\n"))
		testsupport.WaitFor(t, snapshotPickup, "the oversize warning", func() bool {
			return r.countLines("exceeds the maximum of 20971520 bytes") > 0
		})
		if r.countLines("adopted IP group snapshot oversized") != 0 {
			t.Error("the oversized snapshot was adopted")
		}
		r.expect(r.get(blockedIP, "demo.test", "/"), 403, "grp\n", "")
	})

	t.Run("only current and previous raw snapshots are kept", func(t *testing.T) {
		// Three versions were published above.
		r.expect(r.get(otherIP, "lua.test", "/raw-snapshots"), 200, "2", "")
	})

	after := r.nginx.WorkerPIDs()
	slices.Sort(after)
	if !slices.Equal(workers, after) {
		t.Errorf("worker pids changed from %v to %v: the snapshot must be picked up without a reload", workers, after)
	}
}
