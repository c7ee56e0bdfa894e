package observability

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"openflare/agent/protocol"
)

const stockJSONLine = `{"ts":"2026-07-18T10:00:00+08:00","host":"shop.example.com","path":"/cart?id=3","remote_addr":"203.0.113.9","status":200,"request_time":0.018,"bytes_sent":5120,"request_length":431,"user_agent":"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36","cache_status":"HIT"}`

const stockCombinedLine = `203.0.113.9 - - [18/Jul/2026:10:00:00 +0800] "GET /cart?id=3 HTTP/1.1" 200 5120 "https://shop.example.com/" "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36"`

// at is 2026-07-18 02:00:00 UTC, the instant both stock lines were logged.
var at = time.Date(2026, 7, 18, 2, 0, 0, 0, time.UTC).Unix()

// jsonLine builds an openflare_json line with the given raw JSON values.
func jsonLine(ts, path, reqTime, ua, cache string) string {
	return `{"ts":` + ts + `,"host":"h.example","path":` + path + `,"remote_addr":"198.51.100.7","status":404,"request_time":` + reqTime +
		`,"bytes_sent":12,"request_length":34,"user_agent":` + ua + `,"cache_status":` + cache + `}`
}

func base(mod func(*protocol.AccessLog)) protocol.AccessLog {
	r := protocol.AccessLog{LoggedAtUnix: at, RemoteAddr: "198.51.100.7", Host: "h.example", Path: "/x",
		UserAgent: "ua", CacheStatus: "-", StatusCode: 404, BytesSent: 12, RequestLength: 34, RequestTimeMs: 1}
	if mod != nil {
		mod(&r)
	}
	return r
}

func TestParseLine(t *testing.T) {
	const ts = `"2026-07-18T02:00:00Z"`
	long := strings.Repeat("é", 150)
	cases := []struct {
		name string
		line string
		want protocol.AccessLog
		ok   bool
	}{
		{"stock json", stockJSONLine, protocol.AccessLog{LoggedAtUnix: at, RemoteAddr: "203.0.113.9", Host: "shop.example.com",
			Path: "/cart?id=3", UserAgent: "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36",
			CacheStatus: "HIT", StatusCode: 200, BytesSent: 5120, RequestLength: 431, RequestTimeMs: 18}, true},
		{"minimal", jsonLine(ts, `"/x"`, "0.001", `"ua"`, `"-"`), base(nil), true},
		{"crlf", jsonLine(ts, `"/x"`, "0.001", `"ua"`, `"-"`) + "\r", base(nil), true},
		{"half-hour offset", jsonLine(`"2026-07-18T04:30:00+02:30"`, `"/x"`, "0.001", `"ua"`, `"-"`), base(nil), true},
		{"negative offset", jsonLine(`"2026-07-17T21:00:00-05:00"`, `"/x"`, "0.001", `"ua"`, `"-"`), base(nil), true},
		{"fractional ts", jsonLine(`"2026-07-18T02:00:00.75Z"`, `"/x"`, "0.001", `"ua"`, `"-"`), base(nil), true},
		{"escaped quote and backslash", jsonLine(ts, `"/a\"b\\c\/d"`, "0.001", `"ua"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.Path = `/a"b\c/d` }), true},
		{"unicode escapes", jsonLine(ts, `"/x"`, "0.001", `"caf\u00e9 \ud83d\ude00 \t\n"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.UserAgent = "café 😀 \t\n" }), true},
		{"raw utf-8", jsonLine(ts, `"/路径"`, "0.001", `"Mozilla/5.0 ☃"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.Path, r.UserAgent = "/路径", "Mozilla/5.0 ☃" }), true},
		{"escaped control byte", jsonLine(ts, `"/x"`, "0.001", `"a\u001fb"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.UserAgent = "a\x1fb" }), true},
		{"invalid utf-8 becomes U+FFFD", jsonLine(ts, `"/x"`, "0.001", "\"a\xffb\"", `"-"`),
			base(func(r *protocol.AccessLog) { r.UserAgent = "a\uFFFDb" }), true},
		{"lone surrogate", jsonLine(ts, `"/x"`, "0.001", `"a\ud800b"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.UserAgent = "a\uFFFDb" }), true},
		{"half a millisecond rounds up", jsonLine(ts, `"/x"`, "0.0005", `"ua"`, `"-"`), base(nil), true},
		{"under half rounds down", jsonLine(ts, `"/x"`, "0.00049", `"ua"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.RequestTimeMs = 0 }), true},
		{"exact decimal half", jsonLine(ts, `"/x"`, "1.0005", `"ua"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.RequestTimeMs = 1001 }), true},
		{"whole seconds", jsonLine(ts, `"/x"`, "12", `"ua"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.RequestTimeMs = 12000 }), true},
		{"exponent", jsonLine(ts, `"/x"`, "1.5e-3", `"ua"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.RequestTimeMs = 2 }), true},
		{"request_time too large", jsonLine(ts, `"/x"`, "1e300", `"ua"`, `"-"`), protocol.AccessLog{}, false},
		{"empty cache status", jsonLine(ts, `"/x"`, "0.001", `"ua"`, `""`),
			base(func(r *protocol.AccessLog) { r.CacheStatus = "" }), true},
		{"relative path", jsonLine(ts, `"x?y=1"`, "0.001", `"ua"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.Path = "/x?y=1" }), true},
		{"empty path", jsonLine(ts, `""`, "0.001", `"ua"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.Path = "/" }), true},
		{"proxy url", jsonLine(ts, `"http://a.example/p"`, "0.001", `"ua"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.Path = "http://a.example/p" }), true},
		{"https url", jsonLine(ts, `"https://a.example/p"`, "0.001", `"ua"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.Path = "https://a.example/p" }), true},
		{"path cut at 100 runes", jsonLine(ts, `"/`+long+`"`, "0.001", `"ua"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.Path = "/" + strings.Repeat("é", 99) }), true},
		{"relative path cut after the slash", jsonLine(ts, `"`+long+`"`, "0.001", `"ua"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.Path = "/" + strings.Repeat("é", 99) }), true},
		{"keys in another order with spaces", ` { "status" : 404 , "ts" : ` + ts + ` , "path":"/x", "host":"h.example", "remote_addr":"198.51.100.7", ` +
			`"bytes_sent":12, "request_length":34, "request_time":0.001, "user_agent":"ua", "cache_status":"-", "extra": [1, {"a": null}] } `, base(nil), true},
		{"case-folded key", `{"TS":` + ts + `,"path":"/x"}`, protocol.AccessLog{LoggedAtUnix: at, Path: "/x"}, true},
		{"missing keys are zero", `{"ts":` + ts + `}`, protocol.AccessLog{LoggedAtUnix: at, Path: "/"}, true},
		{"quoted status", `{"ts":` + ts + `,"status":"200"}`, protocol.AccessLog{}, false},
		{"status out of range", `{"ts":` + ts + `,"status":1000}`, protocol.AccessLog{}, false},
		{"fractional bytes", `{"ts":` + ts + `,"bytes_sent":1.5}`, protocol.AccessLog{}, false},
		{"bad ts", jsonLine(`"yesterday"`, `"/x"`, "0.001", `"ua"`, `"-"`), protocol.AccessLog{}, false},
		{"leap day", jsonLine(`"2024-02-29T00:00:00Z"`, `"/x"`, "0.001", `"ua"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.LoggedAtUnix = time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC).Unix() }), true},
		{"2000 is a leap year", jsonLine(`"2000-02-29T00:00:00Z"`, `"/x"`, "0.001", `"ua"`, `"-"`),
			base(func(r *protocol.AccessLog) { r.LoggedAtUnix = time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC).Unix() }), true},
		{"2100 is not", jsonLine(`"2100-02-29T00:00:00Z"`, `"/x"`, "0.001", `"ua"`, `"-"`), protocol.AccessLog{}, false},
		{"30 february", jsonLine(`"2026-02-30T00:00:00Z"`, `"/x"`, "0.001", `"ua"`, `"-"`), protocol.AccessLog{}, false},
		{"no ts", `{"path":"/x"}`, protocol.AccessLog{}, false},
		{"trailing garbage", jsonLine(ts, `"/x"`, "0.001", `"ua"`, `"-"`) + "x", protocol.AccessLog{}, false},
		{"truncated json", jsonLine(ts, `"/x"`, "0.001", `"ua"`, `"-"`)[:60], protocol.AccessLog{}, false},

		{"stock combined", stockCombinedLine, protocol.AccessLog{LoggedAtUnix: at, RemoteAddr: "203.0.113.9", Path: "/cart?id=3", StatusCode: 200}, true},
		{"combined without protocol", `::1 - bob [18/Jul/2026:02:00:00 +0000] "GET x" 301 0`,
			protocol.AccessLog{LoggedAtUnix: at, RemoteAddr: "::1", Path: "/x", StatusCode: 301}, true},
		{"combined lowercase month", `10.0.0.1 - - [18/jul/2026:02:00:00 +0000] "GET / HTTP/1.0" 200 1`,
			protocol.AccessLog{LoggedAtUnix: at, RemoteAddr: "10.0.0.1", Path: "/", StatusCode: 200}, true},
		{"combined quote in path", `10.0.0.1 - - [18/Jul/2026:02:00:00 +0000] "GET /a"b HTTP/1.0" 200 1`,
			protocol.AccessLog{LoggedAtUnix: at, RemoteAddr: "10.0.0.1", Path: `/a"b`, StatusCode: 200}, true},
		{"combined empty request", `10.0.0.1 - - [18/Jul/2026:02:00:00 +0000] "" 400 0 "-" "-"`, protocol.AccessLog{}, false},
		{"combined bad time", `10.0.0.1 - - [18/Jul/2026:25:00:00 +0000] "GET / HTTP/1.0" 200 1`, protocol.AccessLog{}, false},
		{"combined two-digit status", `10.0.0.1 - - [18/Jul/2026:02:00:00 +0000] "GET / HTTP/1.0" 20 1`, protocol.AccessLog{}, false},
		{"combined without bytes", `10.0.0.1 - - [18/Jul/2026:02:00:00 +0000] "GET / HTTP/1.0" 200`, protocol.AccessLog{}, false},
		{"empty", ``, protocol.AccessLog{}, false},
		{"garbage", `hello world`, protocol.AccessLog{}, false},
		{"brace", `{`, protocol.AccessLog{}, false},
		{"null", `null`, protocol.AccessLog{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseLine([]byte(tc.line))
			if ok != tc.ok || got != tc.want {
				t.Errorf("ParseLine(%q)\n = %+v, %v\nwant %+v, %v", tc.line, got, ok, tc.want, tc.ok)
			}
			ref, refOK := parseSlowLine([]byte(tc.line))
			if refOK != ok || ref != got {
				t.Errorf("reference disagrees: %+v, %v", ref, refOK)
			}
		})
	}
}

// TestParseFastPathTaken makes sure the benchmarks measure the scanners,
// not the references: the lines nginx writes must never need them.
func TestParseFastPathTaken(t *testing.T) {
	if _, res := fastJSON([]byte(stockJSONLine)); res != fastOK {
		t.Errorf("fastJSON(stock) = %v, want fastOK", res)
	}
	if _, ok := parseCombined([]byte(stockCombinedLine)); !ok {
		t.Error("parseCombined(stock) failed")
	}
	extra := `{"ts":"2024-02-29T12:00:00Z","s":"x\"y","n":-1.5e3,"t":true,"f":false,"z":null,"path":"/"}`
	if _, res := fastJSON([]byte(extra)); res != fastOK {
		t.Errorf("fastJSON(extra keys) = %v, want fastOK", res)
	}
	escaped := jsonLine(`"2026-07-18T02:00:00Z"`, `"/a\"b\\c"`, "0.0005", `"caf\u00e9 \ud83d\ude00 ☃"`, `"-"`)
	if _, res := fastJSON([]byte(escaped)); res != fastOK {
		t.Errorf("fastJSON(escaped) = %v, want fastOK", res)
	}
}

func TestParseAllocations(t *testing.T) {
	for _, line := range []string{stockJSONLine, stockCombinedLine} {
		b := []byte(line)
		if n := testing.AllocsPerRun(100, func() { ParseLine(b) }); n > 1 {
			t.Errorf("ParseLine(%.20q…) allocates %v times, want at most 1", line, n)
		}
	}
}

func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		stockJSONLine, stockCombinedLine,
		jsonLine(`"2026-07-18T02:00:00Z"`, `"/a\"b\\c"`, "0.0005", `"caf\u00e9 \ud83d\ude00"`, `"-"`),
		jsonLine(`"2026-02-29T23:59:59-23:59"`, `"x"`, "1e3", `"\u0000"`, `""`),
		`{"TS":"2024-01-01T00:00:00Z","Status":1,"x":{"y":[true,false,null]}}`,
		`{"ts":"2024-01-01T00:00:00Z","request_time":"0.5"}`,
		`{"ts":"2024-01-01T00:00:00Z","host":null,"host":"a"}`,
		`::1 - - [29/Feb/2024:23:59:59 -2359] "GET /a"b" 200 0`,
		`a b c [x] "GET /" 200 0`,
		`a b c [01/Jan/2024:00:00:00 +0000] "" 400 0`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		got, ok := ParseLine(line)
		ref, refOK := parseSlowLine(line)
		if ok != refOK || got != ref {
			t.Fatalf("ParseLine(%q) = %+v, %v; reference %+v, %v", line, got, ok, ref, refOK)
		}
		if rec, res := fastJSON(line); res == fastOK {
			if ref, ok := slowJSON(line); !ok || ref != rec {
				t.Fatalf("fastJSON(%q) = %+v; slowJSON %+v, %v", line, rec, ref, ok)
			}
		}
		rec, ok := parseCombined(line)
		ref, refOK = slowCombined(line)
		if ok != refOK || rec != ref {
			t.Fatalf("parseCombined(%q) = %+v, %v; regexp %+v, %v", line, rec, ok, ref, refOK)
		}
	})
}

func benchmarkParse(b *testing.B, line string) {
	data := []byte(line)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	cpu := startCPUClock()
	for b.Loop() {
		if _, ok := ParseLine(data); !ok {
			b.Fatal("line rejected")
		}
	}
	reportLineRate(b, b.N, cpu)
}

// startCPUClock returns the process's CPU time so far.
func startCPUClock() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportLineRate reports lines per wall-clock second and per CPU second of
// the process. The second figure is the one to compare with the target on a
// shared machine, where wall time includes waiting for a CPU.
func reportLineRate(b *testing.B, lines int, cpuStart time.Duration) {
	b.ReportMetric(float64(lines)/b.Elapsed().Seconds(), "lines/s")
	if used := startCPUClock() - cpuStart; used > 0 {
		b.ReportMetric(float64(lines)/used.Seconds(), "lines/cpu-s")
	}
}

func BenchmarkParseJSONLine(b *testing.B)     { benchmarkParse(b, stockJSONLine) }
func BenchmarkParseCombinedLine(b *testing.B) { benchmarkParse(b, stockCombinedLine) }
