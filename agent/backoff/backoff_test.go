package backoff

import (
	"testing"
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
