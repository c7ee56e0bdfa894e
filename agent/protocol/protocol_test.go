package protocol

import (
	"encoding/json"
	"strings"
	"testing"
)

// Bound keeps text within max bytes on a rune boundary and says how much
// went; text within the bound is kept whole.
func TestBound(t *testing.T) {
	if got := Bound("short", 10); got != "short" {
		t.Errorf("within the bound: %q", got)
	}
	s := strings.Repeat("é", 5) // two bytes each
	got := Bound(s, 5)
	if !strings.HasPrefix(got, "éé…") || !strings.HasSuffix(got, "(6 bytes cut)") {
		t.Errorf("Bound(%q, 5) = %q, want two runes and 6 bytes cut", s, got)
	}
}

// What is stored, logged or echoed in a header is printable ASCII without
// spaces, 1 to max bytes; a config reference is checked field by field.
func TestPrintableAndCheck(t *testing.T) {
	for s, want := range map[string]bool{
		"20260101-001": true, "": false, "a b": false, "a\r\nb": false, "é": false, "~": true, strings.Repeat("a", 33): false,
	} {
		if Printable(s, MaxVersionLen) != want {
			t.Errorf("Printable(%q) = %v", s, !want)
		}
	}
	good := ConfigRef{Version: "20260101-001", Checksum: strings.Repeat("a", 64)}
	if err := good.Check(); err != nil {
		t.Errorf("%v: %v", good, err)
	}
	for _, bad := range []ConfigRef{{Version: "v 1", Checksum: "c"}, {Version: "v1", Checksum: strings.Repeat("a", 65)}} {
		if bad.Check() == nil {
			t.Errorf("%v passed the check", bad)
		}
	}
}

// A register reply's token is access_token, or agent_token from older
// servers.
func TestRegisterReplyToken(t *testing.T) {
	if tok := (RegisterReply{AccessToken: "new", AgentToken: "old"}).Token(); tok != "new" {
		t.Errorf("both keys: %q, want access_token's", tok)
	}
	if tok := (RegisterReply{AgentToken: "old"}).Token(); tok != "old" {
		t.Errorf("an older server's reply: %q", tok)
	}
}

// A group with a wrong-typed field is marked malformed, with its id, and
// the groups around it decode: one bad element costs that group alone.
func TestMalformedIPGroupAlone(t *testing.T) {
	var groups []WAFIPGroup
	in := `[{"id":1,"ip_list":["192.0.2.1"],"checksum":"c1"},{"id":2,"ip_list":"not a list"},{"id":3,"enabled":true}]`
	if err := json.Unmarshal([]byte(in), &groups); err != nil {
		t.Fatal(err)
	}
	if len(groups) != 3 || groups[0].Malformed != "" || groups[0].IPList[0] != "192.0.2.1" || groups[2].Malformed != "" || !groups[2].Enabled {
		t.Fatalf("good groups: %+v", groups)
	}
	if g := groups[1]; g.ID != 2 || g.Malformed == "" {
		t.Fatalf("the bad group: %+v, want id 2 marked malformed", g)
	}
}
