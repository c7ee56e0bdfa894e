package agent

import (
	"context"

	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/state"
	"github.com/openflare/openflare-agent/agent/sync"
)

type stateT = state.State

// syncRequest asks the sync goroutine to act. Applies take seconds (nginx
// -t twice and a reload), so they run apart from the channels: heartbeats
// keep flowing while one is under way.
type syncRequest struct {
	target  *protocol.ConfigRef
	mode    sync.Mode
	restart bool
}

// requestSync queues a sync, replacing a queued one that has not started:
// only the newest target matters, but a startup or force request is never
// downgraded to a normal one.
func (a *Agent) requestSync(target *protocol.ConfigRef, mode sync.Mode) {
	a.enqueue(syncRequest{target: target, mode: mode})
}

func (a *Agent) requestRestart() { a.enqueue(syncRequest{restart: true}) }

func (a *Agent) enqueue(r syncRequest) {
	for {
		select {
		case a.syncs <- r:
			return
		default:
		}
		select {
		case old := <-a.syncs:
			if old.mode > r.mode {
				r.mode = old.mode
			}
			r.restart = r.restart || old.restart
			if r.target == nil && !r.restart {
				r.target = old.target
			}
		default:
		}
	}
}

// syncLoop runs queued syncs one at a time until ctx ends.
func (a *Agent) syncLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-a.syncs:
			if r.restart {
				if err := a.syncer.Restart(ctx); err != nil {
					a.log.Error("nginx restart", "err", err)
				}
				if r.target == nil && r.mode == sync.Normal {
					continue
				}
			}
			if err := a.syncer.Sync(ctx, r.target, r.mode); err == nil && r.mode == sync.Startup {
				a.log.Debug("startup sync done")
			}
		}
	}
}
