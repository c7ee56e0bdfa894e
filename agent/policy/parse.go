package policy

import (
	"fmt"
	"strings"
)

// directive is one nginx directive: its name, its arguments (quotes
// removed, escapes resolved as nginx resolves them) and where it is.
type directive struct {
	name string
	args []string
	// line is where the name starts; endLine is where the terminator
	// is, the line nginx names in its own errors about the directive.
	line, endLine int
	// start is the offset of the name's first byte (its opening quote,
	// if quoted); end is one past the ';' or '{' that ends it.
	start, end int
	block      bool // ended by '{'
	depth      int  // blocks around it: 0 in the main context
}

// maxDirectives bounds the work one config can ask for.
const maxDirectives = 200_000

// maxToken is the length at which nginx refuses a word: its reader holds
// at most this much of one word ("too long parameter").
const maxToken = 4096

// parse splits nginx configuration text into directives exactly as
// nginx's own reader (ngx_conf_read_token) and block parser do: the same
// states (a word, a quoted string, a backslash escape, a comment, a '$'
// whose '{' belongs to the word, a closing quote that needs a space), the
// same escapes (\" \' \\ \t \r \n; any other backslash stays), the same
// errors, on the same lines. Every difference from nginx is a way to hide
// a directive from the policy, so nothing here is approximated; the
// differential fuzz test holds it against the real binary.
//
// A *_by_lua_block is not lexed by nginx's reader (its body is Lua, read
// by the Lua module): parse stops there and returns what it has, the
// directive included, which the policy refuses.
func parse(text string) ([]directive, error) {
	return parseText(text, false, "")
}

// parseStrict is parse that also refuses text whose meaning turns on a
// backslash outside quotes in front of a character nginx gives structure
// to (white space, ';', '{', '}', '#', a quote, '$'): nginx reads it one
// way, editors, highlighters and line-based tools another, and that gap
// is where a directive hides. Regular expressions keep their escapes
// (\. \d \/ \\).
func parseStrict(text string) ([]directive, error) {
	return parseText(text, true, "")
}

// parseText is parse, strict or not; directives named blind are left out
// (Policy.Blind, a test hook).
func parseText(text string, strict bool, blind string) ([]directive, error) {
	l := lexer{text: text, line: 1, strict: strict}
	var out []directive
	depth := 0
	for {
		words, term, err := l.next()
		if err != nil {
			return nil, err
		}
		switch term {
		case 0:
			if depth != 0 {
				return nil, fmt.Errorf("line %d: unexpected end of file, expecting \"}\"", l.line)
			}
			return out, nil
		case '}':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("line %d: unexpected \"}\"", l.line)
			}
			continue
		}
		d := directive{
			name: words[0].val, line: words[0].line, endLine: l.line,
			start: words[0].start, end: l.pos, block: term == '{', depth: depth,
		}
		for _, w := range words[1:] {
			d.args = append(d.args, w.val)
		}
		if d.name != blind || blind == "" {
			out = append(out, d)
		}
		if len(out) > maxDirectives {
			return nil, fmt.Errorf("more than %d directives", maxDirectives)
		}
		if d.block {
			if strings.HasSuffix(d.name, "_by_lua_block") {
				return out, nil
			}
			depth++
		}
	}
}

// word is one word of a directive.
type word struct {
	val   string
	start int // offset of its first byte, opening quote included
	line  int
}

// lexer is ngx_conf_read_token's state over one text.
type lexer struct {
	text string
	pos  int // next byte to read
	line int // line of the byte last read, as nginx counts
	// strict refuses structural escapes outside quotes (parseStrict).
	strict bool
}

// structural are the bytes a backslash outside quotes may not escape in
// strict mode.
const structural = " \t\r\n;{}#\"'$"

// escapeCheck refuses, in strict mode, a backslash at l.pos-1 (outside
// quotes) that escapes a structural byte.
func (l *lexer) escapeCheck() error {
	if l.strict && l.pos < len(l.text) && strings.IndexByte(structural, l.text[l.pos]) >= 0 {
		return fmt.Errorf("line %d: a backslash outside quotes escapes %q: nginx reads such text unlike any other tool; quote the word instead", l.line, l.text[l.pos])
	}
	return nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// next reads the words of one directive and what ended it: ';', '{', '}'
// (a block's end, with no words) or 0 (the end of the text, with none).
func (l *lexer) next() ([]word, byte, error) {
	var words []word
	needSpace, lastSpace, sharp, variable, quoted, sQuoted, dQuoted := false, true, false, false, false, false, false
	start, startLine := l.pos, l.line
	for {
		if l.pos >= len(l.text) {
			if len(words) > 0 || !lastSpace {
				return nil, 0, fmt.Errorf("line %d: unexpected end of file, expecting \";\" or \"}\"", l.line)
			}
			return nil, 0, nil
		}
		// nginx's reader holds at most maxToken bytes from where the
		// current word (or comment) began.
		if l.pos-start >= maxToken {
			return nil, 0, fmt.Errorf("line %d: too long parameter (%d bytes or more)", startLine, maxToken)
		}
		ch := l.text[l.pos]
		l.pos++
		if ch == '\n' {
			l.line++
			sharp = false
		}
		if sharp {
			continue
		}
		if quoted {
			quoted = false
			continue
		}
		if needSpace {
			switch {
			case isSpace(ch):
				lastSpace, needSpace = true, false
				continue
			case ch == ';' || ch == '{':
				return words, ch, nil
			case ch == ')':
				// nginx lets ')' follow a quoted word ("if ($a = 'b')"); the
				// ')' starts a word of its own.
				lastSpace, needSpace = true, false
			default:
				return nil, 0, fmt.Errorf("line %d: unexpected \"%c\" after a quoted word", l.line, ch)
			}
		}
		if lastSpace {
			start, startLine = l.pos-1, l.line
			if isSpace(ch) {
				continue
			}
			switch ch {
			case ';', '{':
				if len(words) == 0 {
					return nil, 0, fmt.Errorf("line %d: unexpected \"%c\"", l.line, ch)
				}
				return words, ch, nil
			case '}':
				if len(words) != 0 {
					return nil, 0, fmt.Errorf("line %d: unexpected \"}\"", l.line)
				}
				return nil, '}', nil
			case '#':
				sharp = true
				continue
			case '\\':
				if err := l.escapeCheck(); err != nil {
					return nil, 0, err
				}
				quoted = true
			case '"':
				dQuoted = true
			case '\'':
				sQuoted = true
			case '$':
				variable = true
			}
			lastSpace = false
			continue
		}
		if ch == '{' && variable {
			continue
		}
		variable = false
		switch {
		case ch == '\\':
			if !sQuoted && !dQuoted {
				if err := l.escapeCheck(); err != nil {
					return nil, 0, err
				}
			}
			quoted = true
			continue
		case ch == '$':
			variable = true
			continue
		}
		found := false
		switch {
		case dQuoted:
			if ch == '"' {
				dQuoted, needSpace, found = false, true, true
			}
		case sQuoted:
			if ch == '\'' {
				sQuoted, needSpace, found = false, true, true
			}
		case isSpace(ch) || ch == ';' || ch == '{':
			lastSpace, found = true, true
		}
		if !found {
			continue
		}
		raw := l.text[start : l.pos-1]
		if q := raw[0]; q == '"' || q == '\'' {
			raw = raw[1:]
		}
		words = append(words, word{val: unescape(raw), start: start, line: startLine})
		if ch == ';' || ch == '{' {
			return words, ch, nil
		}
	}
}

// unescape resolves a word's backslashes as nginx does: \" \' \\ lose the
// backslash, \t \r \n become the control character, any other pair stays
// as it is.
func unescape(raw string) string {
	if !strings.Contains(raw, `\`) {
		return raw
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] == '\\' && i+1 < len(raw) {
			switch raw[i+1] {
			case '"', '\'', '\\':
				i++
			case 't':
				b.WriteByte('\t')
				i++
				continue
			case 'r':
				b.WriteByte('\r')
				i++
				continue
			case 'n':
				b.WriteByte('\n')
				i++
				continue
			}
		}
		b.WriteByte(raw[i])
	}
	return b.String()
}
