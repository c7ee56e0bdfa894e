// Package luamin strips what Lua does not read from a script: comments and
// the white space that starts and ends a line. Lines stay where they are
// (a comment's line breaks are kept), so an error a node logs names the
// same line as the source. It runs when the agent's Lua is packed for the
// binary (go generate ./agent/luaassets), and in the test that checks the
// pack, never in the agent: the release binary's flash budget pays for
// the scripts as packed, and their comments are a third of them.
package luamin

import "strings"

// Strip returns src without comments and without white space at the
// start and end of each line. Strings, long strings included, are kept
// byte for byte: only text the Lua lexer throws away goes.
func Strip(src string) string {
	var b strings.Builder
	b.Grow(len(src))
	line := make([]byte, 0, 128) // the current line's code, trimmed at its end
	flush := func(nl bool) {
		b.WriteString(strings.TrimRight(string(line), " \t\r"))
		if nl {
			b.WriteByte('\n')
		}
		line = line[:0]
	}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			flush(true)
			i++
		case (c == ' ' || c == '\t' || c == '\r') && len(line) == 0:
			i++ // white space that starts a line
		case c == '-' && strings.HasPrefix(src[i:], "--"):
			if level, ok := longBracket(src[i+2:]); ok {
				// A long comment: only its line breaks stay.
				end := closing(src, i+2+level+2, level)
				for _, r := range src[i:end] {
					if r == '\n' {
						flush(true)
					}
				}
				i = end
				continue
			}
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(src) && src[j] != c && src[j] != '\n' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(src))
			line = append(line, src[i:j]...)
			i = j
		case c == '[':
			level, ok := longBracket(src[i:])
			if !ok {
				line = append(line, c)
				i++
				continue
			}
			end := closing(src, i+level+2, level)
			// A long string spans lines: what it holds is its own, line
			// breaks and leading white space included.
			text := src[i:end]
			if k := strings.LastIndexByte(text, '\n'); k >= 0 {
				line = append(line, text[:k]...)
				b.Write(line)
				b.WriteByte('\n')
				line = append(line[:0], text[k+1:]...)
			} else {
				line = append(line, text...)
			}
			i = end
		default:
			line = append(line, c)
			i++
		}
	}
	flush(false)
	return b.String()
}

// longBracket reports whether s opens a long bracket, "[" then level '='
// then "[", and its level.
func longBracket(s string) (int, bool) {
	if !strings.HasPrefix(s, "[") {
		return 0, false
	}
	level := 0
	for level+1 < len(s) && s[level+1] == '=' {
		level++
	}
	return level, level+1 < len(s) && s[level+1] == '['
}

// closing returns the offset just past the long bracket of level that
// closes what opens before from, or len(s) if none does.
func closing(s string, from, level int) int {
	close := "]" + strings.Repeat("=", level) + "]"
	if k := strings.Index(s[from:], close); k >= 0 {
		return from + k + len(close)
	}
	return len(s)
}

// Pack returns a file of the Lua tree as the binary embeds it: a Lua
// script stripped, a script or style sheet of the challenge page without
// its indentation and its comment lines (their strings never span lines,
// so no string loses a byte), anything else as it is.
func Pack(path, src string) string {
	switch {
	case strings.HasSuffix(path, ".lua"):
		return Strip(src)
	case strings.HasSuffix(path, ".js"), strings.HasSuffix(path, ".mjs"):
		return lines(src, "//", "")
	case strings.HasSuffix(path, ".css"):
		return lines(src, "/*", "*/")
	}
	return src
}

// lines drops each line's leading white space and the lines that are one
// comment: from open to the end of the line, or to close when close is
// set, possibly over several lines.
func lines(src, open, close string) string {
	var b strings.Builder
	in := false
	for _, l := range strings.SplitAfter(src, "\n") {
		t := strings.TrimLeft(l, " \t")
		switch {
		case in:
			in = !strings.Contains(t, close)
			continue
		case strings.HasPrefix(t, open):
			in = close != "" && !strings.Contains(t[len(open):], close)
			continue
		}
		b.WriteString(t)
	}
	return b.String()
}
