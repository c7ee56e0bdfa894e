package jsonstream

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// Object and Array walk exactly their value, take null as empty and refuse
// another kind; Skip consumes any value, leaving the decoder after it.
func TestWalk(t *testing.T) {
	dec := json.NewDecoder(strings.NewReader(`{"a":[1,{"x":[2]},"s"],"b":null,"c":{"d":[]}} [null] "after"`))
	var keys []string
	n := 0
	err := Object(dec, func(key string) error {
		keys = append(keys, key)
		if key == "a" {
			return Array(dec, func() error { n++; return Skip(dec) })
		}
		return Skip(dec)
	})
	if err != nil || strings.Join(keys, ",") != "a,b,c" || n != 3 {
		t.Fatalf("keys %v, %d elements, %v", keys, n, err)
	}
	if err := Array(dec, func() error { return Object(dec, func(string) error { return errors.New("null has no keys") }) }); err != nil {
		t.Fatal(err)
	}
	var after string
	if err := dec.Decode(&after); err != nil || after != "after" {
		t.Fatalf("%q, %v", after, err)
	}
	for _, c := range []struct {
		json string
		walk func(*json.Decoder) error
	}{
		{`[1]`, func(d *json.Decoder) error { return Object(d, func(string) error { return nil }) }},
		{`{"a":1}`, func(d *json.Decoder) error { return Array(d, func() error { return nil }) }},
		{`"s"`, func(d *json.Decoder) error { return Array(d, func() error { return nil }) }},
	} {
		if err := c.walk(json.NewDecoder(strings.NewReader(c.json))); !errors.Is(err, ErrShape) {
			t.Errorf("%s: %v, want ErrShape", c.json, err)
		}
	}
}

// Skip refuses nesting deeper than MaxDepth, which Decoder.Token would
// follow at a word of memory a level, and takes MaxDepth itself.
func TestSkipDepth(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if err := Skip(json.NewDecoder(strings.NewReader(deep))); err != nil {
		t.Fatalf("%d levels: %v", MaxDepth, err)
	}
	bomb := strings.Repeat(`{"a":`, MaxDepth+1)
	if err := Skip(json.NewDecoder(strings.NewReader(bomb))); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "deeper than 10000") {
		t.Fatalf("%d levels: %v", MaxDepth+1, err)
	}
}
