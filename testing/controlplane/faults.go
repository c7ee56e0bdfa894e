package controlplane

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"openflare/agent/protocol"
)

// Fault is one injected misbehaviour of the agent API. Set one behaviour;
// Delay may be combined with another one, which then follows the sleep.
type Fault struct {
	// Path is the endpoint path (e.g. protocol.PathHeartbeat); "" matches
	// every agent endpoint (never the admin API).
	Path string
	// Times is how many matching requests the fault hits; 0 means 1.
	Times int
	// Status answers with this status and the server's error envelope.
	Status int
	// Delay sleeps before answering, aborted when the server goes down.
	Delay time.Duration
	// Truncate sends the real reply's status and Content-Length, then only
	// half of its body, then closes the connection.
	Truncate bool
	// Oversize answers 200 with a valid JSON envelope padded (a long string
	// inside data) to exactly this many bytes, streamed.
	Oversize int64
	// Drop closes the TCP connection without any reply.
	Drop bool
	// Garbage answers 200 with a body that is not JSON.
	Garbage bool
	// RedirectTo answers 307 to this base URL plus the request's path (a
	// hostile or hijacked server sending the agent, and its token,
	// elsewhere).
	RedirectTo string
}

// GarbageBody is the body a Garbage fault sends.
const GarbageBody = "<html><body><h1>502 Bad Gateway</h1></body></html>\n"

// Oversize body framing: prefix + padding + suffix is valid JSON.
const (
	oversizePrefix = `{"error_msg":"","data":{"padding":"`
	oversizeSuffix = `"}}`
)

// Inject queues a fault; faults are used in the order they were queued.
func (s *Server) Inject(f Fault) {
	if f.Times <= 0 {
		f.Times = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// takeFaultLocked consumes one use of the first queued fault matching path.
func (s *Server) takeFaultLocked(path string) *Fault {
	if !strings.HasPrefix(path, protocol.APIPrefix+"/") {
		return nil
	}
	for i, f := range s.faults {
		if f.Path != "" && f.Path != path {
			continue
		}
		f.Times--
		if f.Times == 0 {
			s.faults = append(s.faults[:i], s.faults[i+1:]...)
		}
		return f
	}
	return nil
}

// applyFault acts out f. It returns false when the request should still be
// served normally (a plain Delay).
func (s *Server) applyFault(w http.ResponseWriter, r *http.Request, f *Fault, done <-chan struct{}, next http.HandlerFunc) bool {
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-done:
			s.drop(w)
			return true
		case <-r.Context().Done():
			return true
		}
	}
	switch {
	case f.Drop:
		s.drop(w)
	case f.Truncate:
		s.truncate(w, r, next)
	case f.Oversize > 0:
		s.oversize(w, f.Oversize, done)
	case f.RedirectTo != "":
		http.Redirect(w, r, strings.TrimRight(f.RedirectTo, "/")+r.URL.Path, http.StatusTemporaryRedirect)
	case f.Garbage:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, GarbageBody)
	case f.Status != 0:
		writeError(w, f.Status, faultMessage(f.Status, r.URL.Path))
	default:
		return false
	}
	return true
}

// drop closes the request's connection without any reply.
func (s *Server) drop(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.log().Debug("fault drop: hijack", "err", err)
		return
	}
	conn.Close()
}

func faultMessage(status int, path string) string {
	switch status {
	case http.StatusUnauthorized:
		if path == protocol.PathRegister {
			return msgBadRegisterToken
		}
		return msgBadAgentToken
	case http.StatusBadRequest:
		return msgBind
	case http.StatusInternalServerError:
		return msgInternal
	}
	return http.StatusText(status)
}

// truncate serves the request into a buffer, then writes the real status,
// headers and Content-Length but only the first half of the body, and
// closes the connection.
func (s *Server) truncate(w http.ResponseWriter, r *http.Request, next http.HandlerFunc) {
	buf := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
	next(buf, r)
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.log().Error("fault truncate: hijack", "err", err)
		return
	}
	defer conn.Close()
	body := buf.body.Bytes()
	buf.header.Set("Content-Length", strconv.Itoa(len(body)))
	buf.header.Set("Connection", "close")
	fmt.Fprintf(brw, "HTTP/1.1 %d %s\r\n", buf.status, http.StatusText(buf.status))
	buf.header.Write(brw)
	brw.WriteString("\r\n")
	brw.Write(body[:len(body)/2])
	if err := brw.Flush(); err != nil {
		s.log().Debug("fault truncate: write", "err", err)
	}
}

// oversize streams a valid JSON envelope of exactly n bytes (at least the
// envelope's own framing).
func (s *Server) oversize(w http.ResponseWriter, n int64, done <-chan struct{}) {
	n = max(n, int64(len(oversizePrefix)+len(oversizeSuffix)))
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := io.WriteString(w, oversizePrefix); err != nil {
		return
	}
	chunk := bytes.Repeat([]byte{'x'}, 64<<10)
	for left := n - int64(len(oversizePrefix)+len(oversizeSuffix)); left > 0; {
		select {
		case <-done:
			return
		default:
		}
		c := chunk[:min(left, int64(len(chunk)))]
		if _, err := w.Write(c); err != nil {
			return
		}
		left -= int64(len(c))
	}
	io.WriteString(w, oversizeSuffix)
}

// bufferedResponse captures a handler's reply for Truncate. It cannot be
// hijacked, so the WebSocket endpoint answers it with an error.
type bufferedResponse struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if !b.wroteHeader {
		b.status, b.wroteHeader = code, true
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.wroteHeader = true
	return b.body.Write(p)
}
