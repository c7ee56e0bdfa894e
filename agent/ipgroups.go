package agent

import (
	"context"
	"time"

	"openflare/agent/ipgroups"
	"openflare/agent/nginx"
)

// pushIPGroups lands the groups a heartbeat reply or the WebSocket pushed,
// decoded into b, which it closes: only groups already in the snapshot,
// each verified, no nginx reload. It reports whether any landed.
func (a *Agent) pushIPGroups(b *ipgroups.Batch) bool {
	defer b.Close()
	before := allocated()
	res, err := a.ipg.Push(b)
	a.logIPGroups("pushed", res.Landed, res.Rejected, err)
	if len(res.Landed) == 0 {
		return false
	}
	a.publishSnapshots()
	a.beatSoon()
	releaseMemory(before)
	return true
}

// reconcileIPGroups replaces the snapshot with exactly the groups the new
// version references (PROTOCOL 7.2), after a success or warning apply. A
// failure is retried by the store's own schedule (beatDone).
func (a *Agent) reconcileIPGroups(ctx context.Context, ids []uint64) {
	res, err := a.ipg.Reconcile(ctx, ids, a.cp.SyncIPGroups)
	a.reconciled(res, err)
}

// reconciled reports a reconcile's outcome; a changed snapshot is beaten
// at once, so the server learns the new checksums.
func (a *Agent) reconciled(res ipgroups.Result, err error) {
	a.logIPGroups("reconciled", res.Landed, res.Rejected, err)
	if len(res.Landed) > 0 || len(res.Dropped) > 0 {
		a.publishSnapshots()
		a.beatSoon()
	}
}

// publishWait bounds the request that tells the workers of a new snapshot:
// the workers' own refresher takes it within a second anyway.
const publishWait = 2 * time.Second

// publishSnapshots has the running workers take the IP-group and geo
// snapshots on disk at their next request (nginx.Ctl.PublishSnapshots).
// A failure only costs the second the workers' refresher takes.
func (a *Agent) publishSnapshots() {
	node, ok := a.engine.Nginx.(nginx.Node)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishWait)
	defer cancel()
	if err := node.PublishSnapshots(ctx); err != nil {
		a.log.Warn("workers not told of the new snapshot; their refresher takes it within a second", "err", err)
	}
}

func (a *Agent) logIPGroups(how string, landed []uint64, rejected []ipgroups.Rejection, err error) {
	for _, r := range rejected {
		a.log.Warn("IP group rejected", "id", r.ID, "reason", r.Reason)
	}
	if err != nil {
		a.log.Error("IP groups "+how, "err", err)
	} else if len(landed) > 0 {
		a.log.Info("IP groups "+how, "landed", landed)
	}
}
