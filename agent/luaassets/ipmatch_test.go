package luaassets

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// ipmatchProbe answers POST [{entries, addr}, ...] with [matched, ...] by
// compiling each entry list with waf.ipmatch inside nginx, and GET with the
// time it takes to compile a 100 000-entry list.
const ipmatchProbe = `
local cjson = require("cjson.safe")
local ipmatch = require("waf.ipmatch")

if ngx.req.get_method() == "POST" then
    ngx.req.read_body()
    local out = {}
    for i, c in ipairs(cjson.decode(ngx.req.get_body_data())) do
        out[i] = ipmatch.match(ipmatch.compile(c.entries), ipmatch.parse(c.addr))
    end
    ngx.say(cjson.encode(out))
    return
end

local list = {}
for i = 1, 99990 do
    local n = (i * 40503 + 12345) % 16777216
    list[i] = string.format("10.%d.%d.%d", math.floor(n / 65536), math.floor(n / 256) % 256, n % 256)
end
for i = 1, 10 do
    list[#list + 1] = string.format("2001:db8:%x::/48", i)
end
ngx.update_time()
local t0 = ngx.now()
local m = ipmatch.compile(list)
ngx.update_time()
ngx.say(cjson.encode({
    compile_ms = (ngx.now() - t0) * 1000,
    hit = ipmatch.match(m, ipmatch.parse(list[5000])),
    hit6 = ipmatch.match(m, ipmatch.parse("2001:db8:a:ffff::1")),
    miss = ipmatch.match(m, ipmatch.parse("11.0.0.1")),
}))
`

type matchCase struct {
	Entries []string `json:"entries"`
	Addr    string   `json:"addr"`
	want    bool
}

// The matcher, run by LuaJIT inside nginx: DATAPLANE §2.3 and the IPv6
// examples of §11, which the IPv4-only listeners cannot carry.
func TestIPMatcherInLua(t *testing.T) {
	r := newRig(t)
	probe := filepath.Join(t.TempDir(), "ipmatch_probe.lua")
	if err := os.WriteFile(probe, []byte(ipmatchProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	r.start(`
    server {
        listen 80;
        server_name lua.test;
        location = /ipmatch { content_by_lua_file ` + probe + `; }
    }
`)

	cases := []matchCase{
		// §11 IPv6 examples.
		{Entries: []string{"2001:db8::1"}, Addr: "2001:0db8:0:0:0:0:0:1", want: true},
		{Entries: []string{"2001:db8:abcd::/48"}, Addr: "2001:db8:abcd:12::9", want: true},
		{Entries: []string{"2001:db8:abcd::/48"}, Addr: "2001:db9::1", want: false},
		// Numeric comparison both ways, any case, "::" anywhere.
		{Entries: []string{"2001:0DB8:0000:0000:0000:0000:0000:000A"}, Addr: "2001:db8::a", want: true},
		{Entries: []string{"1:2:3:4:5:6:7::"}, Addr: "1:2:3:4:5:6:7:0", want: true},
		{Entries: []string{"::2:3:4:5:6:7:8"}, Addr: "0:2:3:4:5:6:7:8", want: true},
		{Entries: []string{"::1.2.3.4"}, Addr: "::102:304", want: true},
		{Entries: []string{"2001:db8::1"}, Addr: "2001:db8::2", want: false},
		// The all-zero address.
		{Entries: []string{"::"}, Addr: "0:0:0:0:0:0:0:0", want: true},
		{Entries: []string{"::"}, Addr: "::1", want: false},
		{Entries: []string{"::1"}, Addr: "::", want: false},
		// Host bits ignored; prefixes not on a byte boundary.
		{Entries: []string{"2001:db8:abcd:ffff::1/48"}, Addr: "2001:db8:abcd::7", want: true},
		{Entries: []string{"fe80::/10"}, Addr: "febf:ffff::1", want: true},
		{Entries: []string{"fe80::/10"}, Addr: "fec0::1", want: false},
		{Entries: []string{"2001:db8::/33"}, Addr: "2001:db8:7fff::1", want: true},
		{Entries: []string{"2001:db8::/33"}, Addr: "2001:db8:8000::1", want: false},
		{Entries: []string{"10.1.2.3/8"}, Addr: "10.200.0.1", want: true},
		{Entries: []string{"192.0.2.0/28"}, Addr: "192.0.2.15", want: true},
		{Entries: []string{"192.0.2.0/28"}, Addr: "192.0.2.16", want: false},
		{Entries: []string{"192.0.2.7/32"}, Addr: "192.0.2.7", want: true},
		// /0 matches its own family only.
		{Entries: []string{"::/0"}, Addr: "2001:db8::1", want: true},
		{Entries: []string{"::/0"}, Addr: "192.0.2.1", want: false},
		{Entries: []string{"0.0.0.0/0"}, Addr: "255.255.255.255", want: true},
		{Entries: []string{"0.0.0.0/0"}, Addr: "::1", want: false},
		// IPv4-mapped IPv6 is not unified with IPv4.
		{Entries: []string{"192.0.2.1"}, Addr: "::ffff:192.0.2.1", want: false},
		{Entries: []string{"::ffff:192.0.2.1"}, Addr: "192.0.2.1", want: false},
		{Entries: []string{"192.0.2.0/24"}, Addr: "::ffff:192.0.2.1", want: false},
		{Entries: []string{"::ffff:192.0.2.1"}, Addr: "::ffff:c000:201", want: true},
		{Entries: []string{"::ffff:192.0.2.0/120"}, Addr: "::ffff:192.0.2.77", want: true},
		// Invalid entries never match, and do not spoil the valid ones.
		{Entries: []string{"2001:db8:::1", "1::2::3", "1:2:3:4:5:6:7:8:9", "12345::1", "fe80::1%eth0"}, Addr: "2001:db8::1", want: false},
		{Entries: []string{"1:2:3:4:5:6:7:8::"}, Addr: "1:2:3:4:5:6:7:8", want: false},
		{Entries: []string{"fe80::1%eth0"}, Addr: "fe80::1", want: false},
		{Entries: []string{"2001:db8::1/129"}, Addr: "2001:db8::1", want: false},
		{Entries: []string{"10.0.0.0/33"}, Addr: "10.0.0.1", want: false},
		{Entries: []string{"1.2.3.4/"}, Addr: "1.2.3.4", want: false},
		{Entries: []string{"1.2.3.4/08"}, Addr: "1.2.3.4", want: false},
		{Entries: []string{"010.0.0.1"}, Addr: "10.0.0.1", want: false},
		{Entries: []string{"10.0.0.256", "10.0.0", "10.0.0.1.2", "garbage", ""}, Addr: "10.0.0.1", want: false},
		{Entries: []string{"garbage", "2001:db8::/32"}, Addr: "2001:db8::5", want: true},
		// Invalid or empty candidates never match.
		{Entries: []string{"0.0.0.0/0", "::/0"}, Addr: "", want: false},
		{Entries: []string{"0.0.0.0/0", "::/0"}, Addr: "unix:", want: false},
		{Entries: []string{}, Addr: "192.0.2.1", want: false},
	}
	body, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	resp := send(t, otherIP, http.MethodPost, "http://127.0.0.1/ipmatch", "lua.test", nil, bytes.NewReader(body))
	var got []bool
	if err := json.Unmarshal([]byte(resp.body), &got); err != nil || len(got) != len(cases) {
		t.Fatalf("probe answered %d %q (%v)", resp.status, resp.body, err)
	}
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("entries %q, address %q: matched = %v, want %v", c.Entries, c.Addr, got[i], c.want)
		}
	}

	var bench struct {
		CompileMS float64 `json:"compile_ms"`
		Hit       bool    `json:"hit"`
		Hit6      bool    `json:"hit6"`
		Miss      bool    `json:"miss"`
	}
	resp = r.get(otherIP, "lua.test", "/ipmatch")
	if err := json.Unmarshal([]byte(resp.body), &bench); err != nil {
		t.Fatalf("probe answered %d %q (%v)", resp.status, resp.body, err)
	}
	t.Logf("compiling a 100 000-entry list took %.1f ms in one worker", bench.CompileMS)
	if !bench.Hit || !bench.Hit6 || bench.Miss {
		t.Errorf("100 000-entry matcher: hit=%v hit6=%v miss=%v", bench.Hit, bench.Hit6, bench.Miss)
	}
	if bench.CompileMS >= 1000 {
		t.Errorf("compiling 100 000 entries took %.0f ms, want well under a second", bench.CompileMS)
	}
}
