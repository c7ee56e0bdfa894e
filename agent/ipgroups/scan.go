package ipgroups

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// scanner walks one stored group's raw JSON. The compiler reads up to 1.5
// million entries per snapshot; encoding/json's Decoder.Token boxes every
// string (seven allocations and 1.4 µs an entry), while this reads each
// entry in place, allocation-free. The input has been through
// json.Unmarshal or json.Marshal before (parseRaw, verify), so it is valid
// JSON; the scanner still reports, never panics on, anything else.
type scanner struct {
	b []byte
	i int
}

var errSyntax = errors.New("malformed JSON")

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek skips white space and returns the next byte (0 at the end).
func (s *scanner) peek() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return fmt.Errorf("%w at byte %d: want %q", errSyntax, s.i, c)
	}
	s.i++
	return nil
}

// str reads a string and returns its content, decoded. Without escapes
// (every entry the agent writes) it is a slice of the input.
func (s *scanner) str() ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return nil, err
	}
	start, escaped := s.i, false
	for ; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case '\\':
			escaped = true
			s.i++
		case '"':
			raw := s.b[start:s.i]
			s.i++
			if !escaped {
				return raw, nil
			}
			var v string
			if err := json.Unmarshal(s.b[start-1:s.i], &v); err != nil {
				return nil, err
			}
			return []byte(v), nil
		}
	}
	return nil, fmt.Errorf("%w: unterminated string", errSyntax)
}

// skip skips one value of any kind.
func (s *scanner) skip() error {
	switch s.peek() {
	case '"':
		_, err := s.str()
		return err
	case '{', '[':
		return s.skipNested()
	case 0:
		return fmt.Errorf("%w: unexpected end", errSyntax)
	}
	// A number or a literal runs to the next delimiter.
	start := s.i
	for s.i < len(s.b) && bytes.IndexByte([]byte(",]} \t\n\r"), s.b[s.i]) < 0 {
		s.i++
	}
	if s.i == start {
		return fmt.Errorf("%w at byte %d", errSyntax, s.i)
	}
	return nil
}

// skipNested skips an object or array, minding strings.
func (s *scanner) skipNested() error {
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			if _, err := s.str(); err != nil {
				return err
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				s.i++
				return nil
			}
		}
		s.i++
	}
	return fmt.Errorf("%w: unterminated object or array", errSyntax)
}

// members calls f for each member of an object, with the scanner at the
// member's value; f must consume it.
func (s *scanner) members(f func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := f(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return fmt.Errorf("%w at byte %d: want , or }", errSyntax, s.i)
		}
	}
}

// elements calls f for each element of an array, with the scanner at the
// element; f must consume it.
func (s *scanner) elements(f func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for {
		if err := f(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return fmt.Errorf("%w at byte %d: want , or ]", errSyntax, s.i)
		}
	}
}
