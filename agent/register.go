package agent

import (
	"context"
	"errors"
	"time"

	"openflare/agent/backoff"
	"openflare/agent/config"
	"openflare/agent/controlplane"
	"openflare/agent/protocol"
	"openflare/agent/state"
)

// malformedRetry spaces out retries after a register reply without a token:
// every discovery call creates a node on the server, so a server that keeps
// answering badly must not be asked every few seconds.
const malformedRetry = 10 * time.Minute

var errNoToken = errors.New("register reply has no usable node_id or token")

// usableToken reports whether a token from the server can be stored and
// sent back in a header. A CR/LF would break every later request, and
// agent.json with it.
func usableToken(tok string) bool { return protocol.Printable(tok, 256) }

// register trades the discovery token for a node token (PROTOCOL 1.2),
// when the node has none, and persists it to agent.json before anything
// else happens, so a crash or restart never registers a second node. It
// returns once registered or when ctx ends.
func (s *session) register(ctx context.Context) {
	a := s.a
	if a.cfg.AgentToken != "" {
		return
	}
	retry := heartbeatRetry()
	// A rejected token stays rejected until someone edits agent.json or
	// the server's settings: no need to ask every 3 s.
	rejected := &backoff.Backoff{Min: time.Second, Max: time.Minute}
	for {
		r, err := s.srv.Register(ctx, a.payload(ctx))
		token := r.Token()
		if err == nil && (r.NodeID == "" || len(r.NodeID) > 128 || !usableToken(token)) {
			err = errNoToken
		}
		if err == nil {
			a.persistToken(ctx, token)
			s.srv.SetToken(token)
			a.cfg.AgentToken, a.cfg.DiscoveryToken = token, ""
			if err := a.store.Update(func(s *state.State) { s.NodeID = r.NodeID }); err != nil {
				a.log.Error("record node id", "err", err)
			}
			a.log.Info("registered with the discovery token", "node_id", r.NodeID)
			return
		}
		if ctx.Err() != nil {
			return
		}
		wait := retry.Next()
		switch {
		case controlplane.IsUnauthorized(err):
			wait = rejected.Next()
			a.log.Error("discovery token rejected by the server (HTTP 401): check discovery_token in agent.json", "retry_in", wait)
		case errors.Is(err, errNoToken):
			wait = malformedRetry
			a.log.Error("registration reply carried no usable node id or token; agent.json left unchanged", "retry_in", wait)
		default:
			a.log.Log(ctx, retryLevel(retry.Attempts()), "registration failed", "err", err, "retry_in", wait)
		}
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// persistToken writes the token to agent.json, retrying until it sticks:
// going on without it would register again after the next restart.
func (a *Agent) persistToken(ctx context.Context, token string) {
	bo := &backoff.Backoff{Min: time.Second, Max: time.Minute}
	for {
		err := config.PersistToken(a.cfg.Path, token)
		if err == nil {
			return
		}
		wait := bo.Next()
		a.log.Error("cannot save the node token to agent.json; retrying before anything else", "err", err, "retry_in", wait)
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}
