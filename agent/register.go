package agent

import (
	"context"
	"errors"
	"time"

	"github.com/openflare/openflare-agent/agent/backoff"
	"github.com/openflare/openflare-agent/agent/config"
	"github.com/openflare/openflare-agent/agent/controlplane"
	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/agent/state"
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

// register trades the discovery token for a node token (PROTOCOL 1.2) and
// persists it to agent.json before anything else happens, so a crash or
// restart never registers a second node.
func (a *Agent) register(ctx context.Context) error {
	bo := &backoff.Backoff{Min: time.Second, Max: time.Minute}
	for {
		r, err := a.cp.Register(ctx, a.payload(ctx))
		token := r.Token()
		if err == nil && (r.NodeID == "" || len(r.NodeID) > 128 || !usableToken(token)) {
			err = errNoToken
		}
		if err == nil {
			a.persistToken(ctx, token)
			a.cp.SetToken(token)
			a.cfg.AgentToken, a.cfg.DiscoveryToken = token, ""
			if err := a.store.Update(func(s *state.State) { s.NodeID = r.NodeID }); err != nil {
				a.log.Error("record node id", "err", err)
			}
			a.log.Info("registered with the discovery token", "node_id", r.NodeID)
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := bo.Next()
		switch {
		case controlplane.IsUnauthorized(err):
			a.log.Error("discovery token rejected by the server (HTTP 401): check discovery_token in agent.json", "retry_in", wait)
		case errors.Is(err, errNoToken):
			wait = malformedRetry
			a.log.Error("registration reply carried no usable node id or token; agent.json left unchanged", "retry_in", wait)
		default:
			a.log.Warn("registration failed", "err", err, "retry_in", wait)
		}
		if !backoff.Sleep(ctx, wait) {
			return nil
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
