package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"openflare/internal/jsonstream"
)

type replyTransport []byte

func (b replyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(bytes.NewReader(b)), Header: http.Header{}, Request: r}, nil
}

// Whatever a server sends as a heartbeat or E4 reply decodes or fails
// cleanly: no panic, an error text bounded whatever the reply's size, and
// memory in proportion to the reply (it never balloons). The IP groups go
// to a decoder that skips them (agent/ipgroups fuzzes its own).
func FuzzDecodeReplies(f *testing.F) {
	f.Add([]byte(`{"success":true,"data":{"active_config":{"version":"v1","checksum":"c"},"agent_settings":{"heartbeat_interval":3000},"waf_ip_groups":[{"id":1,"ip_list":["198.51.100.1"],"checksum":"x"}]}}`))
	f.Add([]byte(`{"success":true,"data":{"version":"v1","checksum":"c","source_config_json":"{}","support_files":[{"path":"a","content":"b"}]}}`))
	f.Add([]byte(`{"success":false,"error_msg":"` + strings.Repeat("x", 4096) + `"}`))
	f.Add([]byte(`{"data":{"waf_ip_groups":[{"id":-1},{"id":"x"}]}}`))
	f.Add([]byte(`{"data":{"waf_ip_groups":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`))
	f.Fuzz(func(t *testing.T, reply []byte) {
		c := New("http://cp.invalid", secret, "fuzz", time.Second)
		c.http.Transport = replyTransport(reply)
		c.Budgets = Budgets{Active: 1 << 20, Value: 16 << 10}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err1 := c.Heartbeat(context.Background(), payload(), func(dec *json.Decoder) error { return jsonstream.Skip(dec) })
		_, err2 := c.ActiveConfig(context.Background(), discard)
		runtime.ReadMemStats(&after)
		for _, err := range []error{err1, err2} {
			if err != nil && len(err.Error()) > maxMessage+256 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(64*len(reply))+(4<<20) {
			t.Fatalf("%d bytes of reply allocated %d bytes", len(reply), grew)
		}
	})
}
