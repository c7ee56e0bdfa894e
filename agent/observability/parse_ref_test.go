package observability

import (
	"regexp"
	"time"

	"openflare/agent/protocol"
)

// The references the hand-written parsers are held to. They live in tests
// only: the regexp engine would add ~150 KiB to the agent binary.

// parseSlowLine is the reference ParseLine must agree with on every input.
func parseSlowLine(line []byte) (protocol.AccessLog, bool) {
	if rec, ok := slowJSON(line); ok {
		return rec, true
	}
	return slowCombined(line)
}

// combinedRE is the PROTOCOL 12.1 fallback: addr, time, path and status.
var combinedRE = regexp.MustCompile(`^(\S+)\s+\S+\s+\S+\s+\[([^]]+)]\s+"\S+\s+(\S+)(?:\s+[^"]*)?"\s+(\d{3})\s+\S+`)

// slowCombined is the reference combined-format parser.
func slowCombined(line []byte) (protocol.AccessLog, bool) {
	m := combinedRE.FindSubmatch(line)
	if m == nil {
		return protocol.AccessLog{}, false
	}
	t, err := time.Parse(combinedTimeLayout, string(m[2]))
	if err != nil {
		return protocol.AccessLog{}, false
	}
	return protocol.AccessLog{
		LoggedAtUnix: t.Unix(),
		RemoteAddr:   string(m[1]),
		Path:         normalizePath(string(m[3])),
		StatusCode:   int(m[4][0]-'0')*100 + int(m[4][1]-'0')*10 + int(m[4][2]-'0'),
	}, true
}
