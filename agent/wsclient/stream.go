package wsclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"golang.org/x/net/websocket"

	"openflare/agent/protocol"
	"openflare/internal/jsonstream"
)

// errNotStreamed stops reading a large frame that is not a waf_ip_groups
// push; the next Receive drains it.
var errNotStreamed = errors.New("frame over the in-memory limit and not a waf_ip_groups push")

// errValueTooLarge marks one JSON value over Options.MaxFrame in a
// streamed message.
var errValueTooLarge = errors.New("a value in the message is larger than the in-memory frame limit")

// stream handles a frame over MaxFrame, the current frame of the
// connection after Receive refused it, without holding it: a waf_ip_groups
// push (the server writes "type" before "payload") is decoded as it is
// read, anything else skipped. Reads stop where the message's JSON ends,
// which for a well-formed message is inside the frame: the connection's
// Read would go on into the next frame. It returns an error only when the
// session must end: the push is over MaxMessage or the connection failed.
func (s *session) stream() error {
	r := &frameReader{conn: s.conn, deadline: s.o.ReadDeadline, left: int64(s.o.MaxMessage), maxValue: int64(s.o.MaxFrame)}
	dec := json.NewDecoder(r)
	r.dec = dec
	var typ string
	err := jsonstream.Object(dec, func(key string) error {
		switch {
		case key == "type" && typ == "":
			return dec.Decode(&typ)
		case key == "payload" && typ == protocol.WSWAFIPGroups:
			return s.h.IPGroups(dec)
		}
		return errNotStreamed
	})
	switch {
	case r.over:
		return websocket.ErrFrameTooLarge
	case r.err != nil:
		return r.err
	case err != nil:
		s.undecodable(typ, int(r.read), err)
	}
	return nil
}

// frameReader reads the frame being streamed, within MaxMessage and with
// no single value over maxValue, re-arming the read deadline before every
// read: a 20 MiB push over a slow uplink outlasts one deadline, while a
// stalled one is still cut off.
type frameReader struct {
	conn     *websocket.Conn
	dec      *json.Decoder
	deadline time.Duration
	left     int64 // bytes the message may still take
	maxValue int64
	read     int64
	over     bool  // past MaxMessage
	err      error // the connection failed
}

func (r *frameReader) Read(p []byte) (int, error) {
	// Bytes read past the decoder's offset are the value it buffers.
	if r.read-r.dec.InputOffset() > r.maxValue {
		return 0, fmt.Errorf("%w (%d bytes)", errValueTooLarge, r.maxValue)
	}
	if r.left <= 0 {
		r.over = true
		return 0, websocket.ErrFrameTooLarge
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	if err := r.conn.SetReadDeadline(time.Now().Add(r.deadline)); err != nil {
		r.err = fmt.Errorf("set read deadline: %w", err)
		return 0, r.err
	}
	n, err := r.conn.Read(p)
	r.left -= int64(n)
	r.read += int64(n)
	if err != nil {
		r.err = err
	}
	return n, err
}
