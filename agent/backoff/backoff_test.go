package backoff

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestGrowsCapsAndJitters(t *testing.T) {
	b := &Backoff{Min: time.Second, Max: 30 * time.Second}
	var prevCeil time.Duration
	distinct := map[time.Duration]bool{}
	for i := 0; i < 12; i++ {
		ceil := time.Second << i
		if ceil > 30*time.Second {
			ceil = 30 * time.Second
		}
		d := b.Next()
		if d < ceil/2 || d > ceil {
			t.Fatalf("attempt %d: %v outside [%v, %v]", i, d, ceil/2, ceil)
		}
		if ceil < prevCeil {
			t.Fatalf("ceiling shrank")
		}
		prevCeil = ceil
		distinct[d] = true
	}
	if len(distinct) < 6 {
		t.Fatalf("delays not jittered: %v", distinct)
	}
	b.Reset()
	if d := b.Next(); d > time.Second {
		t.Fatalf("after reset: %v", d)
	}
}

// Two agents that fail together spread out instead of retrying in lockstep.
func TestFleetSpreads(t *testing.T) {
	same := 0
	for i := 0; i < 100; i++ {
		a := &Backoff{Min: time.Second, Max: 30 * time.Second}
		b := &Backoff{Min: time.Second, Max: 30 * time.Second}
		a.Next()
		b.Next()
		if a.Next() == b.Next() {
			same++
		}
	}
	if same > 5 {
		t.Fatalf("%d/100 identical delays", same)
	}
}

// Min equal to Max is a steady pace: every delay within [Max/2, Max],
// 3/4·Max on average, never growing.
func TestSteadyPace(t *testing.T) {
	b := &Backoff{Min: 4 * time.Second, Max: 4 * time.Second}
	var sum time.Duration
	const n = 10000
	for range n {
		d := b.Next()
		if d < 2*time.Second || d > 4*time.Second {
			t.Fatalf("delay %v outside [2s, 4s]", d)
		}
		sum += d
	}
	if mean := sum / n; mean < 2900*time.Millisecond || mean > 3100*time.Millisecond {
		t.Fatalf("mean delay %v, want 3 s", mean)
	}
}

// Sleep waits the whole delay and says to go on, or returns as soon as
// its context ends and says to stop.
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !Sleep(t.Context(), 3*time.Second) || time.Since(start) != 3*time.Second {
			t.Fatalf("Sleep(3s) returned after %v", time.Since(start))
		}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		start = time.Now()
		if Sleep(ctx, time.Hour) || time.Since(start) != time.Second {
			t.Fatalf("Sleep cancelled after 1s returned go-on or after %v", time.Since(start))
		}
	})
}

// A delay too short to halve is handed out as it is, and counted.
func TestTinyDelays(t *testing.T) {
	b := &Backoff{Max: 1}
	for i := range 3 {
		if d := b.Next(); d > 1 {
			t.Fatalf("attempt %d: %v, want at most 1ns", i, d)
		}
	}
	if b.Attempts() != 3 {
		t.Fatalf("%d attempts counted, want 3", b.Attempts())
	}
}
