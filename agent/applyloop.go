package agent

import (
	"context"
	"math/rand/v2"
	"time"

	"openflare/agent/apply"
	"openflare/agent/backoff"
	"openflare/agent/protocol"
	"openflare/internal/mailbox"
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
	pushed    bool // the target came in a WebSocket push: see pushSpread
}

// workQueue holds the queued work, guarded by its box.
type workQueue struct {
	box *mailbox.Box
	w   work
}

func newWorkQueue() workQueue { return workQueue{box: mailbox.New()} }

// add merges a request into the queued work and wakes the loop.
func (q *workQueue) add(f func(*work)) { q.box.Post(func() { f(&q.w) }) }

// take empties the queue.
func (q *workQueue) take() (w work) {
	q.box.Do(func() { w, q.w = q.w, work{} })
	return w
}

func (q *workQueue) apply(target *protocol.ConfigRef, mode apply.Mode, pushed bool) {
	q.add(func(w *work) {
		w.apply, w.target = true, target
		w.mode = max(w.mode, mode)
		w.pushed = w.pushed || pushed
	})
}

func (a *Agent) requestApply(target *protocol.ConfigRef, mode apply.Mode, pushed bool) {
	a.work.apply(target, mode, pushed)
}

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
	shed := time.NewTicker(shedEvery)
	defer shed.Stop()
	var pages shedder
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-shed.C:
			pages.tick()
			continue
		case <-a.work.box.Wake:
		}
		w := a.work.take()
		var waited time.Duration
		// The server answers every status with the version in force:
		// only another one is a fetch to spread.
		if w.pushed && !a.inForce(w.target) {
			waited = rand.N(pushSpread)
			if !backoff.Sleep(ctx, waited) {
				return
			}
		}
		before := allocated()
		a.runWork(w, waited, ctx)
		if first {
			// The start-up apply: everything start-up ran is behind
			// the agent now.
			releaseAll()
			first = false
		} else {
			releaseMemory(before)
		}
	}
}

// inForce reports whether target is the version the node serves.
func (a *Agent) inForce(target *protocol.ConfigRef) bool {
	return target != nil && *target == a.store.Get().Current
}

// runWork does w; waited is how long the loop held it back (pushSpread),
// which the apply's "apply finished" line counts among its phases.
func (a *Agent) runWork(w work, waited time.Duration, parent context.Context) {
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
		a.engine.Apply(apply.AfterWait(ctx, waited), w.target, w.mode)
		a.geoip.settle()
	}
	if w.reconcile {
		if res, ok, err := a.ipg.Retry(ctx, a.cp.SyncIPGroups); ok {
			a.reconciled(res, err)
		}
	}
}
