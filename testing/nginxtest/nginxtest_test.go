package nginxtest

import (
	"io"
	"net/http"
	"testing"

	"openflare/testing/nstest"
)

func TestMain(m *testing.M) { nstest.Main(m) }

// A Lua location answers through a real nginx on port 80, and a reload
// swaps the workers while the answer changes.
func TestStartServesLua(t *testing.T) {
	s := Start(t, `server { listen 80; location / { content_by_lua_block { ngx.say("hello ", ngx.var.remote_addr) } } }`)
	WaitPort(t, "127.0.0.1:80")
	resp, err := http.Get("http://127.0.0.1/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello 127.0.0.1\n" {
		t.Fatalf("body = %q", body)
	}
	before := s.WorkerPIDs()
	s.Reload()
	if after := s.WorkerPIDs(); !disjoint(before, after) {
		t.Fatalf("workers %v survived reload (%v)", before, after)
	}
}
