package observability

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"openflare/agent/protocol"
)

// maxPathRunes is where PROTOCOL 12.1 cuts the request path.
const maxPathRunes = 100

// ParseLine parses one access-log line (without its newline): the
// openflare_json format first, then the combined format (PROTOCOL 12.1).
// ok is false for a line neither format accepts.
//
// A hand-written scanner handles the JSON lines nginx actually writes;
// anything unusual (escaped or case-folded keys, invalid UTF-8, quoted
// numbers) goes to encoding/json, which defines the result. The combined
// format is matched by hand (parseCombined). The fuzz test holds both to
// exactly the answers of encoding/json and the PROTOCOL's regular
// expression.
func ParseLine(line []byte) (protocol.AccessLog, bool) {
	if looksJSON(line) {
		rec, res := fastJSON(line)
		if res == fastOK {
			return rec, true
		}
		if res == fastBail {
			if rec, ok := slowJSON(line); ok {
				return rec, true
			}
		}
	}
	return parseCombined(line)
}

// fastResult says what a hand-written scanner made of a line.
type fastResult int

const (
	fastOK     fastResult = iota // parsed; identical to the reference
	fastReject                   // the reference rejects the line too
	fastBail                     // not handled here: ask encoding/json
)

// looksJSON reports whether the line's first non-blank byte opens an
// object: no other line can decode into the record struct with a timestamp.
func looksJSON(b []byte) bool {
	for _, c := range b {
		if !isJSONSpace(c) {
			return c == '{'
		}
	}
	return false
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// jsonRecord is the openflare_json line as encoding/json sees it.
type jsonRecord struct {
	TS            string      `json:"ts"`
	Host          string      `json:"host"`
	Path          string      `json:"path"`
	RemoteAddr    string      `json:"remote_addr"`
	Status        int64       `json:"status"`
	RequestTime   json.Number `json:"request_time"`
	BytesSent     int64       `json:"bytes_sent"`
	RequestLength int64       `json:"request_length"`
	UserAgent     string      `json:"user_agent"`
	CacheStatus   string      `json:"cache_status"`
}

// slowJSON is the reference JSON parser.
func slowJSON(line []byte) (protocol.AccessLog, bool) {
	var r jsonRecord
	if err := json.Unmarshal(line, &r); err != nil {
		return protocol.AccessLog{}, false
	}
	t, err := time.Parse(time.RFC3339, r.TS)
	if err != nil {
		return protocol.AccessLog{}, false
	}
	ms, ok := secondsToMs([]byte(r.RequestTime))
	if !ok || !validStatus(r.Status) {
		return protocol.AccessLog{}, false
	}
	return protocol.AccessLog{
		LoggedAtUnix:  t.Unix(),
		RemoteAddr:    r.RemoteAddr,
		Host:          r.Host,
		Path:          normalizePath(r.Path),
		UserAgent:     r.UserAgent,
		CacheStatus:   r.CacheStatus,
		StatusCode:    int(r.Status),
		BytesSent:     r.BytesSent,
		RequestLength: r.RequestLength,
		RequestTimeMs: ms,
	}, true
}

// validStatus keeps status codes to three digits, so the int of the wire
// type cannot overflow on 32-bit targets.
func validStatus(s int64) bool { return s >= 0 && s <= 999 }

// normalizePath applies PROTOCOL 12.1: a leading "/" unless the path is
// absolute or a full URL (proxy requests), then at most 100 runes. Invalid
// UTF-8 bytes count as one rune each, as the server's cut sees them.
func normalizePath(p string) string {
	if !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "http://") && !strings.HasPrefix(p, "https://") {
		p = "/" + p
	}
	n := 0
	for i := 0; i < len(p); {
		if n == maxPathRunes {
			return p[:i]
		}
		_, size := utf8.DecodeRuneInString(p[i:])
		i += size
		n++
	}
	return p
}

// secondsToMs converts nginx's $request_time (seconds, a JSON number
// literal) to milliseconds rounded half up. Plain decimals are rounded on
// their digits, so 0.0005 is exactly 1 ms; exponents and negative values,
// which nginx never writes, go through float64. An empty literal (key
// absent) is 0; a value outside int64 is not a reading (ok false).
func secondsToMs(lit []byte) (int64, bool) {
	if len(lit) == 0 {
		return 0, true
	}
	intEnd := 0
	for intEnd < len(lit) && isDigit(lit[intEnd]) {
		intEnd++
	}
	frac := lit[intEnd:]
	if len(frac) > 0 {
		if frac[0] != '.' {
			return secondsToMsFloat(lit)
		}
		frac = frac[1:]
		for _, c := range frac {
			if !isDigit(c) {
				return secondsToMsFloat(lit)
			}
		}
	}
	// 15 integer digits times 1000 stays far below MaxInt64.
	if intEnd == 0 || intEnd > 15 {
		return secondsToMsFloat(lit)
	}
	var ms int64
	for _, c := range lit[:intEnd] {
		ms = ms*10 + int64(c-'0')
	}
	for i := range 3 {
		ms *= 10
		if i < len(frac) {
			ms += int64(frac[i] - '0')
		}
	}
	if len(frac) > 3 && frac[3] >= '5' {
		ms++
	}
	return ms, true
}

func secondsToMsFloat(lit []byte) (int64, bool) {
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return 0, false
	}
	v := math.Floor(f*1000 + 0.5)
	// -2^63 is exact in float64; 2^63 is the first value past MaxInt64.
	if !(v >= math.MinInt64 && v < math.MaxInt64) {
		return 0, false
	}
	return int64(v), true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
