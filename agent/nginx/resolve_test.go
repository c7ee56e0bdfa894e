package nginx

import (
	"context"
	"testing"
)

// localhost resolves without the network, to loopback addresses only, in
// their plain form.
func TestResolveHostLocalhost(t *testing.T) {
	addrs, err := ResolveHost(context.Background(), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) == 0 {
		t.Fatal("localhost resolved to nothing")
	}
	for _, a := range addrs {
		if !a.IsLoopback() || a.Is4In6() {
			t.Errorf("localhost resolved to %v", addrs)
		}
	}
}
