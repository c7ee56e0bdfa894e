package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"openflare/agent/config"
	"openflare/agent/protocol"
	"openflare/agent/updater"
	"openflare/internal/mailbox"
)

// Settings hand the loop their trigger without blocking; an update_now
// waiting for the loop is not replaced by a later auto_update, and
// settings that ask for nothing leave nothing.
func TestSelfUpdateOfferKeepsUpdateNow(t *testing.T) {
	s := &selfUpdate{box: mailbox.New(), log: slog.New(slog.DiscardHandler), repo: "o/r"}
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
	if len(s.box.Wake) != 1 {
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
	if s.next != nil || len(s.box.Wake) != 0 {
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

// Settings that ask for an update from another repository than
// agent.json's raise one info event naming both and how to allow it,
// kept after a one-shot update_now until the server names another
// repository; the same repository (in any case) raises none, nor does a
// foreign one that no update was asked from. Releases still come from
// agent.json's repository only.
func TestSelfUpdateForeignRepoEvent(t *testing.T) {
	dir := t.TempDir()
	cfg := &config.Config{UpdateRepo: "openflare/openflare-agent"}
	s := newSelfUpdate(cfg, updater.New(updater.Options{Exe: filepath.Join(dir, "openflare-agent"), Version: "1.0.0"}), slog.New(slog.DiscardHandler))
	repoEvents := func() []protocol.HealthEvent {
		var out []protocol.HealthEvent
		for _, e := range s.events(100) {
			if e.EventType == protocol.EventAgentUpdateRepo {
				out = append(out, e)
			}
		}
		return out
	}
	s.offer(protocol.AgentSettings{UpdateRepo: "Rain-kl/OpenFlare"})
	if ev := repoEvents(); len(ev) != 0 {
		t.Fatalf("no update asked for: %+v", ev)
	}
	s.offer(protocol.AgentSettings{UpdateNow: true, UpdateRepo: "Rain-kl/OpenFlare"})
	s.offer(protocol.AgentSettings{UpdateRepo: "Rain-kl/OpenFlare"})
	ev := repoEvents()
	if len(ev) != 1 || ev[0].Severity != protocol.SeverityInfo || !strings.Contains(ev[0].Message, "Rain-kl/OpenFlare") ||
		!strings.Contains(ev[0].Message, "openflare/openflare-agent") || !strings.Contains(ev[0].Message, "update_repo") {
		t.Fatalf("foreign repository after update_now: %+v", ev)
	}
	if s.next == nil || s.next.Repo != "Rain-kl/OpenFlare" || !s.next.Force {
		t.Fatalf("the check was not queued: %+v", s.next)
	}
	s.offer(protocol.AgentSettings{UpdateRepo: "OpenFlare/OpenFlare-Agent"})
	if ev := repoEvents(); len(ev) != 0 {
		t.Fatalf("the server names agent.json's repository: %+v", ev)
	}
	s.offer(protocol.AgentSettings{AutoUpdate: true, UpdateRepo: "OpenFlare/OpenFlare-Agent"})
	if ev := repoEvents(); len(ev) != 0 {
		t.Fatalf("the same repository: %+v", ev)
	}
	s.offer(protocol.AgentSettings{AutoUpdate: true, UpdateRepo: "Rain-kl/OpenFlare"})
	s.offer(protocol.AgentSettings{UpdateRepo: "someone/else"})
	if ev := repoEvents(); len(ev) != 0 {
		t.Fatalf("the server names another repository: %+v", ev)
	}
	cfg.UpdateRepo = "off"
	off := newSelfUpdate(cfg, updater.New(updater.Options{Exe: filepath.Join(dir, "openflare-agent"), Version: "1.0.0"}), slog.New(slog.DiscardHandler))
	off.offer(protocol.AgentSettings{UpdateNow: true, UpdateRepo: "Rain-kl/OpenFlare"})
	if ev := off.events(100); len(ev) != 0 {
		t.Fatalf("self-update off: %+v", ev)
	}
}
