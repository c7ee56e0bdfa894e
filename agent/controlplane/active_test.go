package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"openflare/agent/protocol"
)

// collect keeps every support file handed on.
func collect(into *[]protocol.SupportFile) func(protocol.SupportFile) error {
	return func(f protocol.SupportFile) error {
		*into = append(*into, f)
		return nil
	}
}

// E4's support files are handed on one by one as they are decoded, in the
// order sent, wherever the array sits and whatever order each file's keys
// come in; the reply itself keeps none of them.
func TestSupportFilesHandedOn(t *testing.T) {
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"data":{"support_files":[`+
			`{"path":"1.crt","content":"-----BEGIN CERTIFICATE-----\nAAAA\n"},`+
			`{"content":"\u003cp\u003e{{status}}\u003c/p\u003e","extra":[1,{"a":2}],"path":"error_pages/origin_error.html.tmpl"},`+
			`{"path":"1.crt","content":"again"}],`+
			`"version":"v1","checksum":"c","source_config_json":"{}","created_at":"now"}}`)
	})
	var got []protocol.SupportFile
	ac, err := c.ActiveConfig(context.Background(), collect(&got))
	if err != nil {
		t.Fatal(err)
	}
	want := []protocol.SupportFile{
		{Path: "1.crt", Content: "-----BEGIN CERTIFICATE-----\nAAAA\n"},
		{Path: "error_pages/origin_error.html.tmpl", Content: "<p>{{status}}</p>"},
		{Path: "1.crt", Content: "again"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handed on %v", got)
	}
	if ac.Version != "v1" || ac.SourceConfigJSON != "{}" || ac.CreatedAt != "now" || ac.SupportFiles != nil {
		t.Fatalf("reply %+v", ac)
	}
	c = server(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"data":{"version":"v1","checksum":"c","source_config_json":"{}","support_files":null}}`)
	})
	got = nil
	if _, err := c.ActiveConfig(context.Background(), collect(&got)); err != nil || len(got) != 0 {
		t.Fatalf("null support files: %v, %v", got, err)
	}
}

// A reply of 128 MiB of support files costs the memory of one of them:
// none is held once handed on.
func TestSupportFilesInBoundedMemory(t *testing.T) {
	content := strings.Repeat("A", 512<<10)
	const n = 256
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"data":{"version":"v1","checksum":"c","source_config_json":"{}","support_files":[`)
		for i := range n {
			if i > 0 {
				io.WriteString(w, ",")
			}
			fmt.Fprintf(w, `{"path":"%d.crt","content":"%s"}`, i, content)
		}
		io.WriteString(w, `]}}`)
	})
	var count int
	var peak uint64
	_, err := c.ActiveConfig(context.Background(), func(f protocol.SupportFile) error {
		if f.Content != content {
			return fmt.Errorf("file %s: %d bytes", f.Path, len(f.Content))
		}
		if count++; count%32 == 0 {
			var m runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		}
		return nil
	})
	if err != nil || count != n {
		t.Fatalf("%d files, %v", count, err)
	}
	if peak > 16<<20 {
		t.Fatalf("%.1f MiB live while 128 MiB of support files were decoded", float64(peak)/(1<<20))
	}
}

// Each value of E4 has its budget: a support file's content and
// source_config_json Budgets.Active, anything else the value budget.
// Over it the reply fails, naming what and the budget; what the files'
// taker refuses fails it too, and nothing after it is decoded.
func TestActiveConfigBudgets(t *testing.T) {
	big := strings.Repeat("b", 3<<20)
	for _, tc := range []struct{ name, body, want string }{
		{"content", `{"data":{"support_files":[{"path":"big.crt","content":"` + big + `"}]}}`, `active config: reply holds support file "big.crt" over 2 MiB`},
		{"content first", `{"data":{"support_files":[{"content":"` + big + `","path":"big.crt"}]}}`, `active config: reply holds a support file over 2 MiB`},
		{"long path", `{"data":{"support_files":[{"path":"` + big + `","content":""}]}}`, `active config: reply holds a value over 1 MiB`},
		{"extra key", `{"data":{"support_files":[{"path":"a","content":"","x":"` + big + `"}]}}`, `active config: reply holds a value over 1 MiB`},
		{"source", `{"data":{"source_config_json":"` + big + `"}}`, `active config: reply holds source_config_json over 2 MiB`},
		{"unknown", `{"data":{"padding":"` + big + `"}}`, `active config: reply holds a value over 1 MiB`},
	} {
		c := server(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, tc.body) })
		c.Budgets = Budgets{Active: 2 << 20, Value: 1 << 20}
		var got []protocol.SupportFile
		_, err := c.ActiveConfig(context.Background(), collect(&got))
		if !errors.Is(err, ErrValueTooLarge) || !strings.Contains(err.Error(), tc.want) || len(got) != 0 {
			t.Errorf("%s: %d files, %v", tc.name, len(got), err)
		}
	}

	refused := errors.New("more than 2 support files")
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"data":{"support_files":[{"path":"1"},{"path":"2"},{"path":"3"},{"path":"4"}]}}`)
	})
	n := 0
	_, err := c.ActiveConfig(context.Background(), func(protocol.SupportFile) error {
		if n++; n > 2 {
			return refused
		}
		return nil
	})
	if !errors.Is(err, refused) || err.Error() != "active config: more than 2 support files" || n != 3 {
		t.Fatalf("after %d files: %v", n, err)
	}
}

// Hostile shapes of the support files fail the reply as other replies
// fail: an endless array at the wire cap (512 MiB), a nesting bomb as not
// JSON, a reply cut short in the middle of a file as cut short.
func TestSupportFilesHostile(t *testing.T) {
	var sent int64
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"data":{"support_files":[`)
		entry := []byte(`{"path":"x.crt","content":"` + strings.Repeat("e", 64<<10) + `"},`)
		for sent = 0; sent < 1<<30; {
			n, err := w.Write(entry)
			sent += int64(n)
			if err != nil {
				return
			}
		}
	})
	n := 0
	_, err := c.ActiveConfig(context.Background(), func(protocol.SupportFile) error { n++; return nil })
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "active config: reply exceeds 512 MiB") {
		t.Fatalf("1 GiB of support files: %v", err)
	}
	if n > (512<<20)/(64<<10) {
		t.Fatalf("%d files handed on past the cap", n)
	}

	bomb := strings.Repeat("[", 8<<20)
	for _, body := range []string{
		`{"data":{"support_files":[{"path":"a","x":` + bomb,
		`{"data":{"support_files":` + bomb,
		`{"data":{"support_files":[` + bomb,
	} {
		c := server(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := c.ActiveConfig(context.Background(), discard)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "active config: reply is not a JSON envelope") {
			t.Errorf("%.40s…: %v", body, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
			t.Errorf("%.40s…: %d bytes allocated", body, grew)
		}
	}

	c = server(t, func(w http.ResponseWriter, r *http.Request) {
		full := `{"data":{"version":"v1","checksum":"c","source_config_json":"{}","support_files":[{"path":"1.crt","content":"` + strings.Repeat("c", 256<<10) + `"}]}}`
		w.Header().Set("Content-Length", strconv.Itoa(len(full)))
		io.WriteString(w, full[:len(full)/2])
		w.(http.Flusher).Flush()
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	})
	var got []protocol.SupportFile
	if _, err := c.ActiveConfig(context.Background(), collect(&got)); err == nil || !strings.Contains(err.Error(), "active config: read reply: unexpected EOF") || len(got) != 0 {
		t.Fatalf("cut short: %d files, %v", len(got), err)
	}
}
