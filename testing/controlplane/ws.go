package controlplane

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/websocket"

	"openflare/agent/protocol"
)

// wsConn is one agent WebSocket (PROTOCOL 3).
type wsConn struct {
	nodeID string
	raw    net.Conn // the hijacked TCP connection, closed abruptly
	ws     *websocket.Conn
	queue  chan []byte // text frames to send; full means dropped
	done   chan struct{}
	once   sync.Once

	stallMu    sync.Mutex
	stallUntil time.Time
}

func (c *wsConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.raw.Close()
	})
}

// send queues a frame without blocking; it reports false when the queue
// is full (the frame is dropped, as on the real server) or c is closed.
func (c *wsConn) send(frame []byte) bool {
	select {
	case <-c.done:
		return false
	default:
	}
	select {
	case c.queue <- frame:
		return true
	default:
		return false
	}
}

// waitStall blocks while StallWS is in force; false means c closed.
func (c *wsConn) waitStall() bool {
	for {
		c.stallMu.Lock()
		d := time.Until(c.stallUntil)
		c.stallMu.Unlock()
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.done:
			t.Stop()
			return false
		}
	}
}

// hijackCapture remembers the connection the WebSocket library hijacks, so
// the server can later close it without a close frame.
type hijackCapture struct {
	http.ResponseWriter
	conn net.Conn
}

func (h *hijackCapture) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	h.conn = conn
	return conn, brw, err
}

// handleWS is E3: token check before the upgrade (401 envelope, no
// upgrade), any Origin accepted.
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	nodeID := s.nodeIDForToken(w, r)
	if nodeID == "" {
		return
	}
	if _, ok := w.(http.Hijacker); !ok {
		writeError(w, http.StatusInternalServerError, msgInternal)
		return
	}
	capture := &hijackCapture{ResponseWriter: w}
	websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil },
		Handler: func(ws *websocket.Conn) {
			s.serveWS(&wsConn{
				nodeID: nodeID,
				raw:    capture.conn,
				ws:     ws,
				queue:  make(chan []byte, wsQueueSize),
				done:   make(chan struct{}),
			}, r.RemoteAddr)
		},
	}.ServeHTTP(capture, r)
}

// serveWS registers c (closing the node's previous connection), then runs
// its writer and reader until either fails or the server closes c.
func (s *Server) serveWS(c *wsConn, remoteAddr string) {
	s.mu.Lock()
	if s.live == nil {
		s.mu.Unlock()
		c.close()
		return
	}
	old := s.ws[c.nodeID]
	s.ws[c.nodeID] = c
	s.notifyLocked()
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
	s.log().Info("websocket connected", "node_id", c.nodeID, "remote", remoteAddr)

	var writer sync.WaitGroup
	writer.Go(func() { s.writeLoop(c) })
	err := s.readLoop(c, remoteAddr)
	c.close()
	writer.Wait()

	s.mu.Lock()
	if s.ws[c.nodeID] == c {
		delete(s.ws, c.nodeID)
	}
	s.notifyLocked()
	s.mu.Unlock()
	s.log().Info("websocket closed", "node_id", c.nodeID, "reason", err)
}

// readLoop reads data messages; the read deadline is re-armed before each
// one, so control frames alone do not keep the connection alive.
func (s *Server) readLoop(c *wsConn, remoteAddr string) error {
	for {
		if err := c.ws.SetReadDeadline(time.Now().Add(orDefault(s.WSReadDeadline, DefaultWSReadDeadline))); err != nil {
			return fmt.Errorf("set read deadline: %w", err)
		}
		var data []byte
		err := websocket.Message.Receive(c.ws, &data)
		if errors.Is(err, websocket.ErrFrameTooLarge) {
			s.log().Debug("websocket frame too large, skipped", "node_id", c.nodeID)
			continue
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if !c.waitStall() {
			return errors.New("closed while stalled")
		}
		s.handleWSMessage(c, data, remoteAddr)
	}
}

// writeLoop sends queued frames and a ping every WSPingInterval, each with
// the 10 s write deadline.
func (s *Server) writeLoop(c *wsConn) {
	ticker := time.NewTicker(orDefault(s.WSPingInterval, DefaultWSPingInterval))
	defer ticker.Stop()
	ping := wsFrame(protocol.WSPing, nil)
	for {
		var frame []byte
		select {
		case <-c.done:
			return
		case frame = <-c.queue:
		case <-ticker.C:
			frame = ping
		}
		if !c.waitStall() {
			return
		}
		if err := c.ws.SetWriteDeadline(time.Now().Add(wsWriteDeadline)); err != nil {
			c.close()
			return
		}
		if err := websocket.Message.Send(c.ws, string(frame)); err != nil {
			s.log().Debug("websocket write", "node_id", c.nodeID, "err", err)
			c.close()
			return
		}
	}
}

// handleWSMessage acts on one agent message (PROTOCOL 3.3). Frames that are
// not JSON, payloads that do not decode, unknown types and invalid status
// messages get no reply at all.
func (s *Server) handleWSMessage(c *wsConn, data []byte, remoteAddr string) {
	var msg protocol.WSMessage
	if err := json.Unmarshal(data, &msg); err != nil {
		s.log().Debug("websocket frame is not JSON, skipped", "node_id", c.nodeID)
		return
	}
	switch msg.Type {
	case protocol.WSPing:
		c.send(wsFrame(protocol.WSPong, nil))
	case protocol.WSStatus:
		var p protocol.NodePayload
		if err := json.Unmarshal(msg.Payload, &p); err != nil {
			s.log().Debug("websocket status payload does not decode", "node_id", c.nodeID, "err", err)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		reply, aerr := s.heartbeatLocked(s.byNodeID[c.nodeID], p, remoteAddr, ChannelWS)
		if aerr != nil {
			s.log().Warn("websocket status rejected", "node_id", c.nodeID, "error_msg", aerr.msg)
			return
		}
		c.send(wsFrame(protocol.WSSettings, reply.AgentSettings))
		if reply.ActiveConfig != nil {
			c.send(wsFrame(protocol.WSActiveConfig, reply.ActiveConfig))
		}
		if len(reply.WAFIPGroups) > 0 {
			c.send(wsFrame(protocol.WSWAFIPGroups, reply.WAFIPGroups))
		}
	}
}

// wsFrame encodes one {"type","payload"} message; a nil payload is omitted.
func wsFrame(typ string, payload any) []byte {
	msg := protocol.WSMessage{Type: typ}
	if payload != nil {
		// Payloads are protocol types of plain fields, which always encode.
		msg.Payload, _ = json.Marshal(payload)
	}
	b, _ := json.Marshal(msg)
	return b
}

// broadcastLocked queues one message on every connected agent.
func (s *Server) broadcastLocked(typ string, payload any) {
	if len(s.ws) == 0 {
		return
	}
	frame := wsFrame(typ, payload)
	for id, c := range s.ws {
		if !c.send(frame) {
			s.log().Debug("websocket queue full, message dropped", "node_id", id, "type", typ)
		}
	}
}

// WSConnected reports whether the node has a WebSocket open.
func (s *Server) WSConnected(nodeID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ws[nodeID] != nil
}

// WaitWS waits until the node's WebSocket is open (connected true) or
// closed (false), or ctx ends.
func (s *Server) WaitWS(ctx context.Context, nodeID string, connected bool) error {
	return s.waitFor(ctx, func() bool { return (s.ws[nodeID] != nil) == connected })
}

// ForceSync sends force_sync_config with the active version, like the UI's
// "Force Sync"; it fails when the node has no WebSocket or nothing is active.
func (s *Server) ForceSync(nodeID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == nil {
		return errors.New("controlplane: force sync: no active version")
	}
	return s.sendLocked(nodeID, wsFrame(protocol.WSForceSyncConfig, s.active.ref))
}

// SendWSRaw queues an arbitrary text frame (e.g. garbage) for the node.
func (s *Server) SendWSRaw(nodeID string, frame []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sendLocked(nodeID, append([]byte(nil), frame...))
}

// SendWSOversized queues a text frame of exactly n bytes: a JSON ping
// message padded with a long string, so only its size is wrong.
func (s *Server) SendWSOversized(nodeID string, n int) error {
	const prefix, suffix = `{"type":"ping","padding":"`, `"}`
	n = max(n, len(prefix)+len(suffix))
	frame := prefix + strings.Repeat("x", n-len(prefix)-len(suffix)) + suffix
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sendLocked(nodeID, []byte(frame))
}

func (s *Server) sendLocked(nodeID string, frame []byte) error {
	c := s.ws[nodeID]
	if c == nil {
		return fmt.Errorf("controlplane: node %q has no websocket", nodeID)
	}
	if !c.send(frame) {
		return fmt.Errorf("controlplane: websocket send queue of node %q is full", nodeID)
	}
	return nil
}

// DropWS closes the node's WebSocket abruptly (no close frame).
func (s *Server) DropWS(nodeID string) error {
	s.mu.Lock()
	c := s.ws[nodeID]
	s.mu.Unlock()
	if c == nil {
		return fmt.Errorf("controlplane: node %q has no websocket", nodeID)
	}
	c.close()
	return nil
}

// StallWS stops handling and sending on the node's WebSocket for d: at most
// one message already being read waits, replies and pings wait, and further
// messages pile up in the 16-slot queue (then drop).
func (s *Server) StallWS(nodeID string, d time.Duration) error {
	s.mu.Lock()
	c := s.ws[nodeID]
	s.mu.Unlock()
	if c == nil {
		return fmt.Errorf("controlplane: node %q has no websocket", nodeID)
	}
	c.stallMu.Lock()
	c.stallUntil = time.Now().Add(d)
	c.stallMu.Unlock()
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
