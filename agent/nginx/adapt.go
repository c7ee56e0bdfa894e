package nginx

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/user"
	"regexp"
	"strconv"
	"strings"
)

// Host describes the process the agent runs as, which decides what the
// template's `user` directive may say.
type Host struct {
	EUID int
	// SingleUID is true inside a user namespace that maps one uid only
	// (e.g. `unshare --map-root-user`): nginx cannot switch to any other
	// user there, not even nobody.
	SingleUID bool
}

// CurrentHost reads the running process's situation.
func CurrentHost() Host {
	return Host{EUID: os.Geteuid(), SingleUID: singleUIDMap("/proc/self/uid_map")}
}

// singleUIDMap reports whether uid_map maps exactly one uid.
func singleUIDMap(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var total uint64
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) != 3 {
			return false
		}
		n, err := strconv.ParseUint(fields[2], 10, 64)
		if err != nil {
			return false
		}
		total += n
	}
	return total == 1
}

// ErrNoLua is returned when a config needs Lua and the binary cannot load it.
var ErrNoLua = errors.New("no Lua support")

var (
	userLineRe  = regexp.MustCompile(`(?m)^([ \t]*)user[ \t]+([^;\n]+);[^\n]*$`)
	listenSSLRe = regexp.MustCompile(`^\s*listen\s[^;]*\bssl\b[^;]*;`)
	quicLineRe  = regexp.MustCompile(`^\s*(listen\s[^;]*\bquic\b[^;]*;|http3\s[^;]*;|quic_[a-z_]+\s[^;]*;|add_header\s+Alt-Svc\s.*h3.*;)\s*$`)
)

// Adapter rewrites rendered text for the binary actually installed, because
// edge boxes run distribution nginx as often as OpenResty.
type Adapter struct {
	Caps *Caps
	Host Host
	// LookupUser reports whether a system user exists (os/user by default).
	LookupUser func(name string) bool
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
	}
	return notes
}

// Main adapts a main config (rendered or the fallback).
func (a *Adapter) Main(text string) (string, error) {
	text = a.protocols(text)
	text = a.user(text)
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
			if quicLineRe.MatchString(l) {
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
				if drop[j] || indent(lines[j]) != ind || !listenSSLRe.MatchString(lines[j]) || strings.Contains(lines[j], " http2") {
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

// user applies the host's rule for the `user` directive.
func (a *Adapter) user(text string) string {
	if a.Host.EUID == 0 && a.Host.SingleUID && !userLineRe.MatchString(text) {
		// Without a user line a root master switches workers to nobody,
		// which does not exist in a one-uid namespace.
		text = "user root root;\n" + text
	}
	return userLineRe.ReplaceAllStringFunc(text, func(line string) string {
		m := userLineRe.FindStringSubmatch(line)
		lead, args := m[1], strings.Fields(m[2])
		switch {
		case a.Host.EUID != 0:
			return lead + "# user directive dropped by openflare-agent: not running as root"
		case a.Host.SingleUID:
			u, g := "root", "root"
			if cur, err := user.LookupId("0"); err == nil {
				u = cur.Username
			}
			if grp, err := user.LookupGroupId("0"); err == nil {
				g = grp.Name
			}
			return fmt.Sprintf("%suser %s %s;", lead, u, g)
		case len(args) > 0 && !a.lookupUser(args[0]):
			return lead + "# user directive dropped by openflare-agent: user " + args[0] + " does not exist"
		}
		return line
	})
}

func (a *Adapter) lookupUser(name string) bool {
	if a.LookupUser != nil {
		return a.LookupUser(name)
	}
	_, err := user.Lookup(name)
	return err == nil
}
