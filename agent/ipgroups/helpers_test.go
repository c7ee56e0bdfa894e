package ipgroups

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"openflare/agent/protocol"
)

// group builds a group as the server ships it, with its true checksum.
func group(id uint64, enabled bool, ips ...string) protocol.WAFIPGroup {
	g := protocol.WAFIPGroup{ID: id, Name: fmt.Sprintf("g%d", id), Type: "manual", Enabled: enabled, IPList: ips}
	g.Checksum = checksum(g)
	return g
}

// checksum is PROTOCOL 7.1 computed the plain way, from a list in memory:
// the oracle the streaming verification is held to.
func checksum(g protocol.WAFIPGroup) string {
	list := slices.Clone(g.IPList)
	slices.Sort(list)
	if list == nil {
		list = []string{}
	}
	b, _ := json.Marshal(struct {
		ID      uint64   `json:"id"`
		Enabled bool     `json:"enabled"`
		IPList  []string `json:"ip_list"`
	}{g.ID, g.Enabled, list})
	return sha(b)
}

// feed hands groups to read as the server's JSON array.
func feed(read func(*json.Decoder) error, groups []protocol.WAFIPGroup) error {
	b, err := json.Marshal(groups)
	if err != nil {
		return err
	}
	return read(json.NewDecoder(bytes.NewReader(b)))
}

// push lands groups as a heartbeat reply or WebSocket push carries them.
func push(s *Store, groups []protocol.WAFIPGroup) (Result, error) {
	b := s.Batch()
	defer b.Close()
	if err := feed(b.Decode, groups); err != nil {
		return Result{}, err
	}
	return s.Push(b)
}

// pushJSON lands the groups of a raw JSON array.
func pushJSON(s *Store, array string) (Result, error) {
	b := s.Batch()
	defer b.Close()
	if err := b.Decode(json.NewDecoder(strings.NewReader(array))); err != nil {
		return Result{}, err
	}
	return s.Push(b)
}

// reply is an E6 answer of exactly groups.
func reply(groups ...protocol.WAFIPGroup) Fetch {
	return func(_ context.Context, _ *protocol.IPGroupSyncRequest, read func(*json.Decoder) error) error {
		return feed(read, groups)
	}
}

// bigList returns n distinct IPv4 /32 entries in a scrambled order, tagged
// by variant so two variants differ in every entry.
func bigList(n, variant int) []string {
	list := make([]string, n)
	for i := range list {
		// An odd multiplier permutes the 24-bit host space.
		h := (i*40503 + 12345) & 0xffffff
		list[i] = fmt.Sprintf("%d.%d.%d.%d", 1+variant%200, h>>16, h>>8&0xff, h&0xff)
	}
	return list
}

// refs is the id list a rendered version hands over: deduplicated and
// ascending, as render.Output.IPGroups is.
func refs(ids ...uint64) []uint64 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

// fakeServer is E6 as a closure: it returns every requested group whose
// checksum differs from the one the agent sent, and records each request.
type fakeServer struct {
	groups   map[uint64]protocol.WAFIPGroup
	requests []protocol.IPGroupSyncRequest
}

func newServer(groups ...protocol.WAFIPGroup) *fakeServer {
	s := &fakeServer{groups: make(map[uint64]protocol.WAFIPGroup)}
	s.set(groups...)
	return s
}

func (s *fakeServer) set(groups ...protocol.WAFIPGroup) {
	for _, g := range groups {
		s.groups[g.ID] = g
	}
}

func (s *fakeServer) sync(_ context.Context, req *protocol.IPGroupSyncRequest, read func(*json.Decoder) error) error {
	s.requests = append(s.requests, protocol.IPGroupSyncRequest{IDs: slices.Clone(req.IDs), Checksums: req.Checksums})
	groups := []protocol.WAFIPGroup{}
	for _, id := range req.IDs {
		g, ok := s.groups[id]
		if ok && req.Checksums[idKey(id)] != g.Checksum {
			groups = append(groups, g)
		}
	}
	return feed(read, groups)
}

// seed creates a store in a fresh directory holding groups.
func seed(t testing.TB, groups ...protocol.WAFIPGroup) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, g := range groups {
		ids = append(ids, g.ID)
	}
	if _, err := s.Reconcile(context.Background(), refs(ids...), newServer(groups...).sync); err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// expectedSnapshot is what encoding/json makes of the groups as a Go map,
// each list sorted as its checksum sorts it: the exact bytes the store
// must write.
func expectedSnapshot(groups ...protocol.WAFIPGroup) []byte {
	m := make(map[string]protocol.WAFIPGroup, len(groups))
	for _, g := range groups {
		g.IPList = slices.Clone(g.IPList)
		slices.Sort(g.IPList)
		if g.IPList == nil {
			g.IPList = []string{}
		}
		m[idKey(g.ID)] = g
	}
	b, _ := json.Marshal(struct {
		Groups map[string]protocol.WAFIPGroup `json:"groups"`
	}{m})
	return b
}

func sha(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// assertSnapshot checks the JSON file holds exactly groups, that the
// checksum file describes it, and that both are readable by the workers.
func assertSnapshot(t *testing.T, dir string, groups ...protocol.WAFIPGroup) {
	t.Helper()
	data := readFile(t, filepath.Join(dir, SnapshotName))
	if want := expectedSnapshot(groups...); !bytes.Equal(data, want) {
		t.Fatalf("snapshot:\n got %.300s\nwant %.300s", data, want)
	}
	assertConsistent(t, dir)
}

// assertConsistent checks the checksum file is sha256(JSON)+"\n", the
// compiled file is the JSON's compiled form, and all three are mode 0644.
func assertConsistent(t *testing.T, dir string) {
	t.Helper()
	data := readFile(t, filepath.Join(dir, SnapshotName))
	if got, want := string(readFile(t, filepath.Join(dir, ChecksumName))), sha(data)+"\n"; got != want {
		t.Fatalf("checksum file %q, want %q", got, want)
	}
	want, err := Compile(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, CompiledName)); !bytes.Equal(got, want) {
		t.Fatalf("compiled file (%d bytes) is not the JSON's compiled form (%d bytes)", len(got), len(want))
	}
	for _, name := range []string{SnapshotName, CompiledName, ChecksumName} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o644 {
			t.Fatalf("%s mode %v, want 0644", name, info.Mode().Perm())
		}
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// snapshotFiles returns the three files' bytes and stat results, to prove an
// update left them alone.
type fileState struct {
	data []byte
	info os.FileInfo
}

func snapshotFiles(t *testing.T, dir string) []fileState {
	t.Helper()
	var out []fileState
	for _, name := range []string{SnapshotName, CompiledName, ChecksumName} {
		path := filepath.Join(dir, name)
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fileState{readFile(t, path), info})
	}
	return out
}

func assertUntouched(t *testing.T, dir string, before []fileState) {
	t.Helper()
	after := snapshotFiles(t, dir)
	for i := range before {
		b, a := before[i], after[i]
		if !bytes.Equal(b.data, a.data) || !os.SameFile(b.info, a.info) || !b.info.ModTime().Equal(a.info.ModTime()) {
			t.Fatalf("%s was rewritten", b.info.Name())
		}
	}
}

func sums(groups ...protocol.WAFIPGroup) map[string]string {
	m := make(map[string]string)
	for _, g := range groups {
		m[idKey(g.ID)] = g.Checksum
	}
	return m
}
