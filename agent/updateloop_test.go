package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/openflare/openflare-agent/agent/config"
	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/updater"
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

// update_repo "off" stops checks, not the confirmation of a version
// already swapped in.
func TestSelfUpdateOffStillConfirms(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "bin", "openflare-agent")
	for path, body := range map[string]string{
		exe:                  "new",
		exe + ".bak":         "old",
		exe + ".update.json": `{"pending":{"version":"1.1.0","previous":"1.0.0","boots":1}}`,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	u := updater.New(updater.Options{Exe: exe, Version: "1.1.0"})
	cfg := &config.Config{StatePath: filepath.Join(dir, "agent-state.json"), UpdateRepo: "off"}
	s := newSelfUpdate(cfg, u, slog.New(slog.DiscardHandler))
	s.offer(protocol.AgentSettings{UpdateRepo: "o/r", UpdateNow: true})
	if s.next != nil || len(s.wake) != 0 {
		t.Fatalf("self-update off took a trigger: %+v", s.next)
	}
	s.confirm()
	if _, ok := u.ConfirmDeadline(); ok {
		t.Error("the pending version was not confirmed")
	}
	if _, err := os.Stat(exe + ".bak"); err == nil {
		t.Error("the confirmation left the backup")
	}
	if newSelfUpdate(cfg, nil, slog.New(slog.DiscardHandler)) != nil {
		t.Error("a self-update without an updater")
	}
}
