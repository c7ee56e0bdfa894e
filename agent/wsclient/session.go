package wsclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/net/websocket"

	"openflare/agent/protocol"
)

// Handler receives what the server pushes and supplies status payloads.
// Status runs on Run's goroutine, the other methods on the reader goroutine,
// so Status may run concurrently with them. While a push is being handled
// no frame is read, and Run waits for a call in progress before it
// returns: all but IPGroups should return quickly.
type Handler interface {
	// Status builds the status payload to send; commit is called after the
	// frame was written successfully (the agent then acknowledges
	// observability data), never otherwise. Return a nil payload to skip this
	// tick.
	Status(ctx context.Context) (p *protocol.NodePayload, commit func())
	Settings(s protocol.AgentSettings)   // server "settings"
	ActiveConfig(ref protocol.ConfigRef) // server "active_config"
	ForceSync(ref protocol.ConfigRef)    // server "force_sync_config"
	// IPGroups reads a "waf_ip_groups" payload, the array dec is at,
	// consuming exactly that value: read from memory, or from the socket
	// as it arrives when the frame is over Options.MaxFrame. An error is
	// logged and the message skipped.
	IPGroups(dec *json.Decoder) error
}

// closeTimeout bounds the courtesy close frame: shutdown must stay prompt
// even when the peer no longer reads.
const closeTimeout = time.Second

var errClosed = errors.New("connection closed")

// Run dials, sends a status at once and then one every o.Interval(), answers
// server pings and dispatches server messages to h. up, if not nil, is called
// once right after the handshake succeeded.
//
// Run returns nil when ctx ends, ErrDisabled after the server's settings
// turned the channel off (the socket is closed cleanly first), and an error
// when the dial or the connection fails (ErrTokenRejected for a 401) or the
// read deadline passes (ErrHalfOpen). Errors never contain o.Token.
func Run(ctx context.Context, o Options, h Handler, up func()) error {
	o = o.withDefaults()
	err := run(ctx, o, h, up)
	if ctx.Err() != nil {
		return nil
	}
	return redact(err, o.Token)
}

func run(ctx context.Context, o Options, h Handler, up func()) error {
	wsURL, origin, err := endpoints(o.ServerURL)
	if err != nil {
		return err
	}
	conn, err := dial(ctx, o, wsURL, origin)
	if err != nil {
		return err
	}
	o.Log.Debug("websocket connected", "url", wsURL)
	if up != nil {
		up()
	}
	s := &session{o: o, h: h, conn: conn}
	err = s.serve(ctx)
	o.Log.Debug("websocket closed", "url", wsURL, "err", redact(err, o.Token))
	return err
}

// session is one established connection. All writes go through writeFrame,
// which serialises them and gives each its own deadline.
type session struct {
	o    Options
	h    Handler
	conn *websocket.Conn

	wmu    sync.Mutex
	closed bool // guarded by wmu
}

// serve runs the reader goroutine and the status ticker until one of them
// stops, then closes the socket and waits for the reader: nothing outlives it.
func (s *session) serve(ctx context.Context) error {
	readerDone := make(chan struct{})
	var readErr error
	go func() {
		defer close(readerDone)
		readErr = s.readLoop()
	}()
	err := s.statusLoop(ctx, readerDone)
	s.close()
	<-readerDone
	switch {
	case ctx.Err() != nil:
		return nil
	case err != nil:
		return err
	default:
		return readErr
	}
}

// statusLoop sends a status at once and then every interval. It returns nil
// when ctx ends or the reader stopped, and an error when a write failed.
func (s *session) statusLoop(ctx context.Context, readerDone <-chan struct{}) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-readerDone:
			return nil
		case <-timer.C:
		case <-s.o.StatusNow:
		}
		if err := s.sendStatus(ctx, readerDone); err != nil {
			return err
		}
		// Asked every tick: the server may change heartbeat_interval.
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(s.o.interval())
	}
}

func (s *session) sendStatus(ctx context.Context, readerDone <-chan struct{}) error {
	p, commit := s.h.Status(ctx)
	if p == nil {
		return nil
	}
	select {
	case <-readerDone:
		// The connection ended while the payload was built; a write could
		// still land in the kernel buffer and commit data nobody will read.
		return nil
	default:
	}
	frame, err := encode(protocol.WSStatus, p)
	if err != nil {
		// An unencodable payload (e.g. a NaN reading) is a local fault, not a
		// dead connection: skip this tick rather than reconnect forever.
		s.o.Log.Warn("websocket status not sent", "err", err)
		return nil
	}
	if err := s.writeFrame(frame); err != nil {
		return fmt.Errorf("send status: %w", err)
	}
	if commit != nil {
		commit()
	}
	return nil
}

// encode builds one {"type","payload"} message; a nil payload is omitted.
func encode(typ string, payload any) ([]byte, error) {
	msg := struct {
		Type    string `json:"type"`
		Payload any    `json:"payload,omitempty"`
	}{typ, payload}
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encode %s message: %w", typ, err)
	}
	return b, nil
}

// writeFrame writes frame as one text frame (a client Conn's PayloadType is
// TextFrame) within the write timeout.
func (s *session) writeFrame(frame []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return errClosed
	}
	if err := s.conn.SetWriteDeadline(time.Now().Add(s.o.WriteTimeout)); err != nil {
		return fmt.Errorf("set write deadline: %w", err)
	}
	_, err := s.conn.Write(frame)
	// Clear the deadline: x/net/websocket answers control-frame pings by
	// itself, and a stale deadline would fail that pong and kill a healthy
	// connection. A pong stuck on a dead peer is cut off by the next write.
	_ = s.conn.SetWriteDeadline(time.Time{})
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// close sends a close frame (best effort) and closes the socket, which also
// ends a blocked read.
func (s *session) close() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.closed = true
	_ = s.conn.SetWriteDeadline(time.Now().Add(closeTimeout))
	if err := s.conn.Close(); err != nil {
		s.o.Log.Debug("websocket close", "err", err)
	}
}

// readLoop reads and dispatches frames until the connection fails, the read
// deadline passes, or a message ends the session.
func (s *session) readLoop() error {
	for {
		// Re-armed per frame: the server pings every 30 s, so a longer
		// silence means the connection is half-open.
		if err := s.conn.SetReadDeadline(time.Now().Add(s.o.ReadDeadline)); err != nil {
			return fmt.Errorf("set read deadline: %w", err)
		}
		var frame []byte
		err := websocket.Message.Receive(s.conn, &frame)
		if errors.Is(err, websocket.ErrFrameTooLarge) {
			// The frame stays the connection's current one: read it
			// through the connection, and the next Receive drains
			// whatever of it is left.
			err = s.stream()
			if err == nil {
				continue
			}
		}
		if err != nil {
			return s.readError(err)
		}
		if err := s.dispatch(frame); err != nil {
			return err
		}
	}
}

func (s *session) readError(err error) error {
	switch {
	case errors.Is(err, websocket.ErrFrameTooLarge):
		return fmt.Errorf("inbound waf_ip_groups message larger than the %d-byte limit: %w", s.o.MaxMessage, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("no frame from the server for %s: %w", s.o.ReadDeadline, ErrHalfOpen)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("server closed the connection: %w", err)
	default:
		return fmt.Errorf("read: %w", err)
	}
}
