package controlplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/openflare/openflare-agent/agent/protocol"
)

// A reply is decoded as a stream, one JSON value at a time, so the memory a
// reply costs is what it decodes to, not that plus a copy of its text.
// encoding/json's Decoder.Decode buffers a whole value before decoding it:
// decoding the envelope in one call would hold the whole reply (and up to
// twice that while the buffer grows). Here only objects and arrays the
// agent knows are walked token by token; each leaf value is buffered alone,
// and no leaf may exceed the reply's value budget, which stops a single
// endless string long before the reply cap.

// ErrValueTooLarge marks a reply holding one JSON value (a string, say)
// larger than its budget.
var ErrValueTooLarge = errors.New("a value in the reply is larger than its budget")

// budgetReader enforces the reply cap and the value budget on the bytes
// the decoder pulls.
type budgetReader struct {
	r   io.Reader
	dec *json.Decoder
	// left is what may still be read; maxValue bounds the value being
	// decoded: bytes read past the decoder's input offset are the value
	// it is still buffering.
	left     int64
	maxValue int64
	read     int64
	over     bool // past the cap
	valueBig bool // one value past maxValue
	err      error
}

func (c *budgetReader) Read(p []byte) (int, error) {
	if c.dec != nil && c.read-c.dec.InputOffset() > c.maxValue {
		c.valueBig = true
		return 0, ErrValueTooLarge
	}
	if c.left <= 0 {
		// A byte past the cap that is not trailing whitespace (a JSON
		// encoder ends with a newline) proves the reply is too large.
		var tail [64]byte
		for spare := 0; spare < 4; spare++ {
			n, err := c.r.Read(tail[:])
			for _, b := range tail[:n] {
				if b != ' ' && b != '\n' && b != '\r' && b != '\t' {
					c.over = true
					return 0, ErrTooLarge
				}
			}
			if err != nil {
				return 0, io.EOF
			}
		}
		c.over = true
		return 0, ErrTooLarge
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	c.read += int64(n)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}

// stream walks one reply.
type stream struct {
	dec *json.Decoder
	// entries is what is left of entryBudget, the bytes the IP-group
	// entries of this reply may cost once decoded.
	entries     *int64
	entryBudget int64
}

func newStream(r *budgetReader, entryBudget int64) stream {
	dec := json.NewDecoder(r)
	r.dec = dec
	left := entryBudget
	return stream{dec: dec, entries: &left, entryBudget: entryBudget}
}

// errShape marks a reply whose JSON is well formed but not what the
// endpoint returns (an array where an object belongs).
var errShape = errors.New("unexpected JSON shape")

// object walks an object, calling field for each key; field must consume
// the key's value. null counts as an empty object.
func (s stream) object(field func(key string) error) error {
	tok, err := s.dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if tok != json.Delim('{') {
		return fmt.Errorf("%w: %v where an object belongs", errShape, tok)
	}
	return s.fields(field)
}

// fields walks the rest of an object whose '{' was just read.
func (s stream) fields(field func(key string) error) error {
	for s.dec.More() {
		tok, err := s.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if err := field(key); err != nil {
			return err
		}
	}
	_, err := s.dec.Token() // '}'
	return err
}

// array walks an array, calling elem for each element, which must consume
// it. null counts as an empty array.
func (s stream) array(elem func() error) error {
	tok, err := s.dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if tok != json.Delim('[') {
		return fmt.Errorf("%w: %v where an array belongs", errShape, tok)
	}
	for s.dec.More() {
		if err := elem(); err != nil {
			return err
		}
	}
	_, err = s.dec.Token() // ']'
	return err
}

// skip consumes one value token by token, buffering no container whole.
func (s stream) skip() error {
	tok, err := s.dec.Token()
	if err != nil {
		return err
	}
	return s.skipRest(tok)
}

// skipRest consumes the rest of the value whose first token was tok.
func (s stream) skipRest(tok json.Token) error {
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return nil
	}
	for depth := 1; depth > 0; {
		tok, err := s.dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// value decodes one leaf (or small) value into v.
func (s stream) value(v any) error { return s.dec.Decode(v) }

// envelope decodes {"error_msg": ..., "data": ...} with data into out.
func (s stream) envelope(out any) (errorMsg string, err error) {
	err = s.object(func(key string) error {
		switch key {
		case "error_msg":
			var msg *string
			if err := s.value(&msg); err != nil {
				return err
			}
			if msg != nil {
				errorMsg = *msg
			}
			return nil
		case "data":
			return s.data(out)
		}
		return s.skip()
	})
	if err == nil {
		// Trailing bytes after the envelope are not the server's.
		if _, terr := s.dec.Token(); terr != io.EOF {
			err = fmt.Errorf("%w: data after the envelope", errShape)
		}
	}
	return errorMsg, err
}

// data decodes the envelope's data: the replies that can be large are
// walked, the others decoded whole (their value budget bounds them).
func (s stream) data(out any) error {
	switch v := out.(type) {
	case *protocol.HeartbeatReply:
		return s.heartbeat(v)
	case *protocol.IPGroupSyncReply:
		return s.object(func(key string) error {
			if key != "groups" {
				return s.skip()
			}
			v.Groups = v.Groups[:0]
			return s.groups(&v.Groups)
		})
	case *protocol.ActiveConfig:
		return s.activeConfig(v)
	}
	return s.value(out)
}

func (s stream) heartbeat(r *protocol.HeartbeatReply) error {
	return s.object(func(key string) error {
		switch key {
		case "node":
			return s.value(&r.Node)
		case "agent_settings":
			return s.value(&r.AgentSettings)
		case "active_config":
			return s.value(&r.ActiveConfig)
		case "waf_ip_groups":
			r.WAFIPGroups = r.WAFIPGroups[:0]
			return s.groups(&r.WAFIPGroups)
		}
		return s.skip()
	})
}

func (s stream) activeConfig(c *protocol.ActiveConfig) error {
	return s.object(func(key string) error {
		switch key {
		case "version":
			return s.value(&c.Version)
		case "checksum":
			return s.value(&c.Checksum)
		case "source_config_json":
			return s.value(&c.SourceConfigJSON)
		case "created_at":
			return s.value(&c.CreatedAt)
		case "support_files":
			c.SupportFiles = c.SupportFiles[:0]
			return s.array(func() error {
				var f protocol.SupportFile
				if err := s.value(&f); err != nil {
					return err
				}
				c.SupportFiles = append(c.SupportFiles, f)
				return nil
			})
		}
		return s.skip()
	})
}

// groups appends each element of an IP-group array to out. A group with a
// wrong-typed field, or over what is left of the reply's entry budget, is
// kept marked Malformed: that group is rejected, not the reply carrying it
// (which also carries the node's settings and active version).
func (s stream) groups(out *[]protocol.WAFIPGroup) error {
	return s.array(func() error {
		g, err := s.group()
		if err != nil {
			return err
		}
		// Every element kept costs its struct and texts too: a reply of
		// millions of tiny elements must not escape the budget either.
		cost := int64(groupOverhead + len(g.Name) + len(g.Type) + len(g.Checksum) + len(g.Malformed))
		if cost > *s.entries {
			return fmt.Errorf("%w: more IP-group elements than this node's budget of %d MiB for one reply (set by memory_limit)", ErrValueTooLarge, s.entryBudget>>20)
		}
		*s.entries -= cost
		*out = append(*out, g)
		return nil
	})
}

// groupOverhead is what one decoded group costs beyond its texts and
// entries.
const groupOverhead = 128

// maxMalformed bounds the reason kept for a malformed group.
const maxMalformed = 200

// entryOverhead is what one kept entry costs beyond its text: the string
// header in the list.
const entryOverhead = 16

func (s stream) group() (protocol.WAFIPGroup, error) {
	var g protocol.WAFIPGroup
	tok, err := s.dec.Token()
	if err != nil {
		return g, err
	}
	if tok == nil {
		return g, nil
	}
	if tok != json.Delim('{') {
		if err := s.skipRest(tok); err != nil {
			return g, err
		}
		g.Malformed = fmt.Sprintf("element is %v, not an object", tok)
		return g, nil
	}
	mark := func(reason string) {
		if g.Malformed == "" {
			g.Malformed = bounded(reason, maxMalformed)
		}
	}
	var spent int64 // what this group's entries cost
	field := func(v any) error {
		err := s.value(v)
		if typeErr := (*json.UnmarshalTypeError)(nil); errors.As(err, &typeErr) {
			mark(err.Error())
			return nil
		}
		return err
	}
	err = s.fields(func(key string) error {
		switch key {
		case "id":
			return field(&g.ID)
		case "name":
			return field(&g.Name)
		case "type":
			return field(&g.Type)
		case "enabled":
			return field(&g.Enabled)
		case "checksum":
			return field(&g.Checksum)
		case "ip_list":
			// A repeated key replaces the list: what the earlier one
			// cost goes back.
			*s.entries += spent
			reason, cost, err := s.ipList(&g.IPList)
			spent = cost
			if reason != "" {
				mark(reason)
			}
			return err
		}
		return s.skip()
	})
	if err != nil {
		return g, err
	}
	if g.Malformed != "" {
		// Nothing of a malformed group is used but its id (to report it):
		// its entries are dropped, and what they cost goes back to the
		// groups after it.
		*s.entries += spent
		g = protocol.WAFIPGroup{ID: g.ID, Malformed: g.Malformed}
	}
	return g, nil
}

// ipList reads the entries one token at a time, so a group of a million
// entries is never buffered as text, and stops keeping them once the
// reply's entry budget is spent. reason is why the list is unusable; spent
// is what the kept entries cost.
func (s stream) ipList(list *[]string) (reason string, spent int64, err error) {
	tok, err := s.dec.Token()
	if err != nil || tok == nil {
		*list = nil
		return "", 0, err
	}
	if tok != json.Delim('[') {
		return fmt.Sprintf("ip_list is %v, not an array", tok), 0, s.skipRest(tok)
	}
	kept := []string{}
	n := 0
	for ; s.dec.More(); n++ {
		tok, err := s.dec.Token()
		if err != nil {
			return "", spent, err
		}
		entry, ok := tok.(string)
		if !ok {
			if reason == "" {
				reason = fmt.Sprintf("ip_list element %d is not a string", n)
			}
			if err := s.skipRest(tok); err != nil {
				return "", spent, err
			}
			continue
		}
		if reason != "" {
			continue
		}
		cost := int64(len(entry) + entryOverhead)
		if cost > *s.entries {
			reason = fmt.Sprintf("ip_list is over this node's budget of %d MiB for IP-group entries in one reply (set by memory_limit)", s.entryBudget>>20)
			// What this group held goes back to the groups after it.
			*s.entries += spent
			spent = 0
			kept = nil
			continue
		}
		*s.entries -= cost
		spent += cost
		kept = append(kept, entry)
	}
	*list = kept
	_, err = s.dec.Token() // ']'
	return reason, spent, err
}
