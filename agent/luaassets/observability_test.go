package luaassets

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// observation is the endpoint's JSON; an integer field fails to decode
// from a fractional number.
type observation struct {
	OK             *bool           `json:"ok"`
	CapturedAtUnix *int64          `json:"captured_at_unix"`
	Connections    map[string]*int `json:"connections"`
}

// §11 case 27, plus the stub_status failure path through the top-level
// read.lua in a server that has no stub_status location.
func TestObservability(t *testing.T) {
	r := newRig(t)
	r.start(`
    server {
        listen 127.0.0.1:9146;
        location = /openflare/observability {
            default_type application/json;
            content_by_lua_file ` + r.luaDir + `/read.lua;
        }
    }
`)
	read := func(addr string) observation {
		t.Helper()
		got := send(t, "127.0.0.1", http.MethodGet, "http://"+addr+"/openflare/observability", addr, nil, nil)
		if got.status != 200 || got.header.Get("Content-Type") != "application/json" || got.body[len(got.body)-1] != '\n' {
			t.Fatalf("got %d %q %q", got.status, got.header.Get("Content-Type"), got.body)
		}
		var o observation
		if err := json.Unmarshal([]byte(got.body), &o); err != nil {
			t.Fatalf("body %q: %v", got.body, err)
		}
		for _, k := range []string{"active", "reading", "writing", "waiting"} {
			if o.Connections[k] == nil {
				t.Fatalf("body %q lacks connections.%s", got.body, k)
			}
		}
		if o.OK == nil || o.CapturedAtUnix == nil {
			t.Fatalf("body %q lacks ok or captured_at_unix", got.body)
		}
		if d := time.Since(time.Unix(*o.CapturedAtUnix, 0)); d < -5*time.Second || d > 5*time.Second {
			t.Errorf("captured_at_unix is %v away from now", d)
		}
		return o
	}

	t.Run("case27", func(t *testing.T) {
		o := read("127.0.0.1:9145")
		if !*o.OK || *o.Connections["active"] < 1 || *o.Connections["writing"] < 1 {
			t.Errorf("ok=%v connections=%v, want ok and at least this request", *o.OK, o.Connections)
		}
	})
	t.Run("stub_status unavailable", func(t *testing.T) {
		o := read("127.0.0.1:9146")
		if *o.OK {
			t.Error("ok = true without a stub_status location")
		}
		for k, v := range o.Connections {
			if *v != 0 {
				t.Errorf("connections.%s = %d, want 0", k, *v)
			}
		}
	})
}
