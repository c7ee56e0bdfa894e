package controlplane

import (
	"bytes"
	"encoding/json"
	"fmt"

	"openflare/agent/protocol"
)

// UpdateSettings changes agent settings. nodeID "" edits the global settings
// every node inherits (defaults: heartbeat_interval 3000,
// websocket_upgrade_enabled true, update_repo "Rain-kl/OpenFlare",
// update_channel "stable"); a node id edits that node only, and the fields f
// changes then stay fixed for that node. The one-shot fields (update_now,
// update_channel, update_tag, restart_openresty_now) are reset after one
// heartbeat reply or WS settings push. An unknown node id is logged and
// ignored.
func (s *Server) UpdateSettings(nodeID string, f func(*protocol.AgentSettings)) {
	if err := s.updateSettings(nodeID, f); err != nil {
		s.log().Error("update settings", "err", err)
	}
}

func (s *Server) updateSettings(nodeID string, f func(*protocol.AgentSettings)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if nodeID == "" {
		f(&s.global)
		return nil
	}
	n := s.byNodeID[nodeID]
	if n == nil {
		return fmt.Errorf("controlplane: settings: unknown node %q", nodeID)
	}
	before := s.settingsLocked(n)
	after := before
	f(&after)
	oldFields, err := settingsFields(before)
	if err != nil {
		return err
	}
	newFields, err := settingsFields(after)
	if err != nil {
		return err
	}
	for k, v := range newFields {
		if !bytes.Equal(oldFields[k], v) {
			n.settings[k] = v
		}
	}
	return nil
}

// settingsLocked is the node's effective settings: the global ones with the
// node's own fields on top.
func (s *Server) settingsLocked(n *node) protocol.AgentSettings {
	st := s.global
	for k, v := range n.settings {
		// Each stored value came from marshalling an AgentSettings field,
		// so it decodes back into the same field.
		_ = json.Unmarshal([]byte(`{"`+k+`":`+string(v)+`}`), &st)
	}
	return st
}

// clearOneShotsLocked resets the one-shot settings after they were sent
// once (PROTOCOL 2.3).
func (s *Server) clearOneShotsLocked(n *node) {
	n.settings["update_now"] = json.RawMessage("false")
	n.settings["update_channel"] = json.RawMessage(`"stable"`)
	n.settings["update_tag"] = json.RawMessage(`""`)
	n.settings["restart_openresty_now"] = json.RawMessage("false")
}

func settingsFields(st protocol.AgentSettings) (map[string]json.RawMessage, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("controlplane: encode settings: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("controlplane: decode settings: %w", err)
	}
	return m, nil
}
