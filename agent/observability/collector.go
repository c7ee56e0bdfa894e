// Package observability produces the observability parts of a heartbeat
// (PROTOCOL 2.1, 12): host metrics and profile from /proc, OpenResty edge
// health from the loopback health check, new access-log lines, and the
// offline buffer of readings from beats the server never acknowledged.
//
// Only facts leave the agent: counters and instant readings. Aggregates
// (unique visitors, top-N) are the server's business.
package observability

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"openflare/agent/protocol"
	"openflare/internal/atomicfile"
	"openflare/internal/linux"
)

const (
	defaultMaxLines      = 2000
	defaultReplayMinutes = 60
)

// Options configure a Collector. The paths come from agent.json.
type Options struct {
	AccessLogPath  string // the log nginx writes in the openflare_json format
	StateFile      string // the Collector's own state: log cursor, profile fingerprint
	BufferPath     string // observability_buffer_path
	DataDir        string // its filesystem is reported as storage
	MainConfigPath string // no health check while this file does not exist

	ObservabilityPort int   // loopback port of the OpenResty observability server
	ReplayMinutes     int   // buffered windows older than this are dropped (default 60)
	BufferCap         int64 // bytes of the offline buffer file (default 8 MiB)
	MaxLines          int   // access-log lines per beat (default 2000)

	FS         linux.FS         // default linux.Default(); tests point it at fixture trees
	Now        func() time.Time // default time.Now
	HTTPClient *http.Client     // for the loopback health check
	Log        *slog.Logger
}

// Report is the observability part of one beat.
type Report struct {
	Profile     *protocol.Profile // nil unless the host profile changed since it was last acknowledged
	HostMetrics *protocol.HostMetrics
	// EdgeHealth.Status is the health check's result, or the last one
	// while no check runs; the server overrides it with the top-level
	// status anyway.
	EdgeHealth *protocol.EdgeHealth
	AccessLogs []protocol.AccessLog
	Buffered   []protocol.BufferedWindow
	// Events are the Collector's own (buffer trimmed, access log lost);
	// the agent adds openresty_unhealthy and sync_error itself.
	Events []protocol.HealthEvent
	// Status and Message are the OpenResty status after the health check;
	// an empty Status means no check ran (no main config yet): keep the
	// current one. PROTOCOL 12.3 stores an unhealthy check's message only
	// when the current message is empty; that rule is the agent's, which
	// owns the message.
	Status, Message string
	// Unparsable counts the access-log lines this beat consumed but could
	// not parse (skipped, as PROTOCOL 12.1 says).
	Unparsable int
	// More is set when the per-beat line or byte cap left lines waiting in
	// the log: after a success the agent may beat again without waiting a
	// full interval, so a busy node catches up after an outage.
	More bool

	seq         uint64
	cursor      Cursor
	fingerprint string
}

// persisted is the StateFile.
type persisted struct {
	Cursor             Cursor `json:"cursor"`
	ProfileFingerprint string `json:"profile_fingerprint,omitempty"`
}

// Collector gathers the observability part of each beat and remembers what
// the server has acknowledged.
type Collector struct {
	mu        sync.Mutex
	o         Options
	log       *slog.Logger
	saved     persisted // as last written to StateFile
	tail      *tailer
	buf       *offlineBuffer
	host      *hostSampler
	health    *healthCheck
	lastState string // last checked OpenResty status, for EdgeHealth between checks
	seq       uint64 // of the latest Report
	resolved  uint64 // seq of the latest Report acknowledged or failed
	// reported is the file of saved.Cursor, for ReportedFile: the log
	// rotation asks every second and must not wait on mu, which Collect
	// holds across the loopback health check.
	reported atomic.Pointer[fileID]
}

// New loads the Collector's state and offline buffer. A file that cannot be
// parsed is moved aside and started afresh; other I/O errors are returned,
// since starting over would send the whole access log again.
func New(o Options) (*Collector, error) {
	for name, v := range map[string]string{
		"access log path": o.AccessLogPath, "state file": o.StateFile, "buffer path": o.BufferPath,
		"data dir": o.DataDir, "main config path": o.MainConfigPath,
	} {
		if v == "" {
			return nil, fmt.Errorf("observability: %s not set", name)
		}
	}
	if o.ObservabilityPort < 1 || o.ObservabilityPort > 65535 {
		return nil, fmt.Errorf("observability: port %d out of range", o.ObservabilityPort)
	}
	if o.ReplayMinutes <= 0 {
		o.ReplayMinutes = defaultReplayMinutes
	}
	if o.BufferCap <= 0 {
		o.BufferCap = defaultBufferCap
	}
	if o.MaxLines <= 0 {
		o.MaxLines = defaultMaxLines
	}
	if o.FS == (linux.FS{}) {
		o.FS = linux.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}

	c := &Collector{o: o, log: o.Log, lastState: protocol.StatusUnknown}
	if err := atomicfile.LoadJSON(o.StateFile, &c.saved, o.Log); err != nil {
		return nil, fmt.Errorf("observability: load state: %w", err)
	}
	buf, err := loadBuffer(o.BufferPath, o.BufferCap, o.ReplayMinutes, o.Log)
	if err != nil {
		return nil, fmt.Errorf("observability: %w", err)
	}
	c.buf = buf
	c.tail = newTailer(o.AccessLogPath, c.saved.Cursor, o.Log)
	c.setReported()
	c.host = newHostSampler(o.FS, o.DataDir, o.Log)
	c.health = newHealthCheck(o.HTTPClient, o.ObservabilityPort, o.MainConfigPath)
	return c, nil
}

// Collect gathers one beat. It never fails the beat: problems become health
// events, log lines or zero readings. The health check takes at most 1.5 s.
func (c *Collector) Collect(ctx context.Context) *Report {
	c.mu.Lock()
	defer c.mu.Unlock()

	hr := c.health.check(ctx)
	now := c.o.Now()
	if hr.checked {
		c.lastState = hr.status
	}
	hm, profile := c.host.sample(now)
	b := c.tail.next(c.o.MaxLines)
	for i := range b.events {
		b.events[i].TriggeredAtUnix = now.Unix()
	}
	if b.unparsable > 0 {
		// Debug only: a log in a foreign format would repeat this on every
		// beat. The count is in the Report for the agent to surface.
		c.log.Debug("skipped unparsable access-log lines", "path", c.o.AccessLogPath, "count", b.unparsable)
	}

	c.seq++
	r := &Report{
		HostMetrics: hm,
		EdgeHealth: &protocol.EdgeHealth{
			CapturedAtUnix: now.Unix(),
			Status:         c.lastState,
			Message:        hr.msg,
			Connections:    hr.connections,
		},
		AccessLogs: b.lines,
		Buffered:   c.buf.replay(now.Unix()),
		Events:     append(b.events, c.buf.events...),
		Status:     hr.status,
		Message:    hr.msg,
		Unparsable: b.unparsable,
		More:       b.more,
		seq:        c.seq,
		cursor:     b.cursor,
	}
	if fp := fingerprint(*profile); fp != c.saved.ProfileFingerprint {
		r.Profile, r.fingerprint = profile, fp
	}
	return r
}

// Ack records that the server accepted the beat of r: the log cursor moves
// past its lines, its replayed windows are forgotten and its profile is
// remembered. The cursor is written first, to keep the window in which a
// crash would resend acknowledged lines as short as possible.
func (c *Collector) Ack(r *Report) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.claim(r) {
		return
	}
	next := c.saved
	next.Cursor = r.cursor
	if r.Profile != nil {
		next.ProfileFingerprint = r.fingerprint
	}
	c.tail.commit(r.cursor)
	if next != c.saved {
		if err := atomicfile.SaveJSON(c.o.StateFile, next); err != nil {
			// The tailer goes on from the new position in memory; the
			// next Ack writes again, and only a restart before that
			// resends the lines.
			c.log.Warn("save observability state", "path", c.o.StateFile, "err", err)
		} else {
			c.saved = next
			c.setReported()
		}
	}
	c.buf.acked(r.Buffered, c.o.Now().Unix())
}

// ReportedFile is the identity (device and inode) of the access-log file
// the last line the server acknowledged is in, as saved for the next start:
// the files rotated before it hold nothing the tailer will still read,
// while it and the files after it may. ok is false before a first
// acknowledgement: the tailer then reads the file at the path from its
// start, and no rotated file at all.
func (c *Collector) ReportedFile() (dev, ino uint64, ok bool) {
	id := c.reported.Load()
	if id == nil {
		return 0, 0, false
	}
	return id.dev, id.ino, true
}

func (c *Collector) setReported() {
	if id := c.saved.Cursor.id(); !id.zero() {
		c.reported.Store(&id)
	} else {
		c.reported.Store(nil)
	}
}

// Nack records that the beat of r failed: its readings are kept in the
// offline buffer for a later beat. Its access-log lines need nothing: the
// cursor did not move, so they are read again.
func (c *Collector) Nack(r *Report) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.claim(r) {
		return
	}
	c.buf.failed(r.HostMetrics.CapturedAtUnix, r.HostMetrics, r.EdgeHealth, c.o.Now().Unix())
}

// claim accepts each Report once, and only the latest: an older one's
// cursor could move the log position backwards.
func (c *Collector) claim(r *Report) bool {
	if r == nil || r.seq != c.seq || r.seq == c.resolved {
		c.log.Warn("observability report ignored: stale or already resolved")
		return false
	}
	c.resolved = r.seq
	return true
}

// Close releases the open log files and the health check's connections.
func (c *Collector) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tail.close()
	c.health.close()
}
