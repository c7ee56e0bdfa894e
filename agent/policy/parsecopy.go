package policy

import (
	"fmt"
	"slices"
	"strings"
)

// ParseCopy is the copy of the adapted main config that nginx itself must
// accept, with no module loaded, before the real one goes anywhere near
// nginx (the policy's nginx parse): the second guard, which holds even
// where the policy's reader and nginx's disagree.
//
// Every directive that gives a config reach beyond its sites (running
// code, loading a module, naming a file, connecting a socket, changing
// the process; reach, below) has a name containing one of a few words.
// Each occurrence of such a word anywhere in the text, in names, words,
// strings and comments alike, gets one letter upper-cased, except where
// the policy's reader found, on one line of plain words, a directive the
// policy accepted. nginx's directive names are lower-case and matched
// exactly, so any such directive nginx reads where the policy did not
// becomes one nginx does not know, and `nginx -t` of this text fails
// naming it. Upper-casing a letter changes no byte's class in nginx's
// reader (a letter stays a letter), so nginx splits this text into exactly
// the words and directives it splits the real one into, whatever the
// policy's reader thought; and variable names, host names and paths
// keep their meaning (nginx matches those without regard to case) wherever
// validation of the copy reads them.
//
// The agent's own Lua directives (lua_shared_dict, *_by_lua_file of the
// agent's files) and its load_module lines become stand-ins of the same
// shape that nginx knows without a module, so the parse needs neither the
// Lua module nor the agent's Lua.
func (p Policy) ParseCopy(adapted string, modules []string) (string, error) {
	dirs, err := parseText(adapted, false, p.Blind)
	if err != nil {
		return "", fmt.Errorf("%w: main config: %v", ErrRefused, err)
	}
	type span struct {
		start, end int
		standIn    string // "" keeps the text
	}
	var kept []span
	for i, d := range dirs {
		own := ownModule(d, modules) || d.name == "user"
		if !plainDirective(adapted, d) || p.directive(d) != "" && !own {
			continue
		}
		s := span{start: d.start, end: d.end}
		switch {
		case ownModule(d, modules):
			s.standIn = "env openflare_parse;"
		case d.name == "lua_shared_dict" && len(d.args) == 2:
			s.standIn = fmt.Sprintf("log_format openflare_parse_%d x;", i)
		case agentLuaDirectives[d.name] && len(d.args) == 1:
			s.standIn = "access_log off;"
		case strings.Contains(d.name, "lua"):
			continue
		}
		kept = append(kept, s)
	}
	// A word of reach lies wholly inside a kept directive or wholly
	// outside every one: a kept directive starts after a separator and
	// ends with ';', and no word of reach holds either.
	inKept := func(at int) bool {
		_, found := slices.BinarySearchFunc(kept, at, func(s span, at int) int {
			switch {
			case s.end <= at:
				return -1
			case s.start > at:
				return 1
			}
			return 0
		})
		return found
	}
	b := []byte(adapted)
	lower := strings.ToLower(adapted)
	for _, w := range reach {
		caseless := caselessReach[w]
		for at := 0; ; {
			text := adapted
			if caseless {
				text = lower
			}
			i := strings.Index(text[at:], w)
			if i < 0 {
				break
			}
			i += at
			at = i + 1
			if inKept(i) {
				continue
			}
			j := i + strings.IndexFunc(w, func(r rune) bool { return r >= 'a' && r <= 'z' })
			if caseless {
				// nginx reads this word in any case: only another letter
				// takes its meaning away.
				b[j] = 'X'
			} else {
				b[j] = b[j] - 'a' + 'A'
			}
		}
	}
	var out strings.Builder
	last := 0
	for _, s := range kept {
		if s.standIn == "" {
			continue
		}
		out.Write(b[last:s.start])
		out.WriteString(s.standIn)
		last = s.end
	}
	out.Write(b[last:])
	return out.String(), nil
}

// reach are the words in the names of every directive that reaches
// beyond the sites: code (Lua, Perl, njs, modules, OpenSSL engines and
// commands), files (includes, logs, roots, certificates and keys, temp
// and cache paths, password files, WebDAV, stores), sockets (listeners,
// *_pass targets, upstream blocks and their servers, unix: URLs) and the
// process (its user, environment, directories, daemon mode).
var reach = []string{
	"_by_lua", "lua_", "perl", "js_", "load_module", "ssl_engine", "ssl_conf_command",
	"include", "access_log", "error_log", "pid", "root", "alias", "_temp_path", "_cache_path",
	"_certificate", "_dhparam", "_crl", "_password_file", "_stapling_file", "_ticket_key",
	"auth_basic_user_file", "proxy_store", "dav_", "geoip_", "xslt_", "image_filter",
	"listen", "_pass", "upstream", "server", "unix:",
	"user", "env", "lock_file", "working_directory", "daemon", "master_process",
}

// caselessReach are the words of reach nginx reads in any case.
var caselessReach = map[string]bool{"unix:": true}

// agentLuaDirectives are the Lua module's directives that run one of the
// agent's files (agentLuaFile) in a context where `access_log off;` is
// valid too.
var agentLuaDirectives = map[string]bool{
	"init_by_lua_file": true, "init_worker_by_lua_file": true, "log_by_lua_file": true,
	"content_by_lua_file": true, "access_by_lua_file": true, "rewrite_by_lua_file": true,
	"header_filter_by_lua_file": true, "body_filter_by_lua_file": true,
}

func ownModule(d directive, modules []string) bool {
	return d.name == "load_module" && len(d.args) == 1 && slices.Contains(modules, d.args[0])
}

// plainDirective reports whether directive d of text is one line of plain
// words and a final ';' (or, for a block, '{'), after a separator, and
// reads as d whoever reads it: bytes no state of nginx's reader treats
// apart from a letter (no quote, backslash, brace, '#' or line break), so
// the directive means the same wherever nginx's reader stood when it
// reached it.
func plainDirective(text string, d directive) bool {
	if d.start > 0 && strings.IndexByte(" \t\r\n;{}", text[d.start-1]) < 0 {
		return false
	}
	end := ";"
	if d.block {
		end = "{"
	}
	body, ok := strings.CutSuffix(text[d.start:d.end], end)
	if !ok {
		return false
	}
	for i := 0; i < len(body); i++ {
		if c := body[i]; c <= ' ' && c != ' ' && c != '\t' || c >= 0x7f || strings.IndexByte(";{}#\\\"'", c) >= 0 {
			return false
		}
	}
	f := strings.Fields(body)
	return len(f) > 0 && f[0] == d.name && slices.Equal(f[1:], d.args)
}

// ParseRefusal reads the failed `nginx -t` of a ParseCopy: a name the copy
// changed (an upper-case letter in a word of reach) is a directive nginx
// reads where the policy's reader accepted none, and the policy refuses
// the version. Any other failure is nil here: nginx found the config
// itself invalid, as its own `nginx -t` would (and that one is not run:
// nginx did not read the copy to its end, so the rest is unchecked).
func ParseRefusal(err error) error {
	if name, line, ok := unknownDirective(err.Error()); ok && name != strings.ToLower(name) {
		return fmt.Errorf("%w: main config line %s: nginx reads a directive %q there that the template policy did not accept as one line of plain words (no quotes, escapes or line breaks)", ErrRefused, line, strings.ToLower(name))
	}
	return nil
}

// unknownDirective reads nginx's complaint `unknown directive "NAME" in
// FILE:LINE` out of msg.
func unknownDirective(msg string) (name, line string, ok bool) {
	_, rest, ok := strings.Cut(msg, `unknown directive "`)
	if !ok {
		return "", "", false
	}
	name, rest, ok = strings.Cut(rest, `" in `)
	if !ok {
		return "", "", false
	}
	if end := strings.IndexAny(rest, " \n"); end >= 0 {
		rest = rest[:end]
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 || i == len(rest)-1 || strings.Trim(rest[i+1:], "0123456789") != "" {
		return "", "", false
	}
	return name, rest[i+1:], true
}
