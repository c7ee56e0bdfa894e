package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The shapes, each the request a client sends with the input in one place:
//
//	query          GET <path>?<param>=<input>
//	path           GET /<input>
//	form           POST <path>, application/x-www-form-urlencoded, <param>=<input>&submit=Send
//	formbody       POST <path>, application/x-www-form-urlencoded, the input is the whole body
//	json           POST /api<path>, application/json, {"<param>":<input>}
//	jsondoc        POST /api<path>, application/json, the input is the whole body
//	cookie         GET <path>, Cookie: session=…; <param>=<input>
//	header:<Name>  GET <path>, the input is the <Name> header (in place of the browser's own)
//	xml            POST /api<path>, application/xml, the input is the whole body
//	multipart      POST <path>, multipart/form-data: a title field and the file part
//
// Every request carries a current Firefox's User-Agent, Accept and
// Accept-Language headers: a scanner's own User-Agent would be caught by
// CRS's scanner detection whatever the input, which is not what is measured.
var shapes = []string{"query", "path", "form", "formbody", "json", "jsondoc", "cookie", "xml", "multipart"}

func knownShape(s string) bool {
	if name, ok := strings.CutPrefix(s, "header:"); ok {
		return name != "" && !strings.ContainsAny(name, ": \t\r\n")
	}
	return slices.Contains(shapes, s)
}

// A place is where a category's inputs go: the path of its requests and
// the parameter, field or cookie they fill, as the applications such
// attacks aim at name them.
type place struct{ path, param string }

var places = map[string]place{
	"sqli":             {"/products", "id"},
	"xss":              {"/search", "q"},
	"cmdi":             {"/tools/ping", "host"},
	"lfi":              {"/download", "file"},
	"rfi":              {"/index.php", "page"},
	"crlf":             {"/login", "next"},
	"php":              {"/search", "q"},
	"java":             {"/search", "q"},
	"upload":           {"/upload", "file"},
	"ssrf":             {"/fetch", "url"},
	"xxe":              {"/import", ""},
	"benign-search":    {"/search", "q"},
	"benign-names":     {"/account", "name"},
	"benign-email":     {"/subscribe", "email"},
	"benign-sentences": {"/comments", "comment"},
	"benign-code":      {"/paste", "content"},
	"benign-urls":      {"/links", "url"},
	"benign-json":      {"/comments", ""},
	"benign-xml":       {"/import", ""},
	"benign-upload":    {"/upload", "file"},
	"benign-fp":        {"/search", "q"},
}

// Host names the site; both WAFs see the same one.
const Host = "shop.example"

const browserUA = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"

// Request is the HTTP/1.1 request that carries s, byte for byte.
func Request(s Sample) ([]byte, error) {
	pl, ok := places[s.Category]
	if !ok {
		return nil, fmt.Errorf("no place for category %q", s.Category)
	}
	method, target, ctype := "GET", pl.path, ""
	var body []byte
	headers := [][2]string{{"User-Agent", browserUA}, {"Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}, {"Accept-Language", "en-US,en;q=0.5"}}
	switch s.Shape {
	case "query":
		target += "?" + pl.param + "=" + s.urlValue("")
	case "path":
		target = "/" + strings.TrimPrefix(escape(s.Text, "#?\"<>\\^`{|}"), "/")
	case "form":
		method, ctype = "POST", "application/x-www-form-urlencoded"
		body = []byte(pl.param + "=" + s.urlValue("") + "&submit=Send")
	case "formbody":
		method, ctype = "POST", "application/x-www-form-urlencoded"
		body = []byte(escape(s.Text, "#\"<>\\^`{|}"))
	case "json":
		method, ctype, target = "POST", "application/json", "/api"+pl.path
		body = fmt.Appendf(nil, `{%s:%s}`, jsonText(pl.param), jsonText(s.Value()))
	case "jsondoc":
		method, ctype, target = "POST", "application/json", "/api"+pl.path
		body = []byte(s.Value())
	case "xml":
		method, ctype, target = "POST", "application/xml", "/api"+pl.path
		body = []byte(s.Value())
	case "cookie":
		headers = append(headers, [2]string{"Cookie", "session=6f1c0b7e2a9d4c58; " + pl.param + "=" + s.urlValue(";,\"\\")})
	case "multipart":
		method = "POST"
		boundary := boundaryFor(s)
		ctype = "multipart/form-data; boundary=" + boundary
		var b bytes.Buffer
		fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nMy file\r\n", boundary)
		fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=%q; filename=\"%s\"\r\nContent-Type: %s\r\n\r\n", boundary, pl.param, s.Filename, s.FileType)
		b.WriteString(s.Value())
		fmt.Fprintf(&b, "\r\n--%s--\r\n", boundary)
		body = b.Bytes()
	default:
		name, ok := strings.CutPrefix(s.Shape, "header:")
		if !ok || !knownShape(s.Shape) {
			return nil, fmt.Errorf("%s: unknown shape %q", s.Source, s.Shape)
		}
		v := headerValue(s.Text)
		replaced := false
		for i := range headers {
			if strings.EqualFold(headers[i][0], name) {
				headers[i][1], replaced = v, true
			}
		}
		if !replaced {
			headers = append(headers, [2]string{name, v})
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, Host)
	for _, h := range headers {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
	}
	if method == "POST" {
		fmt.Fprintf(&b, "Content-Type: %s\r\nContent-Length: %d\r\n", ctype, len(body))
	}
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes(), nil
}

// urlValue is the input as a query or form value: an encoded input as it
// is written, escaping only what would end the value or the request line
// (and the bytes in also); a plain one encoded as a browser encodes a
// form, which sends a textarea's line breaks as CR LF.
func (s Sample) urlValue(also string) string {
	if !s.Encoded {
		return url.QueryEscape(strings.ReplaceAll(strings.ReplaceAll(s.Text, "\r\n", "\n"), "\n", "\r\n"))
	}
	return escape(s.Text, "&#\"<>\\^`{|}"+also)
}

// escape percent-encodes the bytes of s that no request line or header
// may carry (controls, space, non-ASCII) and those in also; the rest, the
// input's own encoding included (a '%' that starts no escape too, which
// some rules look for), stays as written.
func escape(s, also string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(also, c) >= 0 {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// jsonText is v in JSON as browsers' JSON.stringify writes it: '<', '>'
// and '&' as they are, not as the \u escapes encoding/json uses by default.
func jsonText(v any) string {
	var b strings.Builder
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// headerValue is the input as a header value: as written, but for the
// bytes a header cannot carry (CR, LF and the other controls but tab).
func headerValue(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// boundaryFor is a browser-like multipart boundary, fixed for one sample
// so runs send the same bytes.
func boundaryFor(s Sample) string {
	h := fnv.New64a()
	h.Write([]byte(s.Filename + "\x00" + s.Text))
	return "----geckoformboundary" + strconv.FormatUint(h.Sum64(), 16)
}
