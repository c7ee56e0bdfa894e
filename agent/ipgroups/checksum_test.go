package ipgroups

import (
	"slices"
	"testing"

	"github.com/openflare/openflare-agent/agent/protocol"
)

// The two PROTOCOL 7.1 test vectors.
func TestChecksumVectors(t *testing.T) {
	list := []string{"203.0.113.0/24", "198.51.100.7"}
	cases := []struct {
		g    protocol.WAFIPGroup
		want string
	}{
		{protocol.WAFIPGroup{ID: 3, Name: "blocklist", Type: "manual", Enabled: true, IPList: list}, "bf15bab3faa1796111cf1518a2ffa05c1e295fac692ec4bc8d3383769435e278"},
		{protocol.WAFIPGroup{ID: 4, Enabled: false, IPList: []string{}}, "7b3c3819f271562ec3e24e241f94a0fa17866c3d1d5fb6ec61d7d78309d515e1"},
		// ip_list null is hashed as [].
		{protocol.WAFIPGroup{ID: 4, Enabled: false}, "7b3c3819f271562ec3e24e241f94a0fa17866c3d1d5fb6ec61d7d78309d515e1"},
	}
	for _, c := range cases {
		if got := Checksum(c.g); got != c.want {
			t.Errorf("Checksum(%+v) = %s, want %s", c.g, got, c.want)
		}
	}
	if !slices.Equal(list, []string{"203.0.113.0/24", "198.51.100.7"}) {
		t.Errorf("Checksum sorted the caller's list: %v", list)
	}
}

// name, type and the checksum field itself are not covered; the order of
// the entries is not either.
func TestChecksumCoverage(t *testing.T) {
	a := protocol.WAFIPGroup{ID: 7, Name: "a", Type: "manual", Enabled: true, IPList: []string{"b", "a"}}
	b := protocol.WAFIPGroup{ID: 7, Name: "b", Type: "subscription", Enabled: true, IPList: []string{"a", "b"}, Checksum: "x"}
	if Checksum(a) != Checksum(b) {
		t.Error("name, type, checksum or entry order changed the checksum")
	}
	for _, other := range []protocol.WAFIPGroup{
		{ID: 8, Enabled: true, IPList: []string{"a", "b"}},
		{ID: 7, Enabled: false, IPList: []string{"a", "b"}},
		{ID: 7, Enabled: true, IPList: []string{"a"}},
	} {
		if Checksum(other) == Checksum(a) {
			t.Errorf("%+v has the same checksum as %+v", other, a)
		}
	}
}
