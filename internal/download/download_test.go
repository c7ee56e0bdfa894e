package download

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"openflare/internal/stall"
)

// Each way a server can get a body's length wrong is refused by name and
// matches ErrSize; a stall is not a length error; a good body arrives
// whole; another status is the caller's, whatever its length.
func TestBounds(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 100)
	cases := []struct {
		name  string
		mode  string // "": Content-Length, "chunked", "short" (announces all, sends half), "stall"
		lim   Limits
		want  string // "" for success
		size  bool   // the error matches ErrSize
		fails string // "get" when Get refuses, else Copy
	}{
		{"whole", "", Limits{Max: 100, Want: 100}, "", false, ""},
		{"whole chunked", "chunked", Limits{Max: 100}, "", false, ""},
		{"announced over the cap", "", Limits{Max: 99}, "100 bytes announced, the cap is 99", true, "get"},
		{"announced over the expected size", "", Limits{Max: 200, Want: 90}, "Content-Length 100, over the announced 90 bytes", true, "get"},
		{"announced short of the expected size", "", Limits{Max: 200, Want: 110}, "Content-Length 100, short of the announced 110 bytes", true, "get"},
		{"chunked over the cap", "chunked", Limits{Max: 99}, "larger than the cap of 99 bytes", true, "copy"},
		{"chunked other than expected", "chunked", Limits{Max: 200, Want: 110}, "100 bytes, not the announced 110", true, "copy"},
		{"cut short", "short", Limits{Max: 100}, "truncated download after 50 bytes", true, "copy"},
		{"stalled", "stall", Limits{Max: 100, Stall: 100 * time.Millisecond}, "stalled: nothing received", false, "copy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if c.mode != "chunked" {
					w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				}
				switch c.mode {
				case "short", "stall":
					w.Write(body[:50])
					w.(http.Flusher).Flush()
					if c.mode == "stall" {
						<-r.Context().Done()
					}
				case "chunked":
					w.Write(body[:50])
					w.(http.Flusher).Flush()
					w.Write(body[50:])
				default:
					w.Write(body)
				}
			}))
			defer srv.Close()
			if c.lim.Stall == 0 {
				c.lim.Stall = 5 * time.Second
			}
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			tr, err := Get(srv.Client(), req, c.lim)
			if err == nil {
				if c.fails == "get" {
					tr.Close()
					t.Fatal("Get accepted the announced length")
				}
				_, err = tr.Copy(&got)
				tr.Close()
			} else if c.fails != "get" {
				t.Fatalf("Get: %v", err)
			}
			switch {
			case c.want == "" && (err != nil || !bytes.Equal(got.Bytes(), body)):
				t.Fatalf("%d bytes: %v", got.Len(), err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want %q", err, c.want)
			case err != nil && errors.Is(err, ErrSize) != c.size:
				t.Fatalf("error %v: matches ErrSize %v, want %v", err, errors.Is(err, ErrSize), c.size)
			case c.mode == "stall" && !errors.Is(err, stall.ErrStalled):
				t.Fatalf("error %v does not match stall.ErrStalled", err)
			}
		})
	}
}

// A status other than 200 reaches the caller with its body, even one
// longer than the cap: its length says nothing of the download's.
func TestOtherStatusHandedOn(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such package, and a long explanation of why", http.StatusNotFound)
	}))
	defer srv.Close()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
	tr, err := Get(srv.Client(), req, Limits{Max: 1, Want: 1, Stall: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if tr.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d", tr.StatusCode)
	}
}
