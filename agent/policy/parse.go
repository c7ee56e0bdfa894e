package policy

import (
	"fmt"
	"strings"
)

// directive is one nginx directive: its name, its arguments (quotes
// removed) and the line it starts on.
type directive struct {
	name  string
	args  []string
	line  int
	named bool // a name was read (it may be the empty string '' of a map)
}

// maxDirectives bounds the work one config can ask for.
const maxDirectives = 200_000

// parse splits nginx configuration text into directives, following nginx's
// own lexer: words separated by white space, '…' and "…" quoting with
// backslash escapes, # comments to the end of the line, and ';', '{', '}'
// ending a directive. A *_by_lua_block is not lexed (its body is Lua):
// parse stops there and returns what it has, the directive included,
// which the policy refuses.
func parse(text string) ([]directive, error) {
	var out []directive
	var cur directive
	var word strings.Builder
	inWord := false
	line := 1
	depth := 0
	end := func() {
		if inWord {
			if !cur.named {
				cur.name, cur.line, cur.named = word.String(), line, true
			} else {
				cur.args = append(cur.args, word.String())
			}
			word.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '\n':
			end()
			line++
		case c == ' ' || c == '\t' || c == '\r':
			end()
		case c == '#' && !inWord:
			for i < len(text) && text[i] != '\n' {
				i++
			}
			i--
		case c == '\\':
			// An escape takes the next byte into the word, quoted or not,
			// as nginx's lexer does.
			inWord = true
			if i+1 < len(text) {
				i++
				if text[i] == '\n' {
					line++
				}
				word.WriteByte(text[i])
			}
		case c == '"' || c == '\'':
			if inWord {
				word.WriteByte(c)
				continue
			}
			start := line
			j := i + 1
			for ; j < len(text) && text[j] != c; j++ {
				if text[j] == '\\' && j+1 < len(text) {
					j++
				}
				if text[j] == '\n' {
					line++
				}
				word.WriteByte(text[j])
			}
			if j >= len(text) {
				return nil, fmt.Errorf("line %d: unterminated quote", start)
			}
			// nginx wants a space, ';' or '{' after a closing quote.
			if j+1 < len(text) && !strings.ContainsRune(" \t\r\n;{", rune(text[j+1])) {
				return nil, fmt.Errorf("line %d: unexpected %q after a quoted word", line, text[j+1])
			}
			inWord = true
			i = j
			end()
		case c == '{' && inWord && strings.HasSuffix(word.String(), "$"):
			// ${name}: part of the word.
			word.WriteByte(c)
		case c == ';' || c == '{':
			end()
			if !cur.named {
				return nil, fmt.Errorf("line %d: unexpected %q", line, c)
			}
			out = append(out, cur)
			if len(out) > maxDirectives {
				return nil, fmt.Errorf("more than %d directives", maxDirectives)
			}
			if c == '{' {
				if strings.HasSuffix(cur.name, "_by_lua_block") {
					return out, nil
				}
				depth++
			}
			cur = directive{}
		case c == '}':
			end()
			if cur.named {
				return nil, fmt.Errorf("line %d: directive %s has no ';'", cur.line, cur.name)
			}
			if depth--; depth < 0 {
				return nil, fmt.Errorf("line %d: unexpected '}'", line)
			}
		default:
			inWord = true
			word.WriteByte(c)
		}
	}
	end()
	if cur.named {
		return nil, fmt.Errorf("line %d: directive %s has no ';'", cur.line, cur.name)
	}
	if depth != 0 {
		return nil, fmt.Errorf("%d block(s) not closed", depth)
	}
	return out, nil
}
