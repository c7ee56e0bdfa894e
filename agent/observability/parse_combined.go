package observability

import (
	"bytes"

	"openflare/agent/protocol"
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

// parseCombined matches the PROTOCOL 12.1 regular expression
//
//	^(\S+)\s+\S+\s+\S+\s+\[([^]]+)]\s+"\S+\s+(\S+)(?:\s+[^"]*)?"\s+(\d{3})\s+\S+
//
// without the regexp engine (which would add ~150 KiB to the binary).
// Every part is forced (each run of \S+ or \s+ meets a byte of the other
// class) except the path, which may give back bytes up to a quote; the
// fuzz test holds it to the regexp's answers.
func parseCombined(b []byte) (protocol.AccessLog, bool) {
	reject := func() (protocol.AccessLog, bool) { return protocol.AccessLog{}, false }

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
	tokEnd := token(b, pStart)
	if tokEnd == pStart {
		return reject()
	}
	// (\S+)(?:\s+[^"]*)?"\s+(\d{3})\s+\S+ with the regexp's preference:
	// the longest path first. A shorter path can only end just before a
	// quote inside the token, so only those ends are tried.
	pEnd, j := tokEnd, -1
	for ; pEnd > pStart; pEnd-- {
		if pEnd < tokEnd && b[pEnd] != '"' {
			continue
		}
		if j = requestTail(b, pEnd); j >= 0 {
			break
		}
	}
	if j < 0 {
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
	}, true
}

// requestTail matches (?:\s+[^"]*)?"\s+(\d{3})\s+\S+ at i and returns
// where the status digits start, or -1.
func requestTail(b []byte, i int) int {
	// The optional group is preferred: after a space it runs to the next
	// quote (backtracking inside it cannot end anywhere else).
	if i < len(b) && isReSpace(b[i]) {
		if q := bytes.IndexByte(b[i:], '"'); q >= 0 {
			if j := statusAfterQuote(b, i+q+1); j >= 0 {
				return j
			}
		}
	}
	if i < len(b) && b[i] == '"' {
		return statusAfterQuote(b, i+1)
	}
	return -1
}

// statusAfterQuote matches \s+(\d{3})\s+\S+ at i.
func statusAfterQuote(b []byte, i int) int {
	j := spaces(b, i)
	if j == i || j+4 >= len(b) || !isDigit(b[j]) || !isDigit(b[j+1]) || !isDigit(b[j+2]) || !isReSpace(b[j+3]) {
		return -1
	}
	if spaces(b, j+3) >= len(b) {
		return -1
	}
	return j
}
