package observability

import (
	"bytes"

	"github.com/openflare/openflare-agent/agent/protocol"
)

// isReSpace is \s of Go's regexp: exactly these five ASCII bytes.
func isReSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

// token returns the end of the run of non-space bytes starting at i.
func token(b []byte, i int) int {
	for i < len(b) && !isReSpace(b[i]) {
		i++
	}
	return i
}

func spaces(b []byte, i int) int {
	for i < len(b) && isReSpace(b[i]) {
		i++
	}
	return i
}

// fastCombined matches combinedRE without the regexp engine. Every part of
// the pattern is forced (each run of \S+ or \s+ meets a byte of the other
// class) except the request line, where \S+ may swallow a quote and
// backtrack; a quote inside the method or path token therefore goes to the
// regexp (fastBail). Everywhere else a failed step is a definite no-match.
func fastCombined(b []byte) (protocol.AccessLog, fastResult) {
	reject := func() (protocol.AccessLog, fastResult) { return protocol.AccessLog{}, fastReject }

	// (\S+)\s+\S+\s+\S+\s+\[
	addrEnd := token(b, 0)
	if addrEnd == 0 {
		return reject()
	}
	i := addrEnd
	for range 2 {
		j := spaces(b, i)
		if j == i {
			return reject()
		}
		i = token(b, j)
		if i == j {
			return reject()
		}
	}
	j := spaces(b, i)
	if j == i || j >= len(b) || b[j] != '[' {
		return reject()
	}
	// ([^]]+)]
	tStart := j + 1
	tLen := bytes.IndexByte(b[tStart:], ']')
	if tLen <= 0 {
		return reject()
	}
	i = tStart + tLen + 1
	// \s+"
	j = spaces(b, i)
	if j == i || j >= len(b) || b[j] != '"' {
		return reject()
	}
	// \S+\s+(\S+)
	mStart := j + 1
	mEnd := token(b, mStart)
	if mEnd == mStart {
		return reject()
	}
	pStart := spaces(b, mEnd)
	if pStart == mEnd {
		return reject()
	}
	pEnd := token(b, pStart)
	if pEnd == pStart {
		return reject()
	}
	if bytes.IndexByte(b[mStart:pEnd], '"') >= 0 {
		return protocol.AccessLog{}, fastBail
	}
	// (?:\s+[^"]*)?" : the path token ended at a space or the end of the
	// line, so the group must match and ends at the next quote.
	q := bytes.IndexByte(b[pEnd:], '"')
	if q < 0 {
		return reject()
	}
	i = pEnd + q + 1
	// \s+(\d{3})\s+\S+
	j = spaces(b, i)
	if j == i || j+4 >= len(b) || !isDigit(b[j]) || !isDigit(b[j+1]) || !isDigit(b[j+2]) || !isReSpace(b[j+3]) {
		return reject()
	}
	if k := spaces(b, j+3); k >= len(b) {
		return reject()
	}
	logged, ok := parseCLFTime(b[tStart : tStart+tLen])
	if !ok {
		return reject()
	}
	// One allocation for both strings.
	all := string(b[:addrEnd]) + string(b[pStart:pEnd])
	return protocol.AccessLog{
		LoggedAtUnix: logged,
		RemoteAddr:   all[:addrEnd],
		Path:         normalizePath(all[addrEnd:]),
		StatusCode:   int(b[j]-'0')*100 + int(b[j+1]-'0')*10 + int(b[j+2]-'0'),
	}, fastOK
}
