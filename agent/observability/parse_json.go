package observability

import (
	"unicode/utf16"
	"unicode/utf8"

	"openflare/agent/protocol"
)

// Field indexes of the string values fastJSON collects.
const (
	fTS = iota
	fHost
	fPath
	fRemoteAddr
	fUserAgent
	fCacheStatus
	nStringFields
)

// Keys of the openflare_json format. Numeric keys use indexes past the
// string fields.
const (
	kStatus = nStringFields + iota
	kRequestTime
	kBytesSent
	kRequestLength
	kUnknown
)

var jsonKeyNames = [...]string{"ts", "host", "path", "remote_addr", "user_agent", "cache_status",
	"status", "request_time", "bytes_sent", "request_length"}

// plainASCII marks the bytes a JSON string holds as they are: printable
// ASCII other than the quote and the backslash.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// lookupKey matches a key the way encoding/json does for ASCII keys:
// exactly, or else case-insensitively. A case-folded match is legal but
// never written by nginx, so it is left to the reference (ok false).
func lookupKey(k []byte) (id int, ok bool) {
	switch string(k) {
	case "ts":
		return fTS, true
	case "host":
		return fHost, true
	case "path":
		return fPath, true
	case "remote_addr":
		return fRemoteAddr, true
	case "user_agent":
		return fUserAgent, true
	case "cache_status":
		return fCacheStatus, true
	case "status":
		return kStatus, true
	case "request_time":
		return kRequestTime, true
	case "bytes_sent":
		return kBytesSent, true
	case "request_length":
		return kRequestLength, true
	}
	for _, name := range jsonKeyNames {
		if equalFoldASCII(k, name) {
			return 0, false
		}
	}
	return kUnknown, true
}

func equalFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// jsonScanner walks one line. Decoded string values are appended to a
// buffer on fastJSON's stack and turned into a single string at the end, so
// a line costs one allocation for all its text fields. The buffer is passed
// around rather than kept in the scanner: stored through a pointer it would
// escape to the heap.
type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) skipSpace() {
	for s.i < len(s.b) && isJSONSpace(s.b[s.i]) {
		s.i++
	}
}

// fastJSON parses the lines nginx writes with escape=json. It never
// rejects: whatever it does not handle is fastBail.
func fastJSON(line []byte) (protocol.AccessLog, fastResult) {
	var stack [512]byte
	buf := stack[:0]
	s := jsonScanner{b: line}
	var spans [nStringFields][2]int
	var status, bytesSent, reqLen int64
	var reqTime []byte

	s.skipSpace()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return protocol.AccessLog{}, fastBail
	}
	s.i++
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		// {} has no timestamp: the reference rejects it.
		return protocol.AccessLog{}, fastBail
	}
	for {
		s.skipSpace()
		key, ok := s.rawKey()
		if !ok {
			return protocol.AccessLog{}, fastBail
		}
		id, ok := lookupKey(key)
		if !ok {
			return protocol.AccessLog{}, fastBail
		}
		s.skipSpace()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return protocol.AccessLog{}, fastBail
		}
		s.i++
		s.skipSpace()
		if s.i >= len(s.b) {
			return protocol.AccessLog{}, fastBail
		}
		switch {
		case id < nStringFields:
			start := len(buf)
			if buf, ok = s.stringValue(buf); !ok {
				return protocol.AccessLog{}, fastBail
			}
			spans[id] = [2]int{start, len(buf)}
		case id == kRequestTime:
			lit, ok := s.number()
			if !ok {
				return protocol.AccessLog{}, fastBail
			}
			reqTime = lit
		case id == kUnknown:
			if !s.skipValue(buf) {
				return protocol.AccessLog{}, fastBail
			}
		default:
			v, ok := s.integer()
			if !ok {
				return protocol.AccessLog{}, fastBail
			}
			switch id {
			case kStatus:
				status = v
			case kBytesSent:
				bytesSent = v
			case kRequestLength:
				reqLen = v
			}
		}
		s.skipSpace()
		if s.i >= len(s.b) {
			return protocol.AccessLog{}, fastBail
		}
		c := s.b[s.i]
		s.i++
		if c == '}' {
			break
		}
		if c != ',' {
			return protocol.AccessLog{}, fastBail
		}
	}
	s.skipSpace()
	if s.i != len(s.b) {
		return protocol.AccessLog{}, fastBail
	}

	ts := buf[spans[fTS][0]:spans[fTS][1]]
	logged, ok := parseRFC3339(ts)
	if !ok {
		return protocol.AccessLog{}, fastBail
	}
	ms, ok := secondsToMs(reqTime)
	if !ok || !validStatus(status) {
		return protocol.AccessLog{}, fastBail
	}
	all := string(buf)
	field := func(f int) string { return all[spans[f][0]:spans[f][1]] }
	return protocol.AccessLog{
		LoggedAtUnix:  logged,
		RemoteAddr:    field(fRemoteAddr),
		Host:          field(fHost),
		Path:          normalizePath(field(fPath)),
		UserAgent:     field(fUserAgent),
		CacheStatus:   field(fCacheStatus),
		StatusCode:    int(status),
		BytesSent:     bytesSent,
		RequestLength: reqLen,
		RequestTimeMs: ms,
	}, fastOK
}

// rawKey returns a key without its quotes. Keys with escapes or non-ASCII
// bytes could decode or case-fold to a known key, so they are not handled.
func (s *jsonScanner) rawKey() ([]byte, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		c := s.b[j]
		switch {
		case c == '"':
			s.i = j + 1
			return s.b[start:j], true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return nil, false
		}
	}
	return nil, false
}

// stringValue decodes a JSON string, appending it to buf. Raw bytes must
// be valid UTF-8 (encoding/json would substitute U+FFFD) and surrogate
// escapes must pair up; both are left to the reference.
func (s *jsonScanner) stringValue(buf []byte) ([]byte, bool) {
	if s.b[s.i] != '"' {
		return buf, false
	}
	j := s.i + 1
	for {
		run := j
		for j < len(s.b) {
			if c := s.b[j]; plainASCII[c] {
				j++
			} else if c < utf8.RuneSelf {
				break
			} else if r, size := utf8.DecodeRune(s.b[j:]); r == utf8.RuneError && size == 1 {
				return buf, false
			} else {
				j += size
			}
		}
		buf = append(buf, s.b[run:j]...)
		if j >= len(s.b) || s.b[j] < 0x20 {
			return buf, false
		}
		if s.b[j] == '"' {
			s.i = j + 1
			return buf, true
		}
		j++ // backslash
		if j >= len(s.b) {
			return buf, false
		}
		switch c := s.b[j]; c {
		case '"', '\\', '/':
			buf = append(buf, c)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := hex4(s.b, j+1)
			if !ok {
				return buf, false
			}
			j += 4
			if utf16.IsSurrogate(r) {
				if j+2 >= len(s.b) || s.b[j+1] != '\\' || s.b[j+2] != 'u' {
					return buf, false
				}
				r2, ok := hex4(s.b, j+3)
				if !ok {
					return buf, false
				}
				r = utf16.DecodeRune(r, r2)
				if r == utf8.RuneError {
					return buf, false
				}
				j += 6
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return buf, false
		}
		j++
	}
}

// hex4 reads the four hex digits of a \u escape starting at b[i].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number returns a JSON number literal, checked against the JSON grammar.
func (s *jsonScanner) number() ([]byte, bool) {
	b, start := s.b, s.i
	j := start
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && b[j] >= '1' && b[j] <= '9':
		for j < len(b) && isDigit(b[j]) {
			j++
		}
	default:
		return nil, false
	}
	if j < len(b) && b[j] == '.' {
		j++
		d := j
		for j < len(b) && isDigit(b[j]) {
			j++
		}
		if j == d {
			return nil, false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		d := j
		for j < len(b) && isDigit(b[j]) {
			j++
		}
		if j == d {
			return nil, false
		}
	}
	s.i = j
	return b[start:j], true
}

// integer reads a number that encoding/json would store in an int64: no
// fraction or exponent. At most 18 digits, so it cannot overflow; longer
// literals are left to the reference.
func (s *jsonScanner) integer() (int64, bool) {
	lit, ok := s.number()
	if !ok {
		return 0, false
	}
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	if len(lit) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range lit {
		if !isDigit(c) {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

// skipValue steps over the value of a key the agent does not read, using
// buf as scratch space. Nested objects and arrays never appear in the stock
// format and are left to the reference.
func (s *jsonScanner) skipValue(buf []byte) bool {
	switch c := s.b[s.i]; {
	case c == '"':
		_, ok := s.stringValue(buf[len(buf):])
		return ok
	case c == '-' || isDigit(c):
		_, ok := s.number()
		return ok
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
			s.i += len(lit)
			return true
		}
	}
	return false
}
