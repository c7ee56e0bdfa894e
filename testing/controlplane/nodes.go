package controlplane

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"openflare/agent/protocol"
)

// maxTextRunes is where the server cuts last_error, openresty_message and
// apply-log messages (PROTOCOL 1.3, 8.3).
const maxTextRunes = 16000

// Node is a snapshot of one node record.
type Node struct {
	ID               uint64               `json:"id"`      // database id
	NodeID           string               `json:"node_id"` // "node-" + 32 hex
	Name             string               `json:"name"`
	Token            string               `json:"token"`
	IP               string               `json:"ip"`
	Version          string               `json:"version"`
	ExtVersion       string               `json:"ext_version"`
	CurrentVersion   string               `json:"current_version"`
	LastError        string               `json:"last_error"`
	OpenRestyStatus  string               `json:"openresty_status"`
	OpenRestyMessage string               `json:"openresty_message"`
	LastSeen         time.Time            `json:"last_seen"`  // zero until the node first talks to the server
	Heartbeats       int                  `json:"heartbeats"` // HTTP heartbeats plus WS status messages accepted
	LastPayload      protocol.NodePayload `json:"last_payload"`
}

// Beat is one accepted heartbeat: an HTTP E2 call or a WS status message.
type Beat struct {
	NodeID  string               `json:"node_id"`
	Channel string               `json:"channel"` // "http" or "ws"
	At      time.Time            `json:"at"`
	Payload protocol.NodePayload `json:"payload"`
}

// Beat channels.
const (
	ChannelHTTP = "http"
	ChannelWS   = "ws"
)

type node struct {
	Node
	created time.Time
	// settings holds this node's settings that differ from the global
	// ones, by JSON key of protocol.AgentSettings.
	settings map[string]json.RawMessage
}

// AddNode creates a node like the UI's "Add Node": the agent uses the
// returned token as its agent_token.
func (s *Server) AddNode(name string) (nodeID, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.newNodeLocked(strings.TrimSpace(name))
	return n.NodeID, n.Token
}

func (s *Server) newNodeLocked(name string) *node {
	s.nextNodeID++
	n := &node{
		Node: Node{
			ID:     s.nextNodeID,
			NodeID: "node-" + randomHex(16),
			Name:   name,
			Token:  randomHex(16),
		},
		created:  time.Now(),
		settings: map[string]json.RawMessage{},
	}
	s.nodes = append(s.nodes, n)
	s.byToken[n.Token] = n
	s.byNodeID[n.NodeID] = n
	s.notifyLocked()
	return n
}

// RotateToken gives a node a new token; the old one is rejected from now on.
// It returns "" for an unknown node.
func (s *Server) RotateToken(nodeID string) (newToken string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.byNodeID[nodeID]
	if n == nil {
		return ""
	}
	delete(s.byToken, n.Token)
	n.Token = randomHex(16)
	s.byToken[n.Token] = n
	return n.Token
}

// Nodes returns a copy of every node, in creation order.
func (s *Server) Nodes() []Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Node, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.Node
	}
	return out
}

// Heartbeats returns every accepted heartbeat (HTTP and WS), in order.
func (s *Server) Heartbeats() []Beat {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Beat(nil), s.beats...)
}

// WaitHeartbeat returns the first heartbeat, already received or still to
// come, for which match returns true; or ctx's error.
func (s *Server) WaitHeartbeat(ctx context.Context, match func(Beat) bool) (Beat, error) {
	return waitScan(ctx, s, func() []Beat { return s.beats }, match)
}

// handleRegister is E1 (PROTOCOL 1.2).
func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) {
	tok := strings.TrimSpace(r.Header.Get(protocol.TokenHeader))
	if !s.registerTokenValid(tok) {
		writeError(w, http.StatusUnauthorized, msgBadRegisterToken)
		return
	}
	var p protocol.NodePayload
	if !bindJSON(w, r, &p) {
		return
	}
	if strings.TrimSpace(p.Version) == "" {
		writeError(w, http.StatusBadRequest, msgVersionRequired)
		return
	}
	ip, aerr := resolveIP(p.IP, r.RemoteAddr)
	if aerr != nil {
		writeError(w, aerr.status, aerr.msg)
		return
	}
	reply, ok := s.register(tok, p, ip)
	if !ok {
		writeError(w, http.StatusUnauthorized, msgBadRegisterToken)
		return
	}
	writeOK(w, reply)
}

// register re-registers the token's node, or creates a node when tok is
// the discovery token; ok is false when tok is neither.
func (s *Server) register(tok string, p protocol.NodePayload, ip string) (reply protocol.RegisterReply, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.byToken[tok]
	switch {
	case n != nil:
	case tok == s.discoveryToken && tok != "":
		n = s.newNodeLocked("")
		n.Name = strings.TrimSpace(p.Name)
		if n.Name == "" {
			n.Name = n.NodeID
		}
	default:
		return reply, false
	}
	s.refreshLocked(n, p, ip, time.Now())
	s.notifyLocked()
	reply = protocol.RegisterReply{NodeID: n.NodeID, AccessToken: n.Token, Name: n.Name}
	if s.oldServer {
		reply.AccessToken, reply.AgentToken = "", n.Token
	}
	return reply, true
}

func (s *Server) registerTokenValid(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return tok != "" && (s.byToken[tok] != nil || tok == s.discoveryToken)
}

// handleHeartbeat is E2 (PROTOCOL 2).
func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	nodeID := s.nodeIDForToken(w, r)
	if nodeID == "" {
		return
	}
	var p protocol.NodePayload
	if !bindJSON(w, r, &p) {
		return
	}
	s.mu.Lock()
	reply, aerr := s.heartbeatLocked(s.byNodeID[nodeID], p, r.RemoteAddr, ChannelHTTP)
	s.mu.Unlock()
	if aerr != nil {
		writeError(w, aerr.status, aerr.msg)
		return
	}
	writeOK(w, reply)
}

// heartbeatLocked is the heartbeat logic shared by E2 and the WS status
// message (PROTOCOL 2.3). As on the real server, a failure of the IP group
// step happens after the node's runtime fields were saved.
func (s *Server) heartbeatLocked(n *node, p protocol.NodePayload, remoteAddr, channel string) (protocol.HeartbeatReply, *apiError) {
	if strings.TrimSpace(p.Version) == "" {
		return protocol.HeartbeatReply{}, badRequest(msgVersionRequired)
	}
	ip, aerr := resolveIP(p.IP, remoteAddr)
	if aerr != nil {
		return protocol.HeartbeatReply{}, aerr
	}
	now := time.Now()
	s.refreshLocked(n, p, ip, now)
	n.Heartbeats++
	s.beats = append(s.beats, Beat{NodeID: n.NodeID, Channel: channel, At: now, Payload: n.LastPayload})
	s.notifyLocked()

	groups, aerr := s.changedGroupsLocked(p.WAFIPGroupChecksums)
	if aerr != nil {
		return protocol.HeartbeatReply{}, aerr
	}
	record, err := json.Marshal(s.nodeRecordLocked(n))
	if err != nil {
		return protocol.HeartbeatReply{}, &apiError{http.StatusInternalServerError, msgInternal}
	}
	reply := protocol.HeartbeatReply{
		Node:          record,
		AgentSettings: s.settingsLocked(n),
		ActiveConfig:  s.activeRefLocked(),
		WAFIPGroups:   groups,
	}
	s.clearOneShotsLocked(n)
	return reply, nil
}

// refreshLocked stores the runtime fields a register or heartbeat reports.
// The stored name wins over the reported one (PROTOCOL 1.3).
func (s *Server) refreshLocked(n *node, p protocol.NodePayload, ip string, now time.Time) {
	if n.Name == "" {
		n.Name = strings.TrimSpace(p.Name)
	}
	n.IP = ip
	n.Version = strings.TrimSpace(p.Version)
	n.ExtVersion = strings.TrimSpace(p.ExtVersion)
	n.CurrentVersion = strings.TrimSpace(p.CurrentVersion)
	n.LastError = cutRunes(strings.TrimSpace(p.LastError), maxTextRunes)
	n.OpenRestyStatus = normalizeOpenRestyStatus(p.OpenRestyStatus)
	n.OpenRestyMessage = cutRunes(strings.TrimSpace(p.OpenRestyMessage), maxTextRunes)
	n.LastSeen = now
	p.NodeID = n.NodeID
	n.LastPayload = p
}

// nodeRecord is the "node" object of the heartbeat reply (agents ignore it).
type nodeRecord struct {
	ID               uint64 `json:"id"`
	NodeID           string `json:"node_id"`
	Name             string `json:"name"`
	IP               string `json:"ip"`
	NodeType         string `json:"node_type"`
	Status           string `json:"status"`
	Version          string `json:"version"`
	ExtVersion       string `json:"ext_version"`
	CurrentVersion   string `json:"current_version"`
	LastError        string `json:"last_error"`
	OpenRestyStatus  string `json:"openresty_status"`
	OpenRestyMessage string `json:"openresty_message"`
	AutoUpdate       bool   `json:"auto_update"`
	UpdateChannel    string `json:"update_channel"`
	LastSeenAt       string `json:"last_seen_at"`
	CreatedAt        string `json:"created_at"`
}

func (s *Server) nodeRecordLocked(n *node) nodeRecord {
	st := s.settingsLocked(n)
	return nodeRecord{
		ID:               n.ID,
		NodeID:           n.NodeID,
		Name:             n.Name,
		IP:               n.IP,
		NodeType:         "edge_node",
		Status:           "online",
		Version:          n.Version,
		ExtVersion:       n.ExtVersion,
		CurrentVersion:   n.CurrentVersion,
		LastError:        n.LastError,
		OpenRestyStatus:  n.OpenRestyStatus,
		OpenRestyMessage: n.OpenRestyMessage,
		AutoUpdate:       st.AutoUpdate,
		UpdateChannel:    st.UpdateChannel,
		LastSeenAt:       n.LastSeen.Format(time.RFC3339Nano),
		CreatedAt:        n.created.Format(time.RFC3339Nano),
	}
}

func normalizeOpenRestyStatus(v string) string {
	switch v = strings.ToLower(strings.TrimSpace(v)); v {
	case protocol.StatusHealthy, protocol.StatusUnhealthy:
		return v
	}
	return protocol.StatusUnknown
}

// resolveIP picks the node IP from the reported one and the TCP peer
// (PROTOCOL 2.3): an unparsable or empty report → peer; a public report is
// kept; an internal report with a public peer → peer; else the report.
func resolveIP(reported, remoteAddr string) (string, *apiError) {
	reported = strings.TrimSpace(reported)
	rep, repErr := netip.ParseAddr(reported)
	peer, peerErr := peerAddr(remoteAddr)
	switch {
	case repErr != nil && peerErr != nil:
		if reported == "" {
			return "", badRequest(msgIPRequired)
		}
		return "", badRequest(msgIPInvalid)
	case repErr != nil:
		return peer.String(), nil
	}
	rep = rep.Unmap().WithZone("")
	if !isInternal(rep) || peerErr != nil || isInternal(peer) {
		return rep.String(), nil
	}
	return peer.String(), nil
}

func peerAddr(remoteAddr string) (netip.Addr, error) {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, err
	}
	return a.Unmap().WithZone(""), nil
}

func isInternal(a netip.Addr) bool {
	return a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified()
}

func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}
