// Package controlplane is the agent's HTTP client for the OpenFlare Server
// (PROTOCOL 0, E1, E2, E4–E6). Every call goes under /api/v1/agent with the
// X-Agent-Token header, every reply is size-capped, and no error text ever
// carries the token.
package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/openflare/openflare-agent/agent/protocol"
)

// Reply caps: bytes on the wire. What a reply may cost in memory is
// bounded separately, by Budgets.
const (
	CapSmall     = 1 << 20
	CapIPGroups  = 32 << 20
	CapActive    = 64 << 20
	capErrorBody = 64 << 10
)

// Budgets bound the memory one reply may cost once decoded.
type Budgets struct {
	// Active caps the E4 reply, and any single value in it: a config is
	// mostly one string (source_config_json), rendered afterwards into
	// text about as large.
	Active int64
	// Entries bounds the IP-group entries one reply may hold once decoded
	// (text plus a string header each); a group past it is rejected alone.
	Entries int64
	// Value bounds any other single JSON value (an error text, a setting).
	Value int64
}

// BudgetsFor derives the budgets from the Go memory limit in force, so an
// agent given 32 MiB stays within about 48 MiB of RSS whatever the server
// sends: an E4 reply costs about four times its size while it is decoded,
// parsed and rendered, and IP-group entries about three times theirs while
// they are verified and landed.
func BudgetsFor(memoryLimit int64) Budgets {
	return Budgets{
		Active:  min(max(memoryLimit/4, 2<<20), CapActive),
		Entries: min(max(memoryLimit/4, 1<<20), CapIPGroups),
		Value:   1 << 20,
	}
}

// Client talks to one control plane.
type Client struct {
	// Budgets bound what a reply may cost; the agent sets them from
	// memory_limit (BudgetsFor). Zero fields take the 32 MiB defaults.
	Budgets Budgets

	base    string
	http    *http.Client
	agentUA string
	timeout time.Duration

	mu    sync.RWMutex
	token string
}

// bodyAllowance is how long a large reply (an E4 config up to 64 MiB, IP
// groups up to 20 MiB) may take to arrive once its headers did: one
// request_timeout for everything (upstream's choice) fails large replies on
// slow uplinks for ever.
const bodyAllowance = 5 * time.Minute

// New returns a client for baseURL (already validated: http or https, no
// credentials) sending token. timeout bounds connecting and the reply's
// headers, and the whole of small replies.
func New(baseURL, token, agentVersion string, timeout time.Duration) *Client {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          2,
	}
	return &Client{
		base: strings.TrimRight(baseURL, "/"),
		// The token travels in a header Go would carry to wherever a
		// redirect points (it strips only Authorization and Cookie), and
		// across an https→http downgrade: no redirect is followed.
		http: &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			return fmt.Errorf("%w to %s://%s%s", ErrRedirect, req.URL.Scheme, req.URL.Host, req.URL.Path)
		}},
		agentUA: "openflare-agent/" + agentVersion,
		timeout: timeout,
		token:   token,
	}
}

// SetToken switches the token used from now on (after registration).
func (c *Client) SetToken(tok string) {
	c.mu.Lock()
	c.token = tok
	c.mu.Unlock()
}

// Token returns the token in use.
func (c *Client) Token() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.token
}

// CloseIdle drops idle keep-alive connections.
func (c *Client) CloseIdle() { c.http.CloseIdleConnections() }

// Error is a failed call: a non-200 status or a 200 whose envelope carries
// error_msg.
type Error struct {
	Endpoint string // e.g. "heartbeat"
	Status   int
	Message  string
}

// NoActiveVersion reports whether err is E4's answer when the server has
// no active version yet (HTTP 400): nothing to apply, not a failure.
func NoActiveVersion(err error) bool {
	var apiErr *Error
	return errors.As(err, &apiErr) && apiErr.Status == http.StatusBadRequest
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%s: HTTP %d %s", e.Endpoint, e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.Endpoint, e.Status, e.Message)
}

// IsUnauthorized reports whether err is a 401 from the server.
func IsUnauthorized(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusUnauthorized
}

// ErrRedirect marks a reply that tried to send the agent elsewhere.
var ErrRedirect = errors.New("the server answered with a redirect, not followed")

// maxMessage bounds a server's error text before it is stored, logged or
// echoed in the next beat.
const maxMessage = 512

// bounded cuts s to at most max bytes (on a rune boundary) and marks the cut.
func bounded(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d bytes cut)", len(s)-cut)
}

// ErrTooLarge marks a reply over its cap.
var ErrTooLarge = errors.New("reply too large")

// Register is E1: register with the discovery token (or re-register).
func (c *Client) Register(ctx context.Context, p *protocol.NodePayload) (protocol.RegisterReply, error) {
	var r protocol.RegisterReply
	err := c.do(ctx, "register", http.MethodPost, protocol.PathRegister, p, &r, CapSmall)
	return r, err
}

// Heartbeat is E2.
func (c *Client) Heartbeat(ctx context.Context, p *protocol.NodePayload) (protocol.HeartbeatReply, error) {
	var r protocol.HeartbeatReply
	err := c.do(ctx, "heartbeat", http.MethodPost, protocol.PathHeartbeat, p, &r, CapIPGroups)
	return r, err
}

// ActiveConfig is E4.
func (c *Client) ActiveConfig(ctx context.Context) (protocol.ActiveConfig, error) {
	var r protocol.ActiveConfig
	err := c.do(ctx, "active config", http.MethodGet, protocol.PathActive, nil, &r, c.budgets().Active)
	return r, err
}

// ApplyLog is E5.
func (c *Client) ApplyLog(ctx context.Context, l *protocol.ApplyLog) (protocol.ApplyLogRecord, error) {
	var r protocol.ApplyLogRecord
	err := c.do(ctx, "apply log", http.MethodPost, protocol.PathApplyLogs, l, &r, CapSmall)
	return r, err
}

// SyncIPGroups is E6.
func (c *Client) SyncIPGroups(ctx context.Context, req *protocol.IPGroupSyncRequest) (protocol.IPGroupSyncReply, error) {
	var r protocol.IPGroupSyncReply
	err := c.do(ctx, "ip group sync", http.MethodPost, protocol.PathIPGroupSync, req, &r, CapIPGroups)
	return r, err
}

// budgets returns the budgets in force.
func (c *Client) budgets() Budgets {
	b := BudgetsFor(32 << 20)
	if c.Budgets.Active > 0 {
		b.Active = c.Budgets.Active
	}
	if c.Budgets.Entries > 0 {
		b.Entries = c.Budgets.Entries
	}
	if c.Budgets.Value > 0 {
		b.Value = c.Budgets.Value
	}
	return b
}

// do sends one JSON call and decodes the envelope's data into out. Errors
// name the endpoint; they never contain the token (it only travels in a
// header, and net/http errors quote the URL, which carries none).
func (c *Client) do(ctx context.Context, name, method, path string, in, out any, limit int64) error {
	timeout := c.timeout
	if limit > CapSmall {
		timeout = max(timeout, bodyAllowance)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: encode request: %w", name, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.agentUA)
	req.Header.Set(protocol.TokenHeader, c.Token())
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &Error{Endpoint: name, Status: resp.StatusCode, Message: errorMessage(resp.Body)}
	}
	budgets := c.budgets()
	// E4 is mostly one string: its value budget is the whole reply's.
	maxValue := budgets.Value
	if limit > maxValue && path == protocol.PathActive {
		maxValue = limit
	}
	reply := &budgetReader{r: resp.Body, left: limit, maxValue: maxValue}
	errorMsg, err := newStream(reply, budgets.Entries).envelope(out)
	switch {
	case reply.over:
		return fmt.Errorf("%s: reply exceeds %s: %w", name, mib(limit), ErrTooLarge)
	case reply.valueBig:
		return fmt.Errorf("%s: reply holds a value over %s: %w", name, mib(maxValue), ErrValueTooLarge)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) && reply.read > 0:
		return fmt.Errorf("%s: read reply: %w", name, io.ErrUnexpectedEOF)
	case err != nil && reply.err != nil:
		return fmt.Errorf("%s: read reply: %w", name, reply.err)
	case err != nil:
		return fmt.Errorf("%s: reply is not a JSON envelope: %w", name, err)
	case errorMsg != "":
		return &Error{Endpoint: name, Status: resp.StatusCode, Message: bounded(errorMsg, maxMessage)}
	}
	return nil
}

// mib formats a byte budget for an error.
func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// errorMessage extracts error_msg from an error reply, or nothing when the
// body is not the JSON envelope (e.g. a proxy's HTML page).
func errorMessage(r io.Reader) string {
	data, _ := io.ReadAll(io.LimitReader(r, capErrorBody))
	var env protocol.Envelope
	if json.Unmarshal(data, &env) == nil {
		return bounded(env.ErrorMsg, maxMessage)
	}
	return ""
}
