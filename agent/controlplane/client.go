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

	"openflare/agent/protocol"
	"openflare/internal/jsonstream"
)

// Reply caps: bytes on the wire. What a reply may cost in memory is
// bounded separately, by Budgets. An E4 reply is mostly support files,
// which stream to disk (landing.Stage: at most 256 MiB of them, sent as
// JSON strings a few percent longer), beside a source_config_json within
// Budgets.Active.
const (
	CapSmall     = 1 << 20
	CapIPGroups  = 32 << 20
	CapActive    = 512 << 20
	capErrorBody = 64 << 10
)

// Budgets bound the memory one reply may cost once decoded.
type Budgets struct {
	// Active bounds E4's source_config_json, the one large value an apply
	// holds (it is parsed and rendered into text about as large), and each
	// support file, which is held alone while it is staged to disk.
	Active int64
	// Value bounds any other single JSON value (an error text, a setting,
	// an IP-group entry). IP groups and support files cost no more: they
	// stream to disk (agent/ipgroups, landing.Stage), within the reply's
	// cap.
	Value int64
}

// BudgetsFor derives the budgets from the Go memory limit in force, so an
// agent given 32 MiB stays within about 48 MiB of RSS whatever the server
// sends: a config's source costs about four times its size while it is
// decoded, parsed and rendered.
func BudgetsFor(memoryLimit int64) Budgets {
	return Budgets{
		Active: min(max(memoryLimit/4, 2<<20), 64<<20),
		Value:  1 << 20,
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

// bodyAllowance is how long a large reply (an E4 config of hundreds of
// MiB of certificates, IP groups up to 20 MiB) may take to arrive once its headers did: one
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
		agentUA: "openflare/" + agentVersion,
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

// ErrTooLarge marks a reply over its cap.
var ErrTooLarge = errors.New("reply too large")

// Register is E1: register with the discovery token (or re-register).
func (c *Client) Register(ctx context.Context, p *protocol.NodePayload) (protocol.RegisterReply, error) {
	var r protocol.RegisterReply
	err := c.do(ctx, "register", http.MethodPost, protocol.PathRegister, p, &r, CapSmall)
	return r, err
}

// Heartbeat is E2. The reply's waf_ip_groups array is handed to groups
// (ipgroups.Batch.Decode) as it arrives, never decoded into memory whole;
// nil skips it. The reply's WAFIPGroups stays empty.
func (c *Client) Heartbeat(ctx context.Context, p *protocol.NodePayload, groups func(*json.Decoder) error) (protocol.HeartbeatReply, error) {
	var r protocol.HeartbeatReply
	err := c.do(ctx, "heartbeat", http.MethodPost, protocol.PathHeartbeat, p, heartbeatOut{&r, groups}, CapIPGroups)
	return r, err
}

// ActiveConfig is E4. Each support file is handed to files as it is
// decoded (landing.Stage.Add), never held with the others; the reply's
// SupportFiles stays empty.
func (c *Client) ActiveConfig(ctx context.Context, files func(protocol.SupportFile) error) (protocol.ActiveConfig, error) {
	var r protocol.ActiveConfig
	err := c.do(ctx, "active config", http.MethodGet, protocol.PathActive, nil, activeOut{&r, files, c.budgets().Active}, CapActive)
	return r, err
}

// ApplyLog is E5.
func (c *Client) ApplyLog(ctx context.Context, l *protocol.ApplyLog) (protocol.ApplyLogRecord, error) {
	var r protocol.ApplyLogRecord
	err := c.do(ctx, "apply log", http.MethodPost, protocol.PathApplyLogs, l, &r, CapSmall)
	return r, err
}

// SyncIPGroups is E6: the reply's groups array is handed to groups as it
// arrives (ipgroups.Fetch).
func (c *Client) SyncIPGroups(ctx context.Context, req *protocol.IPGroupSyncRequest, groups func(*json.Decoder) error) error {
	return c.do(ctx, "ip group sync", http.MethodPost, protocol.PathIPGroupSync, req, syncOut{groups}, CapIPGroups)
}

// budgets returns the budgets in force.
func (c *Client) budgets() Budgets {
	b := BudgetsFor(32 << 20)
	if c.Budgets.Active > 0 {
		b.Active = c.Budgets.Active
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
	reply := &budgetReader{r: resp.Body, left: limit, valueBudget: c.budgets().Value}
	errorMsg, err := newStream(reply).envelope(out)
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case reply.over:
		return fmt.Errorf("%s: reply exceeds %s: %w", name, mib(limit), ErrTooLarge)
	case reply.valueBig:
		what := reply.what
		if what == "" {
			what = "a value"
		}
		return fmt.Errorf("%s: reply holds %s over %s: %w", name, what, mib(reply.maxValue), ErrValueTooLarge)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) && reply.read > 0:
		return fmt.Errorf("%s: read reply: %w", name, io.ErrUnexpectedEOF)
	case err != nil && reply.err != nil:
		return fmt.Errorf("%s: read reply: %w", name, reply.err)
	case errors.As(err, &syntax) || errors.As(err, &typeErr) || errors.Is(err, jsonstream.ErrShape):
		return fmt.Errorf("%s: reply is not a JSON envelope: %w", name, err)
	case err != nil:
		// The IP groups' or support files' own failure (over a bound of
		// theirs, a scratch file that cannot be written).
		return fmt.Errorf("%s: %w", name, err)
	case errorMsg != "":
		return &Error{Endpoint: name, Status: resp.StatusCode, Message: protocol.Bound(errorMsg, maxMessage)}
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
		return protocol.Bound(env.ErrorMsg, maxMessage)
	}
	return ""
}
