package controlplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"openflare/agent/protocol"
	"openflare/internal/jsonstream"
)

// A reply is decoded as a stream, one JSON value at a time, so the memory a
// reply costs is what it decodes to, not that plus a copy of its text.
// encoding/json's Decoder.Decode buffers a whole value before decoding it:
// decoding the envelope in one call would hold the whole reply (and up to
// twice that while the buffer grows). Here only objects and arrays the
// agent knows are walked token by token; each leaf value is buffered alone,
// and no leaf may exceed its budget (the reply's value budget but for E4's
// source and support files), which stops a single endless string long
// before the reply cap.

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
	// it is still buffering. It is valueBudget but while a value of its
	// own budget is decoded (stream.large), which what then names.
	left        int64
	maxValue    int64
	valueBudget int64
	what        string
	read        int64
	over        bool // past the cap
	valueBig    bool // one value past maxValue
	err         error
}

func (c *budgetReader) Read(p []byte) (int, error) {
	if c.dec != nil {
		held := c.read - c.dec.InputOffset()
		if held > c.maxValue {
			c.valueBig = true
			return 0, ErrValueTooLarge
		}
		// The decoder's buffer doubles as it grows: one read could
		// complete a value of twice the budget before this check runs
		// again. Reading at most a byte past the budget lets none pass.
		if room := c.maxValue - held + 1; int64(len(p)) > room {
			p = p[:room]
		}
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
	r   *budgetReader
}

func newStream(r *budgetReader) stream {
	dec := json.NewDecoder(r)
	r.dec = dec
	r.maxValue = r.valueBudget
	return stream{dec: dec, r: r}
}

// heartbeatOut is E2's reply, whose waf_ip_groups go to groups.
type heartbeatOut struct {
	r      *protocol.HeartbeatReply
	groups func(*json.Decoder) error
}

// syncOut is E6's reply: {"groups":[...]}, the array going to groups.
type syncOut struct{ groups func(*json.Decoder) error }

// activeOut is E4's reply, whose support files go to files one by one;
// its source_config_json, and each support file, may take up to source
// bytes.
type activeOut struct {
	r      *protocol.ActiveConfig
	files  func(protocol.SupportFile) error
	source int64
}

func (s stream) object(field func(key string) error) error { return jsonstream.Object(s.dec, field) }

func (s stream) skip() error { return jsonstream.Skip(s.dec) }

// value decodes one leaf (or small) value into v.
func (s stream) value(v any) error { return s.dec.Decode(v) }

// large decodes a string allowed to take up to budget bytes, named what
// should it take more.
func (s stream) large(v *string, budget int64, what string) error {
	s.r.maxValue, s.r.what = budget, what
	if err := s.value(v); err != nil {
		return err
	}
	s.r.maxValue, s.r.what = s.r.valueBudget, ""
	return nil
}

// groups hands an IP-group array to read, or skips it without one.
func (s stream) groups(read func(*json.Decoder) error) error {
	if read == nil {
		return s.skip()
	}
	return read(s.dec)
}

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
			err = fmt.Errorf("%w: data after the envelope", jsonstream.ErrShape)
		}
	}
	return errorMsg, err
}

// data decodes the envelope's data: the replies that can be large are
// walked, the others decoded whole (their value budget bounds them).
func (s stream) data(out any) error {
	switch v := out.(type) {
	case heartbeatOut:
		return s.heartbeat(v)
	case syncOut:
		return s.object(func(key string) error {
			if key != "groups" {
				return s.skip()
			}
			return s.groups(v.groups)
		})
	case activeOut:
		return s.activeConfig(v)
	}
	return s.value(out)
}

func (s stream) heartbeat(h heartbeatOut) error {
	r := h.r
	return s.object(func(key string) error {
		switch key {
		case "node":
			return s.value(&r.Node)
		case "agent_settings":
			return s.value(&r.AgentSettings)
		case "active_config":
			return s.value(&r.ActiveConfig)
		case "waf_ip_groups":
			return s.groups(h.groups)
		}
		return s.skip()
	})
}

func (s stream) activeConfig(a activeOut) error {
	c := a.r
	return s.object(func(key string) error {
		switch key {
		case "version":
			return s.value(&c.Version)
		case "checksum":
			return s.value(&c.Checksum)
		case "source_config_json":
			return s.large(&c.SourceConfigJSON, a.source, "source_config_json")
		case "created_at":
			return s.value(&c.CreatedAt)
		case "support_files":
			return jsonstream.Array(s.dec, func() error { return s.supportFile(a.files, a.source) })
		}
		return s.skip()
	})
}

// supportFile decodes one support file and hands it on: one file's content
// is the most of them memory holds at once.
func (s stream) supportFile(files func(protocol.SupportFile) error, budget int64) error {
	var f protocol.SupportFile
	err := s.object(func(key string) error {
		switch key {
		case "path":
			return s.value(&f.Path)
		case "content":
			what := "a support file"
			if f.Path != "" {
				what = fmt.Sprintf("support file %q", protocol.Bound(f.Path, 128))
			}
			return s.large(&f.Content, budget, what)
		}
		return s.skip()
	})
	if err != nil {
		return err
	}
	return files(f)
}
