package controlplane

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

type replyTransport []byte

func (b replyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(bytes.NewReader(b)), Header: http.Header{}, Request: r}, nil
}

// Whatever a server sends as a heartbeat or E4 reply decodes or fails
// cleanly: no panic, an error text bounded whatever the reply's size, and
// memory in proportion to the reply (it never balloons), and decoded IP
// groups within the entry budget.
func FuzzDecodeReplies(f *testing.F) {
	f.Add([]byte(`{"success":true,"data":{"active_config":{"version":"v1","checksum":"c"},"agent_settings":{"heartbeat_interval":3000},"waf_ip_groups":[{"id":1,"ip_list":["198.51.100.1"],"checksum":"x"}]}}`))
	f.Add([]byte(`{"success":true,"data":{"version":"v1","checksum":"c","source_config_json":"{}","support_files":[{"path":"a","content":"b"}]}}`))
	f.Add([]byte(`{"success":false,"error_msg":"` + strings.Repeat("x", 4096) + `"}`))
	f.Add([]byte(`{"data":{"waf_ip_groups":[{"id":-1},{"id":"x"}]}}`))
	f.Fuzz(func(t *testing.T, reply []byte) {
		c := New("http://cp.invalid", secret, "fuzz", time.Second)
		c.http.Transport = replyTransport(reply)
		c.Budgets = Budgets{Active: 1 << 20, Entries: 64 << 10, Value: 16 << 10}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		hb, err1 := c.Heartbeat(context.Background(), payload())
		_, err2 := c.ActiveConfig(context.Background())
		runtime.ReadMemStats(&after)
		for _, err := range []error{err1, err2} {
			if err != nil && len(err.Error()) > maxMessage+256 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
		}
		// What the decoded groups keep stays within the entry budget.
		var kept int
		for _, g := range hb.WAFIPGroups {
			for _, e := range g.IPList {
				kept += len(e) + entryOverhead
			}
		}
		if kept > 64<<10 {
			t.Fatalf("decoded groups keep %d bytes of entries, over the 64 KiB budget", kept)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(64*len(reply))+(4<<20) {
			t.Fatalf("%d bytes of reply allocated %d bytes", len(reply), grew)
		}
	})
}
