package agent

import (
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"openflare/agent/apply"
	"openflare/agent/protocol"
)

// Requests that arrive while an apply runs merge into one round: the
// newest target wins, a startup or force apply is never downgraded, a
// pushed target keeps its spread, and the other kinds of work accumulate.
// One wake-up covers them all.
func TestWorkQueueMerges(t *testing.T) {
	q := newWorkQueue()
	v1 := &protocol.ConfigRef{Version: "v1", Checksum: "c1"}
	v2 := &protocol.ConfigRef{Version: "v2", Checksum: "c2"}
	q.apply(v1, apply.Force, false)
	q.apply(v2, apply.Normal, true)
	q.add(func(w *work) { w.ensure = true })
	q.add(func(w *work) { w.reconcile = true })
	if len(q.box.Wake) != 1 {
		t.Fatalf("%d wake-ups queued, want 1", len(q.box.Wake))
	}
	w := q.take()
	if !w.apply || w.target != v2 || w.mode != apply.Force || !w.pushed || !w.ensure || !w.reconcile || w.restart {
		t.Fatalf("merged work %+v", w)
	}
	if w := q.take(); w != (work{}) {
		t.Fatalf("queue not emptied: %+v", w)
	}
	q.apply(nil, apply.Startup, false)
	q.apply(v1, apply.Normal, false)
	if w := q.take(); w.mode != apply.Startup || w.target != v1 || w.pushed {
		t.Fatalf("startup downgraded: %+v", w)
	}
}

// A server's heartbeat interval is kept within bounds, so a huge value
// cannot wrap into a tight loop of beats and a tiny one cannot flood.
func TestHeartbeatIntervalBounded(t *testing.T) {
	a := &Agent{log: slog.New(slog.DiscardHandler), work: newWorkQueue()}
	for ms, want := range map[int]time.Duration{
		math.MaxInt: time.Hour,
		1:           250 * time.Millisecond,
		3000:        3 * time.Second,
	} {
		a.onSettings(protocol.AgentSettings{HeartbeatInterval: ms})
		if got := a.heartbeatInterval(); got != want {
			t.Errorf("%d ms → %v, want %v", ms, got, want)
		}
	}
}

func TestUsableToken(t *testing.T) {
	for tok, want := range map[string]bool{
		"0123456789abcdef0123456789abcdef": true,
		"":                                 false,
		"abc\r\nX-Evil: 1":                 false,
		"with space":                       false,
		strings.Repeat("a", 257):           false,
	} {
		if usableToken(tok) != want {
			t.Errorf("%q: %v", tok, !want)
		}
	}
}
