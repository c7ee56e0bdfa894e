package agent

import (
	"testing"

	"github.com/openflare/openflare-agent/agent/protocol"
)

// Settings hand the loop their trigger without blocking; an update_now
// waiting for the loop is not replaced by a later auto_update, and
// settings that ask for nothing leave nothing.
func TestSelfUpdateOfferKeepsUpdateNow(t *testing.T) {
	s := &selfUpdate{wake: make(chan struct{}, 1)}
	s.offer(protocol.AgentSettings{UpdateRepo: "o/r", HeartbeatInterval: 1000, RestartOpenRestyNow: true})
	if s.next != nil {
		t.Fatalf("a payload without auto_update or update_now left a trigger: %+v", s.next)
	}
	s.offer(protocol.AgentSettings{UpdateRepo: "o/r", AutoUpdate: true})
	s.offer(protocol.AgentSettings{UpdateRepo: "o/r", UpdateNow: true, UpdateTag: "v2.0.0"})
	s.offer(protocol.AgentSettings{UpdateRepo: "o/r", AutoUpdate: true})
	if s.next == nil || !s.next.Force || s.next.Tag != "v2.0.0" {
		t.Fatalf("pending trigger %+v, want the update_now", s.next)
	}
	if len(s.wake) != 1 {
		t.Fatal("the loop was not woken")
	}
	var off *selfUpdate
	off.offer(protocol.AgentSettings{UpdateRepo: "o/r", UpdateNow: true})
	off.confirm()
	if off.events(0) != nil {
		t.Error("self-update off reports events")
	}
}
