package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"unicode/utf8"

	"openflare/testing/testsupport"
)

// These tests need no nginx: they check what the program reads and the
// requests it builds from it.

func TestURLDecode(t *testing.T) {
	for in, want := range map[string]string{
		"a+b":            "a b",
		"%27%20or%201":   "' or 1",
		"%2e%2E":         "..",
		"%252e":          "%2e",
		"Man%'":          "Man%'",
		"100%":           "100%",
		"%zz%4":          "%zz%4",
		"plain <script>": "plain <script>",
	} {
		if got := urlDecode(in); got != want {
			t.Errorf("urlDecode(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadLines(t *testing.T) {
	lines, shapes := readLines([]byte("# about\n#shapes: query  form\n\n1' or 1=1\r\n#skip\n  x\n"))
	if !slices.Equal(shapes, []string{"query", "form"}) {
		t.Errorf("shapes = %q", shapes)
	}
	if want := []line{{"1' or 1=1", 4}, {"  x", 6}}; !slices.Equal(lines, want) {
		t.Errorf("lines = %+v, want %+v", lines, want)
	}
}

func TestSampleDown(t *testing.T) {
	items := make([]int, 100)
	for i := range items {
		items[i] = i
	}
	a, b := sampleDown(items, 10, 1, "f"), sampleDown(items, 10, 1, "f")
	if len(a) != 10 || !slices.Equal(a, b) || !slices.IsSorted(a) {
		t.Errorf("sampleDown: %v then %v: want the same 10, in order", a, b)
	}
	if c := sampleDown(items, 10, 1, "g"); slices.Equal(a, c) {
		t.Errorf("two files got the same choice %v", a)
	}
	if got := sampleDown(items, -1, 1, "f"); len(got) != 100 {
		t.Errorf("n -1 kept %d, want all", len(got))
	}
}

func TestLibinjectionLoader(t *testing.T) {
	dir := fstest.MapFS{
		"sqli-a.txt":          {Data: []byte("# comment\n1'+or+'1'%3D'1\n1 union select 1\n1 union select 1\n2\n3\n")},
		"sqli-b.txt":          {Data: []byte("1 union select 1\nsleep(5)\n")},
		"xss-a.txt":           {Data: []byte("<script>alert(1)</script>\n")},
		"tbd-xss-a.txt":       {Data: []byte("not counted\n")},
		"false_positives.txt": {Data: []byte("#\nA IS FOR ADORABLE\n1/26/11\n")},
	}
	attacks, fp, err := loadLibinjection(dir, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(attacks) != 2 || attacks[0].Name != "sqli" || attacks[1].Name != "xss" || len(attacks[1].Samples) != 1 {
		t.Fatalf("categories %+v", attacks)
	}
	sqli := attacks[0].Samples
	// Three of sqli-a's five lines, then sqli-b's two less what repeats.
	if n := len(sqli); n < 4 || n > 5 {
		t.Errorf("%d SQLi samples, want 3 from a file of 5 and what b adds", n)
	}
	seen := map[string]bool{}
	for i, s := range sqli {
		if seen[s.Text] {
			t.Errorf("%q twice", s.Text)
		}
		seen[s.Text] = true
		if !s.Encoded || !strings.HasPrefix(s.Source, "sqli-") {
			t.Errorf("sample %+v", s)
		}
		if i == 0 && s.Shape != "query" {
			t.Errorf("first sample's shape %q, want query", s.Shape)
		}
	}
	if len(fp.Samples) != 2 || fp.Attack || fp.Samples[1].Shape != "form" {
		t.Errorf("false positives %+v", fp)
	}
}

// TestLibinjectionCorpus reads the shared corpus the program uses, where
// it is checked out.
func TestLibinjectionCorpus(t *testing.T) {
	dir := testsupport.SharedDir(t, "corpus/libinjection")
	attacks, fp, err := loadLibinjection(os.DirFS(dir), 500, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range append(attacks, fp) {
		if len(c.Samples) < 400 {
			t.Errorf("%s: only %d samples", c.Name, len(c.Samples))
		}
		checkRequests(t, c)
	}
}

func TestOwnSamples(t *testing.T) {
	td, err := fs.Sub(testdata, "testdata")
	if err != nil {
		t.Fatal(err)
	}
	cats, err := loadOwn(td)
	if err != nil {
		t.Fatal(err)
	}
	if len(cats) != len(ownSets) {
		t.Fatalf("%d categories, want %d", len(cats), len(ownSets))
	}
	for _, c := range cats {
		if len(c.Samples) < 40 {
			t.Errorf("%s: %d samples, want a few dozen at least", c.Name, len(c.Samples))
		}
		// The same input in two files is two requests (the files' shapes
		// differ); within one file it is a slip.
		seen := map[string]string{}
		for _, s := range c.Samples {
			file, _, _ := strings.Cut(s.Source, ":")
			k := file + "\x00" + s.Filename + "\x00" + s.FileType + "\x00" + s.Text
			if first, ok := seen[k]; ok {
				t.Errorf("%s repeats %s", s.Source, first)
			}
			seen[k] = s.Source
		}
		checkRequests(t, c)
	}
}

func TestOwnSampleFileErrors(t *testing.T) {
	for name, data := range map[string]string{
		"no shapes":      "x\n",
		"unknown shape":  "#shapes: query nowhere\nx\n",
		"upload no tabs": "#shapes: multipart\nshell.php\n",
	} {
		dir := fstest.MapFS{}
		for _, set := range ownSets {
			dir[set.name+".txt"] = &fstest.MapFile{Data: []byte("#shapes: query\nx\n")}
		}
		dir["cmdi.txt"] = &fstest.MapFile{Data: []byte(data)}
		if _, err := loadOwn(dir); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestBenign(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, `curl (7.88.1-10) bookworm; urgency=medium

  * Fix the handling of proxies when the connection is reused. This was
    reported by several users of the command line tool.
  * See https://curl.se/docs/CVE-2023-0001.html for the details.

 -- Samuel Henrique <samueloph@debian.org>  Sun, 19 Feb 2023 12:00:00 +0000
`)
	zw.Close()
	dir := fstest.MapFS{
		"curl/changelog.Debian.gz": {Data: gz.Bytes()},
		"curl/copyright":           {Data: []byte("Files: *\nCopyright: 1996-2023 Daniel Stenberg <daniel@haxx.se>\nLicense: curl\n The licence is written in full in the file named COPYING in the source tree.\n")},
		"curl/README.md":           {Data: []byte("Usage\n\nRun the following command to fetch a page and save it.\n\n    curl -o page.html https://example.org/ && echo done\n    if [ $? -ne 0 ]; then exit 1; fi\n")},
		"curl/examples/get.py":     {Data: []byte("import sys\nprint(sys.argv[1:])\n")},
		"curl/logo.png":            {Data: []byte("\x89PNG\x00\x01")},
		"curl/binary":              {Data: []byte("ab\x00cd")},
		"curl/manual.html":         {Data: []byte("<p>The manual is in HTML and would not be counted.</p>")},
	}
	cats, err := loadBenign(dir, 50, 1)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := loadBenign(dir, 50, 1)
	if len(cats) != len(benignKinds) {
		t.Fatalf("%d kinds, want %d", len(cats), len(benignKinds))
	}
	for i, c := range cats {
		if c.Attack || len(c.Samples) == 0 {
			t.Errorf("%s: %d samples, attack %v", c.Name, len(c.Samples), c.Attack)
		}
		if fingerprint(c) != fingerprint(again[i]) {
			t.Errorf("%s: two loads differ", c.Name)
		}
		for _, s := range c.Samples {
			if strings.Contains(s.Text, "HTML") || strings.ContainsRune(s.Text, 0) {
				t.Errorf("%s: %q comes from a file that is not text", c.Name, s.Text)
			}
		}
		checkRequests(t, c)
	}
	byName := map[string][]string{}
	for _, c := range cats {
		for _, s := range c.Samples {
			byName[c.Name] = append(byName[c.Name], s.Text)
		}
	}
	for kind, want := range map[string]string{
		"benign-names": "Samuel Henrique", "benign-email": "daniel@haxx.se", "benign-urls": "https://curl.se/docs/CVE-2023-0001.html",
		"benign-code": "    curl -o page.html https://example.org/ && echo done\n    if [ $? -ne 0 ]; then exit 1; fi",
	} {
		if !slices.Contains(byName[kind], want) {
			t.Errorf("%s: %q not among %q", kind, want, byName[kind])
		}
	}
}

// TestRealDocs cuts benign samples from this machine's documentation as
// the program does, from every eighth package's (all of it takes seconds
// under the race detector).
func TestRealDocs(t *testing.T) {
	const root = "/usr/share/doc"
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Skip(err)
	}
	docs := fstest.MapFS{}
	for i, e := range entries {
		if i%8 != 0 || !e.IsDir() {
			continue
		}
		fs.WalkDir(os.DirFS(root), e.Name(), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if b, err := os.ReadFile(filepath.Join(root, p)); err == nil {
					docs[p] = &fstest.MapFile{Data: b}
				}
			}
			return nil
		})
	}
	cats, err := loadBenign(docs, 500, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cats {
		if len(c.Samples) < 20 {
			t.Errorf("%s: only %d samples", c.Name, len(c.Samples))
		}
		checkRequests(t, c)
	}
}

func TestRequestShapes(t *testing.T) {
	enc := func(cat, shape, text string) Sample {
		return Sample{Category: cat, Shape: shape, Text: text, Encoded: true, Source: "t"}
	}
	for _, tc := range []struct {
		s          Sample
		line, body string
		header     [2]string
	}{
		{s: enc("sqli", "query", "1' or '1'='1"), line: "GET /products?id=1'%20or%20'1'='1 HTTP/1.1"},
		{s: enc("sqli", "query", "1+union+select+1%23&x"), line: "GET /products?id=1+union+select+1%23%26x HTTP/1.1"},
		{s: enc("lfi", "query", "..%252f..%252fetc%252fpasswd"), line: "GET /download?file=..%252f..%252fetc%252fpasswd HTTP/1.1"},
		{s: enc("xss", "query", `"><svg onload=alert(1)>`), line: "GET /search?q=%22%3E%3Csvg%20onload=alert(1)%3E HTTP/1.1"},
		{s: enc("lfi", "path", "static/..%2f..%2fetc/passwd"), line: "GET /static/..%2f..%2fetc/passwd HTTP/1.1"},
		{s: enc("crlf", "path", "/%0d%0aSet-Cookie:x=1"), line: "GET /%0d%0aSet-Cookie:x=1 HTTP/1.1"},
		{s: enc("sqli", "form", "1;drop table t"), line: "POST /products HTTP/1.1", body: "id=1;drop%20table%20t&submit=Send"},
		{s: enc("java", "formbody", "class.module.classLoader.x=1&y=2"), line: "POST /search HTTP/1.1", body: "class.module.classLoader.x=1&y=2"},
		{s: enc("xss", "json", "<img src=x onerror=alert(1)>%26"), line: "POST /api/search HTTP/1.1", body: `{"q":"<img src=x onerror=alert(1)>&"}`},
		{s: enc("sqli", "cookie", "1; or 1=1"), line: "GET /products HTTP/1.1", header: [2]string{"Cookie", "session=6f1c0b7e2a9d4c58; id=1%3B%20or%201=1"}},
		{s: enc("cmdi", "header:User-Agent", "() { :; }; /bin/id"), line: "GET /tools/ping HTTP/1.1", header: [2]string{"User-Agent", "() { :; }; /bin/id"}},
		{s: enc("crlf", "header:Referer", "%0d%0aX: y"), line: "GET /login HTTP/1.1", header: [2]string{"Referer", "%0d%0aX: y"}},
		{s: enc("xxe", "xml", "<!DOCTYPE r [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><r>%26x;</r>"), line: "POST /api/import HTTP/1.1", body: "<!DOCTYPE r [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><r>&x;</r>"},
		{s: Sample{Category: "benign-code", Shape: "form", Text: "a = b\nif x:"}, line: "POST /paste HTTP/1.1", body: "content=a+%3D+b%0D%0Aif+x%3A&submit=Send"},
		{s: Sample{Category: "benign-urls", Shape: "header:Referer", Text: "https://example.org/a?b=1&c=%20"}, line: "GET /links HTTP/1.1", header: [2]string{"Referer", "https://example.org/a?b=1&c=%20"}},
	} {
		raw, err := Request(tc.s)
		if err != nil {
			t.Fatal(err)
		}
		line, header, body := parse(t, raw)
		if line != tc.line || tc.body != "" && string(body) != tc.body {
			t.Errorf("%s %q:\n got %s\n     %q\nwant %s\n     %q", tc.s.Shape, tc.s.Text, line, body, tc.line, tc.body)
		}
		if tc.header[0] != "" && header.Get(tc.header[0]) != tc.header[1] {
			t.Errorf("%s %q: %s: %q, want %q", tc.s.Shape, tc.s.Text, tc.header[0], header.Get(tc.header[0]), tc.header[1])
		}
	}
}

func TestMultipartRequest(t *testing.T) {
	s := Sample{Category: "upload", Shape: "multipart", Source: "t", Encoded: true,
		Filename: "../shell.php;.jpg", FileType: "image/jpeg", Text: "GIF89a<?php system($_GET['c']); ?>%0a"}
	raw, err := Request(s)
	if err != nil {
		t.Fatal(err)
	}
	_, header, body := parse(t, raw)
	parts := readMultipart(t, header, body)
	if len(parts) != 2 || parts[0].text != "My file" {
		t.Fatalf("parts %+v", parts)
	}
	f := parts[1]
	if !strings.Contains(f.disposition, `name="file"; filename="../shell.php;.jpg"`) || f.ctype != "image/jpeg" || f.text != "GIF89a<?php system($_GET['c']); ?>\n" {
		t.Errorf("file part %+v", f)
	}
}

// parse reads a raw request as a server would, failing on anything one
// would refuse: a malformed request line or header, a body of another
// length than said.
func parse(t *testing.T, raw []byte) (string, http.Header, []byte) {
	t.Helper()
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw)))
	line, err := tp.ReadLine()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(line, " ")
	if len(f) != 3 || f[2] != "HTTP/1.1" || !strings.HasPrefix(f[1], "/") {
		t.Fatalf("request line %q", line)
	}
	for _, c := range []byte(f[1]) {
		if c <= ' ' || c >= 0x7f || c == '#' {
			t.Fatalf("request target %q has %q", f[1], c)
		}
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	for k, vs := range h {
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n\x00") {
				t.Fatalf("header %s: %q", k, v)
			}
		}
	}
	body, _ := io.ReadAll(tp.R)
	if n, _ := strconv.Atoi(h.Get("Content-Length")); n != len(body) {
		t.Fatalf("Content-Length %q for %d bytes", h.Get("Content-Length"), len(body))
	}
	if h.Get("Host") != Host {
		t.Fatalf("Host %q", h.Get("Host"))
	}
	return line, http.Header(h), body
}

type part struct{ disposition, ctype, text string }

func readMultipart(t *testing.T, h http.Header, body []byte) []part {
	t.Helper()
	_, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	var parts []part
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			return parts
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p)
		parts = append(parts, part{p.Header.Get("Content-Disposition"), p.Header.Get("Content-Type"), string(b)})
	}
}

// checkRequests builds every sample's request and checks that it parses
// and that the application would read the sample's value from it.
func checkRequests(t *testing.T, c Category) {
	t.Helper()
	pl := places[c.Name]
	for _, s := range c.Samples {
		if s.Category != c.Name || !knownShape(s.Shape) {
			t.Fatalf("%s: sample %+v", c.Name, s)
		}
		raw, err := Request(s)
		if err != nil {
			t.Fatal(err)
		}
		line, h, body := parse(t, raw)
		target := strings.Split(line, " ")[1]
		want := s.Value()
		if !s.Encoded && slices.Contains([]string{"query", "form", "cookie"}, s.Shape) {
			// What a browser sends for a textarea's line breaks.
			want = strings.ReplaceAll(want, "\n", "\r\n")
		}
		var got string
		switch sh := s.Shape; {
		case sh == "query":
			got = decodeAs(s, strings.TrimPrefix(target, pl.path+"?"+pl.param+"="))
		case sh == "form":
			got = decodeAs(s, strings.TrimSuffix(strings.TrimPrefix(string(body), pl.param+"="), "&submit=Send"))
		case sh == "cookie":
			_, v, _ := strings.Cut(h.Get("Cookie"), "; "+pl.param+"=")
			got = decodeAs(s, v)
		case sh == "path":
			got, want = urlDecode(target), urlDecode("/"+strings.TrimPrefix(s.Text, "/"))
		case sh == "formbody":
			got, want = urlDecode(string(body)), urlDecode(s.Text)
		case sh == "json":
			if !utf8.ValidString(want) {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatalf("%s: %v: %s", s.Source, err, body)
			}
			got, _ = m[pl.param].(string)
		case sh == "jsondoc":
			if !json.Valid(body) {
				t.Errorf("%s: not JSON: %s", s.Source, body)
			}
			got = string(body)
		case sh == "xml":
			got = string(body)
		case sh == "multipart":
			parts := readMultipart(t, h, body)
			got = parts[len(parts)-1].text
		default:
			name := strings.TrimPrefix(sh, "header:")
			got, want = h.Get(name), headerValue(s.Text)
			if want != s.Text && !strings.ContainsAny(s.Text, "\r\n") {
				t.Errorf("%s: header %q changed to %q", s.Source, s.Text, want)
			}
		}
		if got != want {
			t.Errorf("%s (%s): the application reads %q, want %q", s.Source, s.Shape, got, want)
		}
		if ua := h.Get("User-Agent"); s.Shape != "header:User-Agent" && ua != browserUA {
			t.Errorf("%s: User-Agent %q", s.Source, ua)
		}
	}
}

// decodeAs decodes a query or form value the way the sample's encoding
// was made: leniently for a written one, strictly for a browser's.
func decodeAs(s Sample, v string) string {
	if s.Encoded {
		return urlDecode(v)
	}
	d, err := url.QueryUnescape(v)
	if err != nil {
		return "invalid: " + err.Error()
	}
	return d
}

// The growth series' requests fit nginx's default 8 KB request line, each
// a bigger one than the last, and carry the run whole, escaped only where
// a request line needs it.
func TestGrowthRequests(t *testing.T) {
	for _, unit := range growthUnits {
		last := 0
		for _, n := range growthSizes {
			line, _, _ := parse(t, growthRequest(unit, n))
			if len(line)+2 > 8192 || len(line) <= last {
				t.Errorf("%q, %d: a request line of %d bytes after %d", unit, n, len(line), last)
			}
			last = len(line)
			value := strings.TrimSuffix(strings.TrimPrefix(line, "GET /search?q="), " HTTP/1.1")
			enc := strings.NewReplacer(";", "%3B", `"`, "%22").Replace(unit)
			if strings.ReplaceAll(value, enc, "") != "" || strings.ContainsAny(value, `;" `) {
				t.Errorf("%q, %d: value %.40q... is not the run", unit, n, value)
			}
		}
	}
}
