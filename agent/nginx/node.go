package nginx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"openflare/agent/osuser"
)

// Node is a usable nginx binary: the adapter for what it can do and the
// controller of its master, as the apply engine uses them.
type Node struct {
	*Adapter
	*Ctl
}

// FallbackMain adapts the safe fallback config (see ForFallback).
func (n Node) FallbackMain(text string) (string, error) { return n.ForFallback().Main(text) }

// Workers is the identity the workers of a main config get: a rendered
// template's user line, or the line the agent itself wrote into a landed
// config. With fallback an nginx_user that does not exist is passed over.
func (n Node) Workers(mainText string, fallback bool) (osuser.Identity, error) {
	a := n.Adapter
	if fallback {
		a = a.ForFallback()
	}
	return a.Worker(TemplateUser(mainText))
}

// Modules are the load_module paths Main adds: the Lua module (and NDK)
// when the binary does not build it in.
func (n Node) Modules() []string {
	if n.Ctl.Caps.LuaBuiltin {
		return nil
	}
	return n.Ctl.Caps.LuaModules
}

// Usable is nil: this binary runs.
func (Node) Usable() error { return nil }

// ErrUnusable marks every operation on an nginx the agent cannot run (not
// installed, or -V fails). It is a problem of this node, not of a version.
var ErrUnusable = errors.New("nginx binary not usable")

// Unusable stands in for an nginx binary the agent cannot use: nothing
// runs, and every operation fails saying why.
type Unusable struct{ Why string }

func (u Unusable) err() error                                    { return fmt.Errorf("%w: %s", ErrUnusable, u.Why) }
func (u Unusable) Usable() error                                 { return u.err() }
func (u Unusable) Main(string) (string, error)                   { return "", u.err() }
func (u Unusable) FallbackMain(string) (string, error)           { return "", u.err() }
func (u Unusable) Route(text string) string                      { return text }
func (u Unusable) Modules() []string                             { return nil }
func (u Unusable) Workers(string, bool) (osuser.Identity, error) { return osuser.Identity{}, u.err() }
func (u Unusable) Test(context.Context, string) error            { return u.err() }
func (u Unusable) PolicyParse(context.Context, string) error     { return u.err() }
func (u Unusable) Activate(context.Context) error                { return u.err() }
func (u Unusable) Restart(context.Context) error                 { return u.err() }
func (u Unusable) Running() bool                                 { return false }
func (u Unusable) LogMark() int64                                { return 0 }
func (u Unusable) SelfTest(context.Context, int64) error         { return u.err() }
func (u Unusable) Handover(context.Context)                      {}

// Files are where a node's nginx keeps what the agent reads and names.
type Files struct {
	MainConfig, PIDFile, ErrorLog string
}

// Open reads the binary's capabilities and returns the node's nginx: the
// adapter for this binary and host (nginxUser is agent.json's nginx_user)
// and the controller of its master.
func Open(ctx context.Context, bin, nginxUser string, f Files, log *slog.Logger) (Node, error) {
	caps, err := ReadCaps(ctx, bin)
	if err != nil {
		return Node{}, err
	}
	return Node{
		Adapter: &Adapter{Caps: caps, Host: osuser.CurrentHost(), NginxUser: nginxUser},
		Ctl:     &Ctl{Caps: caps, MainConfig: f.MainConfig, PIDFile: f.PIDFile, ErrorLog: f.ErrorLog, Log: log},
	}, nil
}
