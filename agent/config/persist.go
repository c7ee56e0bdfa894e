package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"openflare/internal/atomicfile"
)

// PersistToken stores a node token in agent.json and clears discovery_token,
// editing only those two values so the operator's other keys, order,
// indentation and comments-by-convention stay exactly as written (upstream
// rewrites the whole file with resolved defaults). The write is atomic: a
// crash leaves the old file or the new one.
func PersistToken(path, token string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		// Running from environment variables alone: the token still has to
		// survive a restart, so start a file holding just it.
		data = []byte("{}\n")
	} else if err != nil {
		return fmt.Errorf("persist token to %s: %w", path, err)
	}
	out, err := setTokenKeys(data, token)
	if err != nil {
		return fmt.Errorf("persist token to %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, out, 0o600); err != nil {
		return fmt.Errorf("persist token: %w", err)
	}
	return nil
}

type span struct{ start, end int }

// setTokenKeys returns data with every top-level agent_token set to token and
// every discovery_token set to "", inserting agent_token when absent.
func setTokenKeys(data []byte, token string) ([]byte, error) {
	spans, open, err := topLevelValues(data)
	if err != nil {
		return nil, err
	}
	quoted, _ := json.Marshal(token)
	type edit struct {
		span
		text []byte
	}
	var edits []edit
	for _, s := range spans["agent_token"] {
		edits = append(edits, edit{s, quoted})
	}
	for _, s := range spans["discovery_token"] {
		edits = append(edits, edit{s, []byte(`""`)})
	}
	if len(spans["agent_token"]) == 0 {
		edits = append(edits, edit{span{open + 1, open + 1}, insertion(data, open, quoted, len(spans) > 0)})
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].start > edits[j].start })
	out := append([]byte(nil), data...)
	for _, e := range edits {
		out = append(out[:e.start], append(append([]byte(nil), e.text...), out[e.end:]...)...)
	}
	var check struct {
		AgentToken     string `json:"agent_token"`
		DiscoveryToken string `json:"discovery_token"`
	}
	if err := json.Unmarshal(out, &check); err != nil || check.AgentToken != token || check.DiscoveryToken != "" {
		return nil, errors.New("edited agent.json does not read back as expected")
	}
	return out, nil
}

// insertion builds `"agent_token": "<tok>",` placed right after the opening
// brace, indented like the file's first key.
func insertion(data []byte, open int, quoted []byte, hasKeys bool) []byte {
	ws := []byte("\n  ")
	if hasKeys {
		i := open + 1
		for i < len(data) && isSpace(data[i]) {
			i++
		}
		ws = data[open+1 : i]
	}
	var b bytes.Buffer
	b.Write(ws)
	b.WriteString(`"agent_token": `)
	b.Write(quoted)
	if hasKeys {
		b.WriteByte(',')
	} else {
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// topLevelValues maps each key of the top-level object to the byte spans of
// its values, and returns the offset of the opening brace.
func topLevelValues(data []byte) (map[string][]span, int, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, 0, fmt.Errorf("invalid JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, 0, errors.New("top level is not a JSON object")
	}
	open := int(dec.InputOffset()) - 1
	spans := map[string][]span{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, 0, fmt.Errorf("invalid JSON: %v", err)
		}
		key, _ := kt.(string)
		i := int(dec.InputOffset())
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, 0, fmt.Errorf("invalid JSON: %v", err)
		}
		for i < len(data) && (isSpace(data[i]) || data[i] == ':') {
			i++
		}
		spans[key] = append(spans[key], span{i, int(dec.InputOffset())})
	}
	return spans, open, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
