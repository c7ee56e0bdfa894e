// Package backoff is the one retry-delay helper every loop shares: capped
// exponential growth with jitter, so a fleet of agents that lost the server at
// the same moment does not come back in lockstep.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff yields growing, jittered delays between Min and Max. With Min
// equal to Max it is a steady pace: uniform over [Max/2, Max], 3/4·Max on
// average, so a retry never comes sooner than Max/2 nor later than Max.
type Backoff struct {
	Min, Max time.Duration
	attempt  int
}

// Next returns the delay before the next attempt: Min·2^n capped at Max,
// then spread uniformly over [d/2, d] ("equal jitter").
func (b *Backoff) Next() time.Duration {
	d := b.Min
	for i := 0; i < b.attempt && d < b.Max; i++ {
		d *= 2
	}
	if d > b.Max {
		d = b.Max
	}
	b.attempt++
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// Attempts returns how many delays were handed out since the last Reset.
func (b *Backoff) Attempts() int { return b.attempt }

// Reset starts over from Min, after a success.
func (b *Backoff) Reset() { b.attempt = 0 }

// Sleep waits d or until ctx ends, and reports whether to go on.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
