package ipgroups

import (
	"encoding/json"
	"strings"
	"testing"

	"openflare/agent/protocol"
)

// verifyElement decodes one group element, as a server sends it, in a
// batch that wants every id, and says whether it verified, or why not.
func verifyElement(t *testing.T, element string) (verified bool, reason string) {
	t.Helper()
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := s.newBatch(func(string) bool { return true })
	defer b.Close()
	if err := b.Decode(json.NewDecoder(strings.NewReader("[" + element + "]"))); err != nil {
		t.Fatalf("%s: %v", element, err)
	}
	if len(b.rejected) > 0 {
		return false, b.rejected[0].Reason
	}
	return len(b.verified) == 1, ""
}

// The two PROTOCOL 7.1 test vectors verify as the server sends them, the
// list in any order and null standing for [], and so does the oracle.
func TestChecksumVectors(t *testing.T) {
	const v3 = "bf15bab3faa1796111cf1518a2ffa05c1e295fac692ec4bc8d3383769435e278"
	const v4 = "7b3c3819f271562ec3e24e241f94a0fa17866c3d1d5fb6ec61d7d78309d515e1"
	for _, element := range []string{
		`{"id":3,"name":"blocklist","type":"manual","enabled":true,"ip_list":["203.0.113.0/24","198.51.100.7"],"checksum":"` + v3 + `"}`,
		`{"checksum":"` + v3 + `","ip_list":["198.51.100.7","203.0.113.0/24"],"enabled":true,"id":3}`,
		`{"id":4,"enabled":false,"ip_list":[],"checksum":"` + v4 + `"}`,
		`{"id":4,"enabled":false,"ip_list":null,"checksum":"` + v4 + `"}`,
		`{"id":4,"checksum":"` + v4 + `"}`,
	} {
		if ok, reason := verifyElement(t, element); !ok {
			t.Errorf("%s does not verify: %s", element, reason)
		}
	}
	if got := checksum(protocol.WAFIPGroup{ID: 3, Enabled: true, IPList: []string{"203.0.113.0/24", "198.51.100.7"}}); got != v3 {
		t.Errorf("oracle: %s", got)
	}
}

// name, type and the order of the entries are not covered; the id, the
// enabled flag and every entry are, escaped as encoding/json escapes them
// (the server hashes its decoded strings).
func TestChecksumCoverage(t *testing.T) {
	g := group(7, true, "b", "a", "x<y>&z", "é", "2001:db8::/32")
	sum := g.Checksum
	element := func(id, enabled, list, name string) string {
		return `{"id":` + id + `,"name":"` + name + `","enabled":` + enabled + `,"ip_list":` + list + `,"checksum":"` + sum + `"}`
	}
	same := []string{
		element("7", "true", `["a","b","x<y>&z","é","2001:db8::/32"]`, "a"),
		element("7", "true", `["2001:db8::/32","\u00e9","x\u003cy\u003e\u0026z","b","a"]`, "renamed"),
	}
	for _, e := range same {
		if ok, reason := verifyElement(t, e); !ok {
			t.Errorf("%s: %s", e, reason)
		}
	}
	for _, e := range []string{
		element("8", "true", `["a","b","x<y>&z","é","2001:db8::/32"]`, "a"),
		element("7", "false", `["a","b","x<y>&z","é","2001:db8::/32"]`, "a"),
		element("7", "true", `["a","b","x<y>&z","é"]`, "a"),
		element("7", "true", `["a","b","x<y>&z","é","2001:db8::/32","a"]`, "a"),
	} {
		if ok, reason := verifyElement(t, e); ok || !strings.Contains(reason, "checksum mismatch") {
			t.Errorf("%s verified (%q)", e, reason)
		}
	}
}
