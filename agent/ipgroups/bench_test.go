package ipgroups

import (
	"context"
	"testing"

	"openflare/agent/protocol"
)

// Landing one 100 000-entry group must take well under 200 ms. Each
// iteration alternates between two versions so every one really lands
// (verify, encode, splice, write both files with fsync).
func BenchmarkPush100k(b *testing.B) {
	versions := [2]protocol.WAFIPGroup{group(1, true, bigList(100000, 1)...), group(1, true, bigList(100000, 2)...)}
	s, _ := seed(b, versions[1], group(2, true, "198.51.100.7"))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		res, err := push(s, []protocol.WAFIPGroup{versions[i%2]})
		if err != nil || len(res.Landed) != 1 {
			b.Fatalf("%+v, %v", res, err)
		}
	}
}

func BenchmarkReconcile100k(b *testing.B) {
	versions := [2]*fakeServer{
		newServer(group(1, true, bigList(100000, 1)...), group(2, true, "198.51.100.7")),
		newServer(group(1, true, bigList(100000, 2)...), group(2, true, "198.51.100.7")),
	}
	s, _ := seed(b, versions[1].groups[1], versions[1].groups[2])
	cfg := refs(1, 2)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		res, err := s.Reconcile(context.Background(), cfg, versions[i%2].sync)
		if err != nil || len(res.Landed) != 1 {
			b.Fatalf("%+v, %v", res, err)
		}
	}
}
