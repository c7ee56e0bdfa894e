package config

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// tokenKeys are the two keys setTokenKeys rewrites.
var tokenKeys = []string{"agent_token", "discovery_token"}

// decodeObject reads data when it is one JSON object (json.Valid: nothing
// but whitespace around it), as encoding/json does (the last of duplicate
// keys wins), numbers kept as written.
func decodeObject(data []byte) (map[string]any, bool) {
	if !json.Valid(data) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil || m == nil {
		return nil, false
	}
	return m, true
}

// foldedTokenKey reports a top-level key encoding/json would read as a
// token key although it is not spelled as one ("AGENT_TOKEN", or with the
// Kelvin sign for the k): setTokenKeys edits only the exact spelling, so
// with such a key present it may refuse the file.
func foldedTokenKey(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return false
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return false
		}
		key, _ := kt.(string)
		for _, k := range tokenKeys {
			if key != k && strings.EqualFold(key, k) {
				return true
			}
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}

// FuzzSetTokenKeys: agent.json is the operator's file, so the edit that
// stores the node token must never panic on it, must succeed on every
// JSON object it can edit, and must leave a JSON object in which the
// token keys read back as set (by encoding/json, as Load reads them) and
// every other key holds the value it held.
func FuzzSetTokenKeys(f *testing.F) {
	for _, seed := range []struct{ data, token string }{
		// The unit tests' files.
		{"{\n    \"server_url\": \"http://cp.example:8080\",\n    \"discovery_token\":   \"disc-0123456789\",\n    \"agent_token\": \"\",\n    \"heartbeat_interval\": \"30s\",\n    \"x_operator_note\": {\"k\": [1, 2]}\n}\n", "node-token-abc"},
		{"{\n  \"server_url\": \"http://h\",\n  \"discovery_token\": \"d\"\n}\n", "tok\"with\\quote"},
		{"{\"server_url\":\"http://h\",\"discovery_token\":\"d\"}", "tok"},
		{"{}", "tok"},
		{"{}\n", "tok"},
		{`{"server_url": "http://h",`, "tok"},
		// Hostile: duplicates, escaped and case-folded key spellings,
		// token keys nested below the top level, non-string values,
		// a token that needs escaping, odd whitespace, very long and
		// deeply nested values, trailing data, not an object.
		{`{"agent_token":"a","agent_token":"b","discovery_token":"c","discovery_token":{"x":1}}`, "t"},
		{`{"agent_\u0074oken":"old","discovery\u005ftoken":"d"}`, "t"},
		{`{"AGENT_TOKEN":"old","Discovery_Token":"d"}`, "t"},
		{"{\"agent_to\u212aen\":\"old\"}", "t"},
		{`{"nested":{"agent_token":"keep","discovery_token":"keep"},"list":[{"agent_token":1}]}`, "t"},
		{`{"agent_token":null,"discovery_token":[1,2,{"a":"}"}]}`, "t"},
		{`{"agent_token":12345678901234567890123,"n":1e400,"m":-0.0}`, "t"},
		{" \t\r\n{ \t\r\n\"a\" \t:\r\n1 \t, \"agent_token\"  :  \"x\" } \n", "t"},
		{`{"a":"\u2028\u2029</script>&"}`, "<tok>&\u2028\x7f"},
		{`{"a":1}`, "\xff\xfe invalid utf-8"},
		{`{"a":1}`, strings.Repeat("t", 4096)},
		{`{"a":"` + strings.Repeat("x", 4096) + `"}`, "t"},
		{`{"a":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`, "t"},
		{`{"a":` + strings.Repeat(`{"agent_token":`, 200) + "0" + strings.Repeat("}", 200) + `}`, "t"},
		{`{"agent_token":"x"} {"agent_token":"y"}`, "t"},
		{`{"agent_token":"x"}garbage`, "t"},
		{`[{"agent_token":"x"}]`, "t"},
		{`"agent_token"`, "t"},
		{`null`, "t"},
		{``, "t"},
		{"\ufeff{}", "t"},
		{`{"":"","\"":"\\"}`, `"`},
	} {
		f.Add([]byte(seed.data), seed.token)
	}
	f.Fuzz(func(t *testing.T, data []byte, token string) {
		in, isObject := decodeObject(data)
		out, err := setTokenKeys(data, token)
		if err != nil {
			if out != nil {
				t.Fatalf("error %v with output %q", err, out)
			}
			// Refusing is right for what is not one JSON object, for a
			// token JSON cannot carry as is, and where a key spelled
			// otherwise would read as a token key.
			if isObject && utf8.ValidString(token) && !foldedTokenKey(data) {
				t.Fatalf("refused a JSON object it can edit: %v\ninput %q\ntoken %q", err, data, token)
			}
			return
		}
		if !isObject {
			t.Fatalf("edited what is not one JSON object: %q → %q", data, out)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON out of valid JSON:\ninput %q\noutput %q", data, out)
		}
		got, ok := decodeObject(out)
		if !ok {
			t.Fatalf("output is not one JSON object: %q", out)
		}
		// Read back by key, exactly, and as Load reads the file.
		if got["agent_token"] != token {
			t.Fatalf("agent_token reads back %#v, want %q\noutput %q", got["agent_token"], token, out)
		}
		if d, ok := got["discovery_token"]; ok != hasKey(in, "discovery_token") || (ok && d != "") {
			t.Fatalf("discovery_token %#v (present %v, in the input %v)\noutput %q", d, ok, hasKey(in, "discovery_token"), out)
		}
		var load struct {
			AgentToken     *string `json:"agent_token"`
			DiscoveryToken *string `json:"discovery_token"`
		}
		if err := json.Unmarshal(out, &load); err != nil || load.AgentToken == nil || *load.AgentToken != token || (load.DiscoveryToken != nil && *load.DiscoveryToken != "") {
			t.Fatalf("read as Load reads it: %v, agent_token %v, discovery_token %v\noutput %q", err, load.AgentToken, load.DiscoveryToken, out)
		}
		// Everything else as it was.
		for _, k := range tokenKeys {
			delete(in, k)
			delete(got, k)
		}
		if !reflect.DeepEqual(in, got) {
			t.Fatalf("other keys changed:\ninput  %q\noutput %q", data, out)
		}
		// Idempotent: storing the same token again changes nothing.
		if again, err := setTokenKeys(out, token); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("a second edit changed the file (%v):\nonce  %q\ntwice %q", err, out, again)
		}
	})
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}
