package agent

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/openflare/openflare-agent/agent/state"
)

// pagesEvery spaces the checks of the active deployments: a project's new
// deployment needs no new config version, so only asking finds it. As
// upstream, once per heartbeat interval (PROTOCOL 9), but not more than
// once a second, whatever the server sets.
func (a *Agent) pagesEvery() time.Duration {
	return min(max(a.heartbeatInterval(), time.Second), 5*time.Minute)
}

// pagesWork is the Pages projects of the version in force, handed from the
// apply to the Pages loop.
type pagesWork struct {
	mu   sync.Mutex
	ids  []uint64
	wake chan struct{}
}

// setPages records the projects the applied version serves and has them
// deployed now (the apply hook).
func (a *Agent) setPages(_ context.Context, ids []uint64) {
	a.pagesWork.mu.Lock()
	a.pagesWork.ids = slices.Clone(ids)
	a.pagesWork.mu.Unlock()
	select {
	case a.pagesWork.wake <- struct{}{}:
	default:
	}
}

// pagesLoop deploys Pages content apart from applies and beats: a package
// may take minutes to download over a slow uplink, and neither must wait
// for it. One goroutine, so projects are never deployed twice at once.
func (a *Agent) pagesLoop(ctx context.Context) {
	t := time.NewTimer(a.pagesEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.pagesWork.wake:
		case <-t.C:
		}
		a.pagesWork.mu.Lock()
		ids := a.pagesWork.ids
		a.pagesWork.mu.Unlock()
		if len(ids) > 0 {
			err := a.pages.Reconcile(ctx, ids)
			msg := ""
			if err != nil && ctx.Err() == nil {
				msg = err.Error()
				a.log.Error("pages deployment", "err", err)
			}
			if st := a.store.Get(); st.PagesError != msg {
				if err := a.store.Update(func(s *state.State) { s.PagesError = msg }); err != nil {
					a.log.Warn("record pages deployment", "err", err)
				}
				a.beatSoon()
			}
			releaseMemory()
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(a.pagesEvery())
	}
}
