package render

import "strings"

// nginxQuote writes s as a double-quoted nginx string. Only `\` and `"` are
// escaped: that is what the server does, and `$` stays a variable reference
// on purpose (custom header values such as "$host;…" rely on it).
func nginxQuote(b *strings.Builder, s string) {
	b.WriteByte('"')
	if strings.IndexAny(s, `\"`) < 0 {
		b.WriteString(s)
	} else {
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c == '\\' || c == '"' {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// quoted returns nginxQuote's text as a string, for the cold paths.
func quoted(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	nginxQuote(&b, s)
	return b.String()
}

// writeLines writes each part in order; it keeps the emission code a flat
// list of literal lines and values instead of nested concatenations.
func writeLines(b *strings.Builder, parts ...string) {
	for _, p := range parts {
		b.WriteString(p)
	}
}

// quoteMeta escapes the regular-expression metacharacters \.+*?()|[]{}^$
// exactly as Go's regexp.QuoteMeta does (the server's renderer uses it),
// without linking the regexp engine into the agent.
func quoteMeta(s string) string {
	var b strings.Builder
	b.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`\.+*?()|[]{}^$`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
