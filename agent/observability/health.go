package observability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"openflare/agent/protocol"
)

const (
	// healthBudget is for both loopback requests together (PROTOCOL 12.3).
	healthBudget = 1500 * time.Millisecond
	// maxHealthBody bounds what is read from either endpoint; both answer
	// with a few dozen bytes.
	maxHealthBody = 64 << 10

	stubStatusPath    = "/openflare/stub_status"
	observabilityPath = "/openflare/observability"
)

// healthCheck asks the local OpenResty how it is (PROTOCOL 12.3).
type healthCheck struct {
	client     *http.Client
	ownClient  bool   // created here, so its idle connections are ours to close
	base       string // http://127.0.0.1:<port>
	mainConfig string
}

// healthResult is one health check. checked is false when no main config exists
// yet, so there is no OpenResty to ask and its status is left alone.
type healthResult struct {
	checked     bool
	status, msg string
	connections int64
}

func newHealthCheck(client *http.Client, port int, mainConfig string) *healthCheck {
	own := client == nil
	if own {
		client = &http.Client{Transport: &http.Transport{
			// Loopback only: never through a proxy from the environment.
			Proxy:               nil,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     30 * time.Second,
		}}
	}
	return &healthCheck{
		client:     client,
		ownClient:  own,
		base:       "http://127.0.0.1:" + strconv.Itoa(port),
		mainConfig: mainConfig,
	}
}

type fetched struct {
	code int
	body []byte
	err  error
}

func (p *healthCheck) check(ctx context.Context) healthResult {
	if _, err := os.Stat(p.mainConfig); errors.Is(err, fs.ErrNotExist) {
		return healthResult{}
	}
	ctx, cancel := context.WithTimeout(ctx, healthBudget)
	defer cancel()
	// Both requests run at once so together they fit the budget.
	var stub, obs fetched
	var wg sync.WaitGroup
	wg.Go(func() { stub = p.get(ctx, stubStatusPath) })
	wg.Go(func() { obs = p.get(ctx, observabilityPath) })
	wg.Wait()

	r := healthResult{checked: true}
	switch {
	case stub.err != nil:
		r.status, r.msg = protocol.StatusUnhealthy, "openresty health endpoint unreachable: "+stub.err.Error()
	case stub.code != http.StatusOK:
		r.status, r.msg = protocol.StatusUnhealthy, fmt.Sprintf("openresty health endpoint returned %d", stub.code)
	default:
		r.status = protocol.StatusHealthy
	}
	if n, ok := luaConnections(obs); ok {
		r.connections = n
	} else if stub.err == nil && stub.code == http.StatusOK {
		// The fallback config serves only stub_status.
		r.connections = stubConnections(stub.body)
	}
	return r
}

func (p *healthCheck) close() {
	if p.ownClient {
		p.client.CloseIdleConnections()
	}
}

func (p *healthCheck) get(ctx context.Context, path string) fetched {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	if err != nil {
		return fetched{err: fmt.Errorf("build request: %w", err)}
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return fetched{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHealthBody))
	if err != nil {
		return fetched{code: resp.StatusCode, err: fmt.Errorf("read %s: %w", path, err)}
	}
	return fetched{code: resp.StatusCode, body: body}
}

// luaConnections reads connections.active from the observability endpoint.
// The endpoint answers 200 with ok false when its own stub_status
// subrequest failed; that reading is not used.
func luaConnections(f fetched) (int64, bool) {
	if f.err != nil || f.code != http.StatusOK {
		return 0, false
	}
	var v struct {
		OK          *bool `json:"ok"`
		Connections *struct {
			Active int64 `json:"active"`
		} `json:"connections"`
	}
	if json.Unmarshal(f.body, &v) != nil || v.Connections == nil || (v.OK != nil && !*v.OK) {
		return 0, false
	}
	return v.Connections.Active, true
}

// stubConnections reads "Active connections: N" from a stub_status page.
func stubConnections(body []byte) int64 {
	const label = "Active connections:"
	i := bytes.Index(body, []byte(label))
	if i < 0 {
		return 0
	}
	rest := bytes.TrimLeft(body[i+len(label):], " \t")
	end := 0
	for end < len(rest) && isDigit(rest[end]) {
		end++
	}
	n, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	if err != nil {
		return 0
	}
	return n
}
