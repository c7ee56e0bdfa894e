// Package stall ends a transfer that stops making progress rather than one
// that takes long: a 70 MiB GeoIP database, a 100 MiB Pages package or a
// new agent binary over a router's slow uplink must get through, while a
// dead connection must not hold its loop forever.
package stall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrStalled is wrapped by the cause of a context a Watchdog cancelled.
var ErrStalled = errors.New("transfer stalled")

// Watchdog cancels its context when no progress was made for its period.
type Watchdog struct {
	period time.Duration
	timer  *time.Timer
	cancel context.CancelCauseFunc
}

// Watch returns a context derived from parent and its watchdog: the context
// is cancelled, with a cause wrapping ErrStalled, once period passes
// without progress. Progress is a read through Reader that returns bytes;
// the wait for the response headers counts as no progress. Stop ends the
// watch.
func Watch(parent context.Context, period time.Duration) (context.Context, *Watchdog) {
	ctx, cancel := context.WithCancelCause(parent)
	w := &Watchdog{period: period, cancel: cancel}
	w.timer = time.AfterFunc(period, func() {
		cancel(fmt.Errorf("%w: nothing received for %v", ErrStalled, period))
	})
	return ctx, w
}

// Reader returns r, each of whose reads that brings bytes puts the
// deadline back by the whole period.
func (w *Watchdog) Reader(r io.Reader) io.Reader { return &progress{r: r, w: w} }

// Stop ends the watch and releases the context, which is done with.
func (w *Watchdog) Stop() {
	w.timer.Stop()
	w.cancel(nil)
}

type progress struct {
	r io.Reader
	w *Watchdog
}

func (p *progress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.w.timer.Reset(p.w.period)
	}
	return n, err
}

// Cause returns why ctx ended when that says more than err, which a
// transport reports as a bare "context canceled": a stall, a deadline with
// a cause. Otherwise it returns err.
func Cause(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		return c
	}
	return err
}
