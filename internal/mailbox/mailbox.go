// Package mailbox is the one "newest request wins, plus a wake-up" queue
// of the agent's loops. A loop that takes seconds or minutes per round (an
// apply, a Pages download, a self-update check, a geo snapshot build) is
// handed requests by callers that must not wait for it: each request is
// merged into the one already waiting, under the box's lock, so that the
// loop sees only the newest, and one wake-up stands for all of them.
package mailbox

import "sync"

// Wake tells a loop that a request waits. A send never blocks: one
// pending wake-up is enough, since the loop takes every request merged.
// A Wake is a channel, so a loop selects on it directly.
type Wake chan struct{}

// NewWake returns a wake-up with room for the one pending signal.
func NewWake() Wake { return make(Wake, 1) }

// Notify wakes the loop, or leaves the pending wake-up as it is.
func (w Wake) Notify() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// Box guards a loop's waiting request, which its owner keeps beside the
// box and touches only in Do or Post, and holds the loop's wake-up.
type Box struct {
	mu   sync.Mutex
	Wake Wake
}

// New returns an empty box.
func New() *Box { return &Box{Wake: NewWake()} }

// Do runs f under the box's lock: the loop taking the request, or a
// caller merging one that wakes the loop only when it asks for something.
func (b *Box) Do(f func()) {
	b.mu.Lock()
	f()
	b.mu.Unlock()
}

// Post merges a request into the waiting one (merge runs under the lock)
// and wakes the loop.
func (b *Box) Post(merge func()) {
	b.Do(merge)
	b.Wake.Notify()
}
