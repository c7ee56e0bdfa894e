package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// front stands between the agents and the control plane, as a load
// balancer's port would: it counts every connection attempt (a stopped
// server cannot count those it refuses) and the bytes each way. While down
// it resets each connection the moment it is accepted, as the host of a
// stopped server refuses it: the agent sees the same immediate failure.
type front struct {
	ln      net.Listener
	backend string

	mu      sync.Mutex
	down    bool
	open    map[net.Conn]struct{}
	accepts []time.Time

	toServer, toAgents atomic.Int64 // bytes
	conns              sync.WaitGroup
}

func newFront(backend string) (*front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &front{ln: ln, backend: backend, open: map[net.Conn]struct{}{}}
	f.conns.Go(f.serve)
	return f, nil
}

// URL is what the agents are given as server_url.
func (f *front) URL() string { return "http://" + f.ln.Addr().String() }

func (f *front) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.accepts = append(f.accepts, time.Now())
		down := f.down
		f.mu.Unlock()
		if down {
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
			continue
		}
		f.conns.Go(func() { f.relay(c) })
	}
}

// relay copies both ways until either side closes, then closes both.
func (f *front) relay(agent net.Conn) {
	server, err := net.Dial("tcp", f.backend)
	if err != nil {
		agent.Close()
		return
	}
	if !f.track(agent, server) {
		agent.Close()
		server.Close()
		return
	}
	var up sync.WaitGroup
	up.Go(func() { copyCounted(server, agent, &f.toServer) })
	copyCounted(agent, server, &f.toAgents)
	up.Wait()
	f.mu.Lock()
	delete(f.open, agent)
	delete(f.open, server)
	f.mu.Unlock()
}

// track records a live pair, unless the front went down meanwhile.
func (f *front) track(conns ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return false
	}
	for _, c := range conns {
		f.open[c] = struct{}{}
	}
	return true
}

func copyCounted(dst, src net.Conn, n *atomic.Int64) {
	io.Copy(counting{dst, n}, src)
	dst.Close()
	src.Close()
}

type counting struct {
	net.Conn
	n *atomic.Int64
}

func (c counting) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// setDown(true) cuts every relayed connection and resets new ones;
// setDown(false) relays again.
func (f *front) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	var cut []net.Conn
	if down {
		for c := range f.open {
			cut = append(cut, c)
		}
		clear(f.open)
	}
	f.mu.Unlock()
	for _, c := range cut {
		c.Close()
	}
}

// acceptsIn is the connection attempts in [from, to).
func (f *front) acceptsIn(from, to time.Time) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []time.Time
	for _, t := range f.accepts {
		if !t.Before(from) && t.Before(to) {
			out = append(out, t)
		}
	}
	return out
}

func (f *front) close() {
	f.ln.Close()
	f.setDown(true)
	f.conns.Wait()
}

// requests keeps the start of every HTTP request the control plane
// served, by path, from the one log line it writes per request.
type requests struct {
	mu   sync.Mutex
	seen map[string][]time.Time
}

func (r *requests) Enabled(context.Context, slog.Level) bool { return true }
func (r *requests) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *requests) WithGroup(string) slog.Handler            { return r }

func (r *requests) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "request" {
		return nil
	}
	var path string
	var took time.Duration
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "path":
			path = a.Value.String()
		case "duration":
			took = a.Value.Duration()
		}
		return true
	})
	r.mu.Lock()
	r.seen[path] = append(r.seen[path], rec.Time.Add(-took))
	r.mu.Unlock()
	return nil
}

// since is the requests to path that started at or after t.
func (r *requests) since(path string, t time.Time) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, s := range r.seen[path] {
		if !s.Before(t) {
			out = append(out, s)
		}
	}
	return out
}

// countIn is the requests to any path but except started in [from, to).
func (r *requests) countIn(from, to time.Time, except string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for path, list := range r.seen {
		if path == except {
			continue
		}
		for _, s := range list {
			if !s.Before(from) && s.Before(to) {
				n++
			}
		}
	}
	return n
}
