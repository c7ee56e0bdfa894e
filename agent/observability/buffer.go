package observability

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"

	"openflare/agent/protocol"
	"openflare/internal/atomicfile"
)

const (
	defaultBufferCap = 8 << 20
	// maxReplayWindows bounds the buffered windows one beat carries, so a
	// long outage with a large replay setting is drained over several
	// beats instead of one huge request.
	maxReplayWindows = 120
	windowSeconds    = 60
)

// offlineBuffer keeps the host_metrics and edge_health of beats the server
// never acknowledged, one reading per minute window, in a file that
// survives restarts. Access logs are not kept here: they stay in the nginx
// log until acknowledged, so an outage costs no flash writes for them.
type offlineBuffer struct {
	path          string
	capBytes      int64
	replaySeconds int64
	log           *slog.Logger

	windows []protocol.BufferedWindow // oldest first, one per window start
	// dirty: windows expired in memory since the file was written. Not
	// worth a write of its own; the next write carries it.
	dirty bool
	// events are raised by trimming and reported until a beat carrying
	// them is acknowledged.
	events []protocol.HealthEvent
}

func loadBuffer(path string, capBytes int64, replayMinutes int, log *slog.Logger) (*offlineBuffer, error) {
	b := &offlineBuffer{path: path, capBytes: capBytes, replaySeconds: int64(replayMinutes) * 60, log: log}
	var ws []protocol.BufferedWindow
	if err := atomicfile.LoadJSON(path, &ws, log); err != nil {
		return nil, fmt.Errorf("load observability buffer: %w", err)
	}
	for _, w := range ws {
		if w.HostMetrics != nil || w.EdgeHealth != nil {
			b.upsert(w.CapturedAtUnix, w.HostMetrics, w.EdgeHealth)
		}
	}
	return b, nil
}

// windowStart is floor(t/60)*60, also for times before 1970.
func windowStart(t int64) int64 {
	s := t - t%windowSeconds
	if s > t {
		s -= windowSeconds
	}
	return s
}

// upsert stores the readings as the window's: a later failed beat in the
// same minute replaces an earlier one, one reading per minute being enough.
func (b *offlineBuffer) upsert(start int64, hm *protocol.HostMetrics, eh *protocol.EdgeHealth) {
	start = windowStart(start)
	i, found := b.find(start)
	w := protocol.BufferedWindow{CapturedAtUnix: start, HostMetrics: hm, EdgeHealth: eh}
	if !found {
		b.windows = append(b.windows, protocol.BufferedWindow{})
		copy(b.windows[i+1:], b.windows[i:])
	}
	b.windows[i] = w
}

// The windows are kept sorted by hand rather than with the slices
// package: its generic functions, instantiated for this struct, cost the
// binary 4 KiB.

// find is the index of the window captured at t, or where it belongs.
func (b *offlineBuffer) find(t int64) (int, bool) {
	i := sort.Search(len(b.windows), func(i int) bool { return b.windows[i].CapturedAtUnix >= t })
	return i, i < len(b.windows) && b.windows[i].CapturedAtUnix == t
}

// drop removes windows [i, j), leaving no reading referenced past the end.
func (b *offlineBuffer) drop(i, j int) {
	n := copy(b.windows[i:], b.windows[j:])
	clear(b.windows[i+n:])
	b.windows = b.windows[:i+n]
}

// expire drops windows older than the replay horizon.
func (b *offlineBuffer) expire(now int64) {
	cut := now - b.replaySeconds
	n := 0
	for n < len(b.windows) && b.windows[n].CapturedAtUnix < cut {
		n++
	}
	if n > 0 {
		b.drop(0, n)
		b.dirty = true
	}
}

// replay returns the windows to replay in the next beat, oldest first.
// The readings are shared, not copied: nothing modifies them in place.
func (b *offlineBuffer) replay(now int64) []protocol.BufferedWindow {
	b.expire(now)
	return append([]protocol.BufferedWindow(nil), b.windows[:min(len(b.windows), maxReplayWindows)]...)
}

// failed buffers a failed beat's readings and writes the file.
func (b *offlineBuffer) failed(captured int64, hm *protocol.HostMetrics, eh *protocol.EdgeHealth, now int64) {
	b.upsert(captured, hm, eh)
	b.expire(now)
	b.save(now)
}

// acked removes the windows a successful beat carried.
func (b *offlineBuffer) acked(sent []protocol.BufferedWindow, now int64) {
	b.events = nil
	changed := false
	for _, s := range sent {
		if i, found := b.find(s.CapturedAtUnix); found {
			b.drop(i, i+1)
			changed = true
		}
	}
	if changed || b.dirty {
		b.save(now)
	}
}

// save writes the buffer, first dropping the oldest windows while the file
// would exceed its cap. A write error is logged and the buffer kept in
// memory: the next write retries.
func (b *offlineBuffer) save(now int64) {
	data, err := b.encodeCapped(now)
	if err != nil {
		b.log.Warn("encode observability buffer", "path", b.path, "err", err)
		return
	}
	if err := atomicfile.WriteFile(b.path, data, atomicfile.PrivateFile); err != nil {
		b.log.Warn("write observability buffer", "path", b.path, "err", err)
		return
	}
	b.dirty = false
}

func (b *offlineBuffer) encodeCapped(now int64) ([]byte, error) {
	dropped := 0
	for {
		data, err := json.Marshal(b.windows)
		if err != nil {
			return nil, err
		}
		excess := int64(len(data)) - b.capBytes
		if excess <= 0 || len(b.windows) == 0 {
			if dropped > 0 {
				b.trimmed(dropped, now)
			}
			return append(data, '\n'), nil
		}
		// Drop about as many windows as the excess holds, at least one,
		// so a large overflow does not cost one encoding per window.
		per := max(int64(len(data))/int64(len(b.windows)), 1)
		n := int(min((excess+per-1)/per, int64(len(b.windows))))
		b.drop(0, n)
		dropped += n
	}
}

func (b *offlineBuffer) trimmed(n int, now int64) {
	msg := fmt.Sprintf("observability buffer %s exceeded %d bytes; dropped the %d oldest minute windows", b.path, b.capBytes, n)
	b.log.Warn("observability buffer trimmed", "path", b.path, "cap_bytes", b.capBytes, "dropped_windows", n)
	b.events = append(b.events, protocol.HealthEvent{
		EventType:       protocol.EventObservabilityTrimmed,
		Severity:        protocol.SeverityWarning,
		Message:         msg,
		TriggeredAtUnix: now,
		Metadata:        map[string]string{"dropped_windows": fmt.Sprint(n)},
	})
}
