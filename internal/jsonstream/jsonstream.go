// Package jsonstream walks JSON through an encoding/json Decoder one token
// at a time, so that a value the caller does not need whole (a reply of
// tens of MiB, an IP group of a million entries) is never buffered whole:
// Decoder.Decode holds a complete value before it decodes it.
package jsonstream

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrShape marks JSON that is well formed but not of the shape expected
// (an array where an object belongs), or nested deeper than MaxDepth.
var ErrShape = errors.New("unexpected JSON shape")

// MaxDepth bounds the nesting Skip walks, as encoding/json bounds its own
// decoding: Decoder.Token keeps a word per open level and sets no limit,
// so a reply of 32 MiB of brackets would cost 256 MiB.
const MaxDepth = 10000

// Object walks an object, calling field for each key with dec at the key's
// value, which field must consume. null counts as an empty object.
func Object(dec *json.Decoder, field func(key string) error) error {
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return err
	}
	if tok != json.Delim('{') {
		return fmt.Errorf("%w: %v where an object belongs", ErrShape, tok)
	}
	return Fields(dec, field)
}

// Fields walks the rest of an object whose '{' was just read.
func Fields(dec *json.Decoder, field func(key string) error) error {
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if err := field(key); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
}

// Array walks an array, calling elem for each element, which elem must
// consume. null counts as an empty array.
func Array(dec *json.Decoder, elem func() error) error {
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return err
	}
	if tok != json.Delim('[') {
		return fmt.Errorf("%w: %v where an array belongs", ErrShape, tok)
	}
	for dec.More() {
		if err := elem(); err != nil {
			return err
		}
	}
	_, err = dec.Token() // ']'
	return err
}

// Skip consumes one value token by token, buffering no container whole.
func Skip(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	return SkipRest(dec, tok)
}

// SkipRest consumes the rest of the value whose first token was tok.
func SkipRest(dec *json.Decoder, tok json.Token) error {
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return nil
	}
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if depth++; depth > MaxDepth {
				return fmt.Errorf("%w: nested deeper than %d levels", ErrShape, MaxDepth)
			}
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}
