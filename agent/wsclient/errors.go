package wsclient

import (
	"errors"
	"strings"
)

// ErrDisabled is returned after the server's settings turned the WebSocket
// channel off; the caller falls back to HTTP heartbeats.
var ErrDisabled = errors.New("websocket disabled by server settings")

// ErrTokenRejected is returned when the server answers the handshake with 401.
var ErrTokenRejected = errors.New("server rejected the agent token (HTTP 401)")

// ErrHalfOpen is returned when no frame arrived for Options.ReadDeadline. The
// server pings every 30 s, so silence means the path is dead even if the TCP
// socket still looks open.
var ErrHalfOpen = errors.New("connection half-open")

// redacted hides the token in an error string while keeping the error chain
// for errors.Is. Error texts built here never contain the token, but server
// supplied text (a status line) or a URL could, and the token is a credential.
type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

func redact(err error, token string) error {
	if err == nil || token == "" || !strings.Contains(err.Error(), token) {
		return err
	}
	return &redacted{msg: strings.ReplaceAll(err.Error(), token, "[redacted]"), err: err}
}
