package apply

import (
	"context"
	"strings"
	"time"
)

// phases times one apply's steps, in order, for its "apply finished" line:
// where the time between a publish and serving goes (the push's wait,
// fetch, render, plan, the template policy's nginx parse, backup with the
// tree laid out, land, nginx -t, runtime files, reload, self-test,
// handover), which testing/applybench reports next to a bare nginx -t.
type phases struct {
	now  func() time.Time
	last time.Time
	b    strings.Builder
}

// newPhases starts timing an apply that ctx says waited before it began
// (AfterWait): that wait is its first phase.
func newPhases(ctx context.Context, now func() time.Time) *phases {
	p := &phases{now: now, last: now()}
	if d, ok := ctx.Value(waitedKey{}).(time.Duration); ok && d > 0 {
		p.add("wait", d)
	}
	return p
}

type waitedKey struct{}

// AfterWait tells the apply started with the returned context that its
// request was held back d first (the fleet's spread after a push), so its
// "apply finished" line shows the wait apart from the agent's own work.
func AfterWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, waitedKey{}, d)
}

// mark ends the step named name. A nil recorder (an apply path that does
// not time itself) marks nothing.
func (p *phases) mark(name string) {
	if p == nil {
		return
	}
	t := p.now()
	p.add(name, t.Sub(p.last))
	p.last = t
}

func (p *phases) add(name string, d time.Duration) {
	if p.b.Len() > 0 {
		p.b.WriteByte(' ')
	}
	p.b.WriteString(name)
	p.b.WriteByte('=')
	p.b.WriteString(d.Round(100 * time.Microsecond).String())
}

func (p *phases) String() string {
	if p == nil {
		return ""
	}
	return p.b.String()
}
