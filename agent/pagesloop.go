package agent

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"openflare/agent/state"
	"openflare/internal/mailbox"
)

// pagesEvery spaces the checks of the active deployments: a project's new
// deployment needs no new config version, so only asking finds it. As the
// reference agent does, once per heartbeat interval (PROTOCOL 9), but not
// more than once a second, whatever the server sets.
func (a *Agent) pagesEvery() time.Duration {
	return min(max(a.heartbeatInterval(), time.Second), 5*time.Minute)
}

// pagesWork is the Pages projects of the version in force, handed from the
// apply to the Pages loop.
type pagesWork struct {
	box *mailbox.Box
	ids []uint64
}

// setPages records the projects the applied version serves and has them
// deployed now (the apply hook). The list is kept in state too, so that a
// restart checks the projects again even when no apply runs (the version
// is current, or the server is unreachable).
func (a *Agent) setPages(_ context.Context, ids []uint64) {
	ids = slices.Clone(ids)
	list := make([]string, len(ids))
	for i, id := range ids {
		list[i] = strconv.FormatUint(id, 10)
	}
	if err := a.store.Update(func(s *state.State) { s.PagesProjects = strings.Join(list, ",") }); err != nil {
		a.log.Warn("record pages projects", "err", err)
	}
	a.pagesWork.box.Post(func() { a.pagesWork.ids = ids })
}

// restorePages takes the Pages projects of the version in force from
// state (start-up).
func (a *Agent) restorePages() {
	var ids []uint64
	for _, f := range strings.Split(a.store.Get().PagesProjects, ",") {
		if id, err := strconv.ParseUint(f, 10, 64); err == nil && id > 0 {
			ids = append(ids, id)
		}
	}
	a.pagesWork.box.Do(func() { a.pagesWork.ids = ids })
	if len(ids) > 0 {
		a.pagesWork.box.Wake.Notify()
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
		case <-a.pagesWork.box.Wake:
		case <-t.C:
		}
		var ids []uint64
		a.pagesWork.box.Do(func() { ids = a.pagesWork.ids })
		msg := ""
		if len(ids) > 0 {
			before := allocated()
			if err := a.pages.Reconcile(ctx, ids); err != nil && ctx.Err() == nil {
				msg = err.Error()
				a.log.Error("pages deployment", "err", err)
			}
			releaseMemory(before)
		}
		// Cleared too when the version in force has no Pages project left.
		if st := a.store.Get(); st.PagesError != msg && ctx.Err() == nil {
			if err := a.store.Update(func(s *state.State) { s.PagesError = msg }); err != nil {
				a.log.Warn("record pages deployment", "err", err)
			}
			a.beatSoon()
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
