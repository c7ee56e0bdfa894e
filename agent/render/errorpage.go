package render

import (
	"strconv"
	"strings"
)

const (
	minErrorStatus = 400
	maxErrorStatus = 599
)

// originErrorPage is the rendered form of the origin error page option.
type originErrorPage struct {
	codes   []int // empty: feature off for rendering
	getOnly bool
	list    string // codes joined by " " (error_page) …
	luaList string // … and by ", " (the Lua table of the GET-only filter)
}

func newOriginErrorPage(c *restyConfig) originErrorPage {
	if !c.OriginErrorPageEnabled {
		return originErrorPage{}
	}
	tags := c.OriginErrorPageCodes
	if len(tags) == 0 {
		tags = []string{"500-599"}
	}
	codes, ok := expandStatusTags(tags)
	if !ok || len(codes) == 0 {
		return originErrorPage{}
	}
	p := originErrorPage{codes: codes, getOnly: c.OriginErrorPageGetOnly}
	var list, lua strings.Builder
	for i, code := range codes {
		if i > 0 {
			list.WriteByte(' ')
			lua.WriteString(", ")
		}
		s := strconv.Itoa(code)
		list.WriteString(s)
		lua.WriteString(s)
	}
	p.list, p.luaList = list.String(), lua.String()
	return p
}

func (p *originErrorPage) active() bool { return len(p.codes) > 0 }

// expandStatusTags turns `NNN` / `LLL-HHH` tags (400–599) into sorted,
// deduplicated codes. Any invalid tag makes ok false: the server then renders
// no error page at all rather than a partial set.
func expandStatusTags(tags []string) (codes []int, ok bool) {
	var set [maxErrorStatus + 1]bool
	for _, tag := range tags {
		tag = strings.TrimSpace(tag)
		lo, hi, found := strings.Cut(tag, "-")
		if !found {
			hi = lo
		}
		l, okL := parseStatus(lo)
		h, okH := parseStatus(hi)
		if !okL || !okH || l > h {
			return nil, false
		}
		for c := l; c <= h; c++ {
			set[c] = true
		}
	}
	for c := minErrorStatus; c <= maxErrorStatus; c++ {
		if set[c] {
			codes = append(codes, c)
		}
	}
	return codes, true
}

func parseStatus(s string) (int, bool) {
	if len(s) != 3 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, _ := strconv.Atoi(s)
	return n, n >= minErrorStatus && n <= maxErrorStatus
}

// writeLocationPart emits what the proxy `location /` needs: the intercept
// switch (all-methods mode) or the Lua filters (GET-only mode).
func (p *originErrorPage) writeLocationPart(b *strings.Builder) {
	if !p.active() {
		return
	}
	if p.getOnly {
		writeLines(b, originErrorFiltersHead, p.luaList, originErrorFiltersTail)
		return
	}
	b.WriteString("        proxy_intercept_errors on;\n")
}

// writeServerPart emits the server-level error_page and named location of
// all-methods mode. error_page has no `=`, so the origin's status is kept.
func (p *originErrorPage) writeServerPart(b *strings.Builder) {
	if !p.active() || p.getOnly {
		return
	}
	writeLines(b, "    error_page ", p.list, " @__openflare_origin_error;\n", originErrorNamedLocation)
}

// serverPartSize and locationPartSize are upper bounds of what the two
// writers emit, for sizing buffers.
func (p *originErrorPage) serverPartSize() int {
	if !p.active() || p.getOnly {
		return 0
	}
	return 64 + len(p.list) + len(originErrorNamedLocation)
}

func (p *originErrorPage) locationPartSize() int {
	if !p.active() || !p.getOnly {
		return 64
	}
	return len(originErrorFiltersHead) + len(p.luaList) + len(originErrorFiltersTail)
}

// originErrorHTML is the template file content: the custom HTML, else the
// built-in page.
func originErrorHTML(c *restyConfig) string {
	if strings.TrimSpace(c.OriginErrorPageHTML) != "" {
		return c.OriginErrorPageHTML
	}
	return string(builtinOriginErrorHTML)
}
