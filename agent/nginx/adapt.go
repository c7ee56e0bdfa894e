package nginx

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"openflare/agent/osuser"
)

// ErrNoLua is returned when a config needs Lua and the binary cannot load it.
var ErrNoLua = errors.New("no Lua support")

// directive splits a config line into its directive name and the words
// before the first ';'. ok is false for lines that are not one simple
// directive (blocks, comments, blank lines).
func directive(line string) (name string, args []string, ok bool) {
	body, _, found := strings.Cut(line, ";")
	f := strings.Fields(body)
	if !found || len(f) == 0 || strings.ContainsAny(body, "{}#") {
		return "", nil, false
	}
	return f[0], f[1:], true
}

// listensWith reports whether line is a listen directive with parameter p.
func listensWith(line, p string) bool {
	name, args, ok := directive(line)
	return ok && name == "listen" && slices.Contains(args, p)
}

// isHTTP3Line reports whether line only makes sense with HTTP/3: a QUIC
// listener, an http3 or quic_* directive, or the Alt-Svc header
// advertising h3.
func isHTTP3Line(line string) bool {
	t := strings.TrimSpace(line)
	if !strings.HasSuffix(t, ";") {
		return false
	}
	if rest, ok := strings.CutPrefix(t, "add_header"); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "\t")) {
		rest = strings.TrimLeft(rest, " \t")
		return strings.HasPrefix(rest, "Alt-Svc") && strings.Contains(rest, "h3")
	}
	name, _, ok := directive(t)
	return ok && strings.Count(t, ";") == 1 && (listensWith(t, "quic") || name == "http3" || strings.HasPrefix(name, "quic_"))
}

// Adapter rewrites rendered text for the binary actually installed, because
// edge boxes run distribution nginx as often as OpenResty (step 3 of the
// rewriting apply's transaction names).
type Adapter struct {
	Caps  *Caps
	Host  osuser.Host
	Users osuser.DB
	// NginxUser is agent.json's nginx_user: the owner's choice of worker
	// user, which wins over the template's.
	NginxUser string
	// fallback adapts the safe fallback, which must start whatever else
	// holds the node's ports: it listens on port 80 alone.
	fallback bool
}

// Notes lists the adaptations this binary and host need, for the start-up
// log and `check`.
func (a *Adapter) Notes() []string {
	c := a.Caps
	var notes []string
	if !c.AtLeast(1, 25, 1) {
		if c.HTTP2 {
			notes = append(notes, fmt.Sprintf("`http2 on;` becomes `listen ... http2` (nginx core %d.%d.%d < 1.25.1)", c.Core[0], c.Core[1], c.Core[2]))
		} else {
			notes = append(notes, "`http2 on;` dropped: the binary has no HTTP/2 module")
		}
	}
	if !c.HTTP3 {
		notes = append(notes, "QUIC/HTTP3 listeners and Alt-Svc headers dropped: the binary has no HTTP/3 module")
	}
	switch {
	case c.LuaBuiltin:
	case len(c.LuaModules) > 0:
		notes = append(notes, "load_module added for "+strings.Join(c.LuaModules, ", "))
	default:
		notes = append(notes, "no Lua module found: configs that use Lua cannot be applied")
	}
	switch {
	case a.Host.EUID != 0:
		notes = append(notes, "`user` directive dropped: the agent is not root, so nginx workers run as the agent's user")
	case a.Host.SingleUID:
		notes = append(notes, "`user` directive replaced by the only user of this user namespace")
	default:
		notes = append(notes, "`user` directive set to the worker identity: agent.json nginx_user, else the template's user if it exists and is not root, else "+strings.Join(osuser.Fallbacks, " or "))
	}
	return notes
}

// Main adapts a main config (rendered or the fallback).
func (a *Adapter) Main(text string) (string, error) {
	text = a.protocols(text)
	text = a.rejectUnknownNames(text)
	text, err := a.user(text)
	if err != nil {
		return "", err
	}
	if usesLua(text) && !strings.Contains(text, "ngx_http_lua_module") {
		if !a.Caps.HasLua() {
			return "", fmt.Errorf("%w: %s has no lua-nginx-module compiled in and no ngx_http_lua_module.so was found; install OpenResty or Debian's libnginx-mod-http-lua", ErrNoLua, a.Caps.Binary)
		}
		if !a.Caps.LuaBuiltin {
			var b strings.Builder
			for _, m := range a.Caps.LuaModules {
				fmt.Fprintf(&b, "load_module %s;\n", m)
			}
			text = b.String() + text
		}
	}
	return text, nil
}

// rejectUnknownServer refuses a TLS handshake for a name no site has.
const rejectUnknownServer = `    # openflare-agent: a TLS handshake for a name no site has is refused.
    server {
        listen 443 ssl default_server;
        ssl_reject_handshake on;
    }
`

// rejectUnknownNames gives a main config that sets no default server for
// port 443 one that refuses the handshake (nginx 1.19.4 and later), as the
// stock template's does: otherwise the first HTTPS site is port 443's default, and its
// certificate and content answer any name a client asks for. A template
// that chose its own default server keeps it.
func (a *Adapter) rejectUnknownNames(text string) string {
	if a.fallback || !a.Caps.AtLeast(1, 19, 4) || strings.Contains(text, "ssl_reject_handshake") {
		return text
	}
	lines := strings.SplitAfter(text, "\n")
	at := -1
	for i, l := range lines {
		for rest := l; ; {
			_, after, ok := strings.Cut(rest, "listen ")
			if !ok {
				break
			}
			args, _, _ := strings.Cut(after, ";")
			if f := strings.Fields(args); len(f) > 0 && strings.HasSuffix(f[0], "443") && slices.Contains(f, "default_server") {
				return text
			}
			rest = after
		}
		if t := strings.TrimSpace(l); at < 0 && (t == "http {" || t == "http{") {
			at = i + 1
		}
	}
	if at < 0 {
		return text
	}
	return strings.Join(lines[:at], "") + rejectUnknownServer + strings.Join(lines[at:], "")
}

// Route adapts a route config.
func (a *Adapter) Route(text string) string { return a.protocols(text) }

func usesLua(text string) bool {
	return strings.Contains(text, "_by_lua") || strings.Contains(text, "lua_shared_dict") || strings.Contains(text, "lua_package_path")
}

// protocols rewrites `http2 on;` for cores below 1.25.1 and drops QUIC
// lines when the binary lacks HTTP/3.
func (a *Adapter) protocols(text string) string {
	needH2 := !a.Caps.AtLeast(1, 25, 1) && strings.Contains(text, "http2 on;")
	needH3 := !a.Caps.HTTP3 && (strings.Contains(text, "quic") || strings.Contains(text, "Alt-Svc") || strings.Contains(text, "http3"))
	if !needH2 && !needH3 {
		return text
	}
	lines := strings.Split(text, "\n")
	drop := make([]bool, len(lines))
	if needH3 {
		for i, l := range lines {
			if isHTTP3Line(l) {
				drop[i] = true
			}
		}
	}
	if needH2 {
		for i, l := range lines {
			if strings.TrimSpace(l) != "http2 on;" {
				continue
			}
			drop[i] = true
			if !a.Caps.HTTP2 {
				continue
			}
			start, end := enclosingBlock(lines, i)
			ind := indent(l)
			for j := start + 1; j < end; j++ {
				if drop[j] || indent(lines[j]) != ind || !listensWith(lines[j], "ssl") || strings.Contains(lines[j], " http2") {
					continue
				}
				k := strings.LastIndexByte(lines[j], ';')
				lines[j] = lines[j][:k] + " http2" + lines[j][k:]
			}
		}
	}
	out := lines[:0]
	for i, l := range lines {
		if !drop[i] {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// enclosingBlock finds the `server {` line above line i and the `}` closing
// it at the same indentation. Rendered configs are indented consistently,
// which makes this reliable without parsing the Lua inside some blocks.
func enclosingBlock(lines []string, i int) (int, int) {
	ind := indent(lines[i])
	start := -1
	for j := i - 1; j >= 0; j-- {
		t := strings.TrimSpace(lines[j])
		if (t == "server {" || t == "server{") && indent(lines[j]) < ind {
			start = j
			break
		}
	}
	if start < 0 {
		return i, i
	}
	closeInd := indent(lines[start])
	for j := i + 1; j < len(lines); j++ {
		if strings.TrimSpace(lines[j]) == "}" && indent(lines[j]) == closeInd {
			return start, j
		}
	}
	return start, len(lines)
}

func indent(l string) int { return len(l) - len(strings.TrimLeft(l, " \t")) }

// ForFallback is the adapter for the safe fallback config: the fallback
// must start when nothing else can, so an nginx_user that does not exist
// gives way to the system fallback users instead of failing it too.
func (a *Adapter) ForFallback() *Adapter {
	b := *a
	b.NginxUser, b.fallback = "", true
	return &b
}

// Worker is the identity workers get from a main config naming template
// as its user ("" for none).
func (a *Adapter) Worker(template string) (osuser.Identity, error) {
	return a.Users.Resolve(a.Host, a.NginxUser, template)
}

// TemplateUser is the argument of a main config's first `user` directive
// ("name" or "name group"), or "".
func TemplateUser(text string) string {
	for _, l := range strings.Split(text, "\n") {
		if name, args, ok := directive(l); ok && name == "user" && len(args) > 0 {
			return strings.Join(args, " ")
		}
	}
	return ""
}

// user writes the worker identity's `user` line: one line, first in the
// file, replacing whatever the template said; dropped when the agent is
// not root (workers cannot switch users then).
func (a *Adapter) user(text string) (string, error) {
	lines := strings.SplitAfter(text, "\n")
	var at []int
	for i, l := range lines {
		if name, args, ok := directive(strings.TrimRight(l, "\n")); ok && name == "user" && len(args) > 0 {
			at = append(at, i)
		}
	}
	id, err := a.Worker(TemplateUser(text))
	if err != nil {
		return "", err
	}
	for n, i := range at {
		l := lines[i]
		body := strings.TrimRight(l, "\n")
		lead := body[:len(body)-len(strings.TrimLeft(body, " \t"))]
		switch {
		case id.Directive == "":
			body = lead + "# user directive dropped by openflare-agent: not running as root"
		case n == 0:
			body = lead + id.Directive + " # openflare-agent: " + id.Why
		default:
			body = lead + "# duplicate user directive dropped by openflare-agent"
		}
		lines[i] = body + l[len(strings.TrimRight(l, "\n")):]
	}
	if len(at) == 0 && id.Directive != "" {
		// Without a user line a root master switches workers to nginx's
		// compiled-in default, which may not exist (or be the wrong one).
		return id.Directive + " # openflare-agent: " + id.Why + "\n" + text, nil
	}
	return strings.Join(lines, ""), nil
}
