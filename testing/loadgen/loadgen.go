// Package loadgen drives HTTP traffic through nginx while the agent applies
// versions, and counts what a client would have seen go wrong: answers
// other than 2xx, connections reset under a request, and bodies cut short.
//
// Requests go over raw keep-alive connections rather than net/http's
// client, whose transport silently retries a request that fails on a
// reused connection: here such a failure is seen. It is counted apart
// (Retried) only in the one case HTTP allows a client to retry on its own
// (RFC 9112 9.3.1): the server closed an idle keep-alive connection just
// as the request went out, and not a byte of an answer came back.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options describe the traffic.
type Options struct {
	// Addr is nginx's host:port; Host the site's name.
	Addr, Host string
	// Path is fetched at Rate requests per second in all, spread over Conns
	// keep-alive connections.
	Path  string
	Rate  int
	Conns int
	// Download is fetched again and again by Downloads clients at a time,
	// each answer checked to be DownloadSize bytes: slow transfers still
	// running when a reload comes.
	Download     string
	DownloadSize int64
	Downloads    int
}

// Result is what the clients saw.
type Result struct {
	Requests  int64 // answers read in full
	Failed    int64 // non-2xx answers, resets, timeouts
	Truncated int64 // bodies shorter than announced
	Retried   int64 // idle connections closed by the server as a request went out, retried
	Downloads int64 // complete downloads
	Errors    []string
}

// OK reports whether nothing failed.
func (r *Result) OK() bool { return r.Failed == 0 && r.Truncated == 0 }

func (r *Result) String() string {
	return fmt.Sprintf("%d requests, %d failed, %d truncated, %d retried after an idle close, %d downloads of the large file; first errors: %v",
		r.Requests, r.Failed, r.Truncated, r.Retried, r.Downloads, r.Errors)
}

// Load is traffic in progress.
type Load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	res    Result
}

// Start starts the traffic; Stop ends it and returns what was seen.
func Start(ctx context.Context, o Options) *Load {
	ctx, cancel := context.WithCancel(ctx)
	l := &Load{cancel: cancel}
	conns := max(o.Conns, 1)
	every := time.Duration(float64(time.Second) * float64(conns) / float64(max(o.Rate, 1)))
	for i := 0; i < conns; i++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.keepAlive(ctx, o, every)
		}()
	}
	for i := 0; i < o.Downloads; i++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.download(ctx, o)
		}()
	}
	return l
}

// Stop ends the traffic, waits for every client, and returns the result.
func (l *Load) Stop() Result {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.res
}

func (l *Load) count(f func(r *Result)) {
	l.mu.Lock()
	f(&l.res)
	l.mu.Unlock()
}

func (l *Load) fail(truncated bool, format string, args ...any) {
	l.count(func(r *Result) {
		if truncated {
			r.Truncated++
		} else {
			r.Failed++
		}
		if len(r.Errors) < 5 {
			r.Errors = append(r.Errors, fmt.Sprintf(format, args...))
		}
	})
}

// conn is one keep-alive connection.
type conn struct {
	c    net.Conn
	br   *bufio.Reader
	read *countingReader
	used bool // an answer was read on it: it is a reused connection now
}

// countingReader counts the bytes the connection delivered, to tell a
// close before any answer from one in the middle of it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (l *Load) keepAlive(ctx context.Context, o Options, every time.Duration) {
	var c *conn
	defer func() {
		if c != nil {
			c.c.Close()
		}
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if c != nil && closedWhileIdle(c) {
			// Seen before sending, as any client sees it: not a failure.
			c.c.Close()
			c = nil
		}
		var err error
		if c == nil {
			if c, err = dial(o.Addr); err != nil {
				l.fail(false, "dial: %v", err)
				continue
			}
		}
		a, err := request(c, o.Host, o.Path)
		var idle *idleClose
		if errors.As(err, &idle) {
			l.count(func(r *Result) { r.Retried++ })
			c.c.Close()
			if c, err = dial(o.Addr); err != nil {
				l.fail(false, "dial: %v", err)
				continue
			}
			a, err = request(c, o.Host, o.Path)
		}
		switch {
		case err != nil:
			l.fail(a.n > 0, "GET %s: %v", o.Path, err)
		case a.want >= 0 && a.n != a.want:
			l.fail(true, "GET %s: %d of %d bytes", o.Path, a.n, a.want)
		case a.status/100 != 2:
			l.fail(false, "GET %s: status %d", o.Path, a.status)
		default:
			l.count(func(r *Result) { r.Requests++ })
		}
		if err != nil || a.close {
			// A failed connection is not reused; a close the server
			// announced is a graceful end.
			c.c.Close()
			c = nil
		}
	}
}

// idleClose is a request that got not a byte back on a reused connection.
type idleClose struct{ err error }

func (e *idleClose) Error() string { return "idle connection closed: " + e.err.Error() }

func dial(addr string) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	cr := &countingReader{r: c}
	return &conn{c: c, br: bufio.NewReader(cr), read: cr}, nil
}

// closedWhileIdle peeks at an idle connection: a close from the server is
// already there to read.
func closedWhileIdle(c *conn) bool {
	c.c.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := c.br.Peek(1)
	c.c.SetReadDeadline(time.Time{})
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// answer is what one request got.
type answer struct {
	status int
	n      int64 // body bytes read
	want   int64 // announced length, -1 when none
	close  bool  // the server announced it closes the connection
}

// request sends one GET and reads the whole answer.
func request(c *conn, host, path string) (answer, error) {
	a := answer{want: -1}
	before := c.read.n
	c.c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.c.SetDeadline(time.Time{})
	if _, err := fmt.Fprintf(c.c, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: openflare-loadgen\r\n\r\n", path, host); err != nil {
		return a, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		// http.ReadResponse calls a close before the status line an
		// unexpected EOF: what counts is that not a byte came back.
		if c.used && c.read.n == before && c.br.Buffered() == 0 &&
			(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
			return a, &idleClose{err}
		}
		return a, err
	}
	a.status, a.want, a.close = resp.StatusCode, resp.ContentLength, resp.Close
	a.n, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.used = true
	if err != nil {
		return a, fmt.Errorf("body after %d bytes: %w", a.n, err)
	}
	return a, nil
}

func (l *Load) download(ctx context.Context, o Options) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+o.Addr+o.Download, nil)
		req.Host = o.Host
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				l.fail(false, "GET %s: %v", o.Download, err)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case ctx.Err() != nil:
			// Stopped mid-transfer by the test, not by nginx.
		case err != nil || n != o.DownloadSize:
			l.fail(true, "GET %s: %d of %d bytes (%v)", o.Download, n, o.DownloadSize, err)
		case resp.StatusCode/100 != 2:
			l.fail(false, "GET %s: status %d", o.Download, resp.StatusCode)
		default:
			l.count(func(r *Result) { r.Downloads++ })
		}
	}
}

// DownloadSize is the large object Origin serves.
const DownloadSize = 5 << 20

// Origin is a backend for applies under load: "gen <N>" for a path under
// /gen<N>, and DownloadSize bytes sent over about a second and a half for
// a path ending in "big", so downloads are in flight when reloads come.
func Origin() http.Handler {
	chunk := bytes.Repeat([]byte{'x'}, 64<<10)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "big") {
			w.Header().Set("Content-Length", strconv.Itoa(DownloadSize))
			for sent := 0; sent < DownloadSize; sent += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
			}
			return
		}
		gen, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/gen"), "/")
		fmt.Fprintf(w, "gen %s", gen)
	})
}
