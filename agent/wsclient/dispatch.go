package wsclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"openflare/agent/protocol"
)

// pongFrame is the reply to a server ping (PROTOCOL 3.3).
var pongFrame = []byte(`{"type":"pong"}`)

// dispatch handles one inbound frame. Frames that are not JSON, payloads that
// do not decode and unknown types are counted and skipped: the socket stays
// open (PROTOCOL 3.3), unlike upstream, which drops it on non-JSON frames.
func (s *session) dispatch(frame []byte) error {
	var m protocol.WSMessage
	if err := json.Unmarshal(frame, &m); err != nil {
		s.undecodable("", len(frame), err)
		return nil
	}
	switch m.Type {
	case protocol.WSPing:
		if err := s.writeFrame(pongFrame); err != nil {
			return fmt.Errorf("send pong: %w", err)
		}
	case protocol.WSPong:
		// Answer to a ping; the frame itself already proved liveness.
	case protocol.WSSettings:
		var st protocol.AgentSettings
		if !s.decode(m, '{', &st) {
			return nil
		}
		// Delivered even when disabling: it carries one-shot flags
		// (update_now, restart_openresty_now) the agent must not lose.
		s.h.Settings(st)
		if !st.WebsocketUpgradeEnabled {
			return ErrDisabled
		}
	case protocol.WSActiveConfig:
		var ref protocol.ConfigRef
		if s.decode(m, '{', &ref) {
			s.h.ActiveConfig(ref)
		}
	case protocol.WSForceSyncConfig:
		var ref protocol.ConfigRef
		if s.decode(m, '{', &ref) {
			s.h.ForceSync(ref)
		}
	case protocol.WSWAFIPGroups:
		if err := s.h.IPGroups(json.NewDecoder(bytes.NewReader(m.Payload))); err != nil {
			s.undecodable(m.Type, len(m.Payload), err)
		}
	default:
		s.o.Stats.Unknown.Add(1)
		s.o.Log.Debug("websocket message ignored: unknown type", "type", m.Type)
	}
	return nil
}

// errPayloadShape rejects a payload that is absent, null or of the wrong JSON
// kind, which json.Unmarshal would otherwise accept as a zero value (a null
// settings payload would read as websocket_upgrade_enabled=false).
var errPayloadShape = errors.New("payload missing or of the wrong JSON kind")

// decode unmarshals m's payload into v, which must start with open ('{' for
// an object, '[' for an array). It reports whether v may be used.
func (s *session) decode(m protocol.WSMessage, open byte, v any) bool {
	p := bytes.TrimLeft(m.Payload, " \t\r\n")
	err := errPayloadShape
	if len(p) > 0 && p[0] == open {
		err = json.Unmarshal(p, v)
	}
	if err != nil {
		s.undecodable(m.Type, len(m.Payload), err)
		return false
	}
	return true
}

func (s *session) undecodable(typ string, size int, err error) {
	s.o.Stats.Undecodable.Add(1)
	s.o.Log.Warn("websocket message ignored: cannot decode", "type", typ, "bytes", size, "err", err)
}
