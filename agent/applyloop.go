package agent

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/openflare/openflare-agent/agent/apply"
	"github.com/openflare/openflare-agent/agent/protocol"
)

// work is what the apply goroutine has been asked to do. Applies take
// seconds (nginx -t and a reload, each a parse of the whole config), so
// they run apart from the channels: heartbeats keep flowing while one is
// under way. Requests that arrive meanwhile merge: only the newest target
// matters, and a startup or force sync is never downgraded to a normal one.
type work struct {
	apply     bool
	target    *protocol.ConfigRef
	mode      apply.Mode
	restart   bool // restart_openresty_now
	ensure    bool // nginx found down: start it from the landed config
	reconcile bool // retry an IP-group reconcile that failed
}

// workQueue holds the queued work; wake says there is some.
type workQueue struct {
	mu   sync.Mutex
	w    work
	wake chan struct{}
}

func newWorkQueue() workQueue { return workQueue{wake: make(chan struct{}, 1)} }

// add merges a request into the queued work and wakes the loop.
func (q *workQueue) add(f func(*work)) {
	q.mu.Lock()
	f(&q.w)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take empties the queue.
func (q *workQueue) take() work {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.w
	q.w = work{}
	return w
}

func (q *workQueue) apply(target *protocol.ConfigRef, mode apply.Mode) {
	q.add(func(w *work) {
		w.apply, w.target = true, target
		w.mode = max(w.mode, mode)
	})
}

func (a *Agent) requestApply(target *protocol.ConfigRef, mode apply.Mode) { a.work.apply(target, mode) }

func (a *Agent) requestRestart() { a.work.add(func(w *work) { w.restart = true }) }

func (a *Agent) requestEnsure() { a.work.add(func(w *work) { w.ensure = true }) }

func (a *Agent) requestReconcile() { a.work.add(func(w *work) { w.reconcile = true }) }

// applyBudget bounds one round of work once started. Work is not cancelled
// by shutdown: an apply cut off halfway would be reported as failed and
// block a good version, or leave nginx stopped mid-restart.
const applyBudget = 10 * time.Minute

// applyLoop runs queued work one round at a time until ctx ends; a round
// under way when ctx ends is finished first.
func (a *Agent) applyLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.work.wake:
		}
		before := allocated()
		a.runWork(a.work.take(), ctx)
		releaseMemory(before)
	}
}

// releaseMemory hands the heap a piece of work grew to back to the system
// at once, when that work allocated much (an apply of a thousand routes, a
// group of 100 000 entries: tens of MiB briefly). A node at rest needs a
// few MiB, and the runtime's scavenger would take minutes to return the
// rest: on a 128 MiB router that is memory nginx could use. Work that
// allocated little (most beats queue a no-op apply check) leaves it alone:
// a forced collection each time would be most of the agent's idle CPU.
// since is allocated() before the work.
func releaseMemory(since uint64) {
	if allocated()-since > releaseAbove {
		debug.FreeOSMemory()
	}
}

// allocated is the bytes allocated on the heap since the process began.
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// releaseAbove is how much a piece of work must have allocated for its
// memory to be handed back at once.
const releaseAbove = 4 << 20

func (a *Agent) runWork(w work, parent context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), applyBudget)
	defer cancel()
	if w.restart {
		if err := a.engine.Restart(ctx); err != nil {
			a.log.Error("nginx restart", "err", err)
		}
	}
	if w.ensure {
		if err := a.engine.Ensure(ctx); err != nil {
			a.log.Error("start nginx from the landed config", "err", err)
		}
	}
	if w.apply {
		a.engine.Apply(ctx, w.target, w.mode)
		a.geoip.settle()
	}
	if w.reconcile {
		res, ok, err := a.ipg.Retry(ctx, a.cp.SyncIPGroups)
		if ok {
			a.logIPGroups("reconciled", res.Landed, res.Rejected, err)
			if len(res.Landed) > 0 || len(res.Dropped) > 0 {
				a.beatSoon()
			}
		}
	}
}
