package render

import (
	"testing"

	"openflare/agent/protocol"
)

// Test vector A of PROTOCOL 4.3: the algorithm alone.
func TestChecksumVectorA(t *testing.T) {
	got, err := Checksum("M", "R", []protocol.SupportFile{
		{Path: "b.txt", Content: "2"},
		{Path: "a.txt", Content: "1"},
		{Path: "openresty_config.json", Content: "ignored"},
	})
	const want = "34da2bc64bc8da4ddf8f3f2f48b034f8288fa517bc1ce09a9767afb684adabd7"
	if err != nil || got != want {
		t.Fatalf("checksum = %s, %v, want %s", got, err, want)
	}
}
