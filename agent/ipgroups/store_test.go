package ipgroups

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"openflare/agent/protocol"
)

func TestPushUpdatesPresentGroupsOnly(t *testing.T) {
	g3, g4 := group(3, true, "198.51.100.7"), group(4, true, "192.0.2.1")
	s, dir := seed(t, g3, g4)

	g3b := group(3, true, "203.0.113.0/24", "198.51.100.8")
	bad := group(4, true, "192.0.2.99")
	bad.Checksum = group(4, true, "192.0.2.98").Checksum // another content's
	res, err := push(s, []protocol.WAFIPGroup{g3b, group(99, true, "10.0.0.1"), bad})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Landed, []uint64{3}) || res.Unchanged || len(res.Dropped) != 0 {
		t.Fatalf("result %+v", res)
	}
	if len(res.Rejected) != 1 || res.Rejected[0].ID != 4 || !strings.Contains(res.Rejected[0].Reason, "checksum") {
		t.Fatalf("rejected %+v", res.Rejected)
	}
	assertSnapshot(t, dir, g3b, g4)
	if got := s.Checksums(); !maps.Equal(got, sums(g3b, g4)) {
		t.Fatalf("Checksums() = %v", got)
	}
}

func TestPushUnchangedWritesNothing(t *testing.T) {
	g3, g4 := group(3, true, "198.51.100.7"), group(4, false)
	s, dir := seed(t, g3, g4)
	before := snapshotFiles(t, dir)

	renamed := g3
	renamed.Name = "renamed" // not covered by the checksum
	// The held version sent again is not even verified: a wrong list
	// under the held checksum changes nothing either.
	sameSum := group(3, true, "10.9.9.8")
	sameSum.Checksum = g3.Checksum
	for _, groups := range [][]protocol.WAFIPGroup{nil, {g3, g4}, {renamed}, {group(50, true, "10.0.0.1")}, {sameSum}} {
		res, err := push(s, groups)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Unchanged || len(res.Landed) != 0 || len(res.Rejected) != 0 {
			t.Fatalf("push %v: result %+v", groups, res)
		}
	}
	// A push whose only group is rejected writes nothing either.
	bad := group(3, true, "10.9.9.9")
	bad.Checksum = strings.Repeat("0", 64)
	if res, err := push(s, []protocol.WAFIPGroup{bad}); err != nil || !res.Unchanged || len(res.Rejected) != 1 {
		t.Fatalf("result %+v, %v", res, err)
	}
	assertUntouched(t, dir, before)
}

// A null ip_list lands as [] so the Lua side always finds a table.
func TestPushNullList(t *testing.T) {
	s, dir := seed(t, group(3, true, "198.51.100.7"))
	g := group(3, true)
	if g.IPList != nil {
		t.Fatal("want a nil list")
	}
	if _, err := push(s, []protocol.WAFIPGroup{g}); err != nil {
		t.Fatal(err)
	}
	assertSnapshot(t, dir, g)
	if !bytes.Contains(readFile(t, filepath.Join(dir, SnapshotName)), []byte(`"ip_list":[]`)) {
		t.Fatal("null list not stored as []")
	}
}

// Unchanged groups keep their exact bytes across an update of another one.
func TestPushKeepsOtherGroupsByteIdentical(t *testing.T) {
	g3 := group(3, true, "a<b>&c", "2001:db8::1") // characters encoding/json escapes
	g10 := group(10, true, bigList(1000, 1)...)
	s, dir := seed(t, g3, g10)
	raw := func() []byte {
		var doc struct {
			Groups map[string]json.RawMessage `json:"groups"`
		}
		if err := json.Unmarshal(readFile(t, filepath.Join(dir, SnapshotName)), &doc); err != nil {
			t.Fatal(err)
		}
		return doc.Groups["3"]
	}
	before := raw()
	g10b := group(10, true, bigList(1000, 2)...)
	if _, err := push(s, []protocol.WAFIPGroup{g10b}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw(), before) {
		t.Fatal("group 3 changed bytes")
	}
	// "10" sorts before "3", as Go map marshalling orders keys.
	assertSnapshot(t, dir, g3, g10b)
}

func TestReconcileNoReferencedGroups(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	noSync := func(context.Context, *protocol.IPGroupSyncRequest, func(*json.Decoder) error) error {
		t.Fatal("E6 called with no referenced group")
		return nil
	}
	res, err := s.Reconcile(context.Background(), refs(), noSync)
	if err != nil || res.Unchanged {
		t.Fatalf("result %+v, %v", res, err)
	}
	if got := string(readFile(t, filepath.Join(dir, SnapshotName))); got != `{"groups":{}}` {
		t.Fatalf("snapshot %s", got)
	}
	assertConsistent(t, dir)

	// Existing groups are dropped.
	s, dir = seed(t, group(3, true, "198.51.100.7"), group(5, false))
	res, err = s.Reconcile(context.Background(), nil, noSync)
	if err != nil || !slices.Equal(res.Dropped, []uint64{3, 5}) || len(res.Landed) != 0 {
		t.Fatalf("result %+v, %v", res, err)
	}
	assertSnapshot(t, dir)
	if got := s.Checksums(); got == nil || len(got) != 0 {
		t.Fatalf("Checksums() = %#v", got)
	}
}

func TestReconcileRequest(t *testing.T) {
	dir := t.TempDir()
	g3 := group(3, true, "198.51.100.7")
	// Group 5 is stored without a checksum: it must not be sent.
	g5 := group(5, true, "192.0.2.5")
	g5.Checksum = ""
	if err := os.WriteFile(filepath.Join(dir, SnapshotName), expectedSnapshot(g3, g5), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(g3, group(5, true, "192.0.2.5"), group(12, false))
	if _, err := s.Reconcile(context.Background(), refs(12, 3, 5, 3), srv.sync); err != nil {
		t.Fatal(err)
	}
	if len(srv.requests) != 1 {
		t.Fatalf("%d requests", len(srv.requests))
	}
	req := srv.requests[0]
	if !slices.Equal(req.IDs, []uint64{3, 5, 12}) {
		t.Errorf("ids %v, want sorted [3 5 12]", req.IDs)
	}
	if !maps.Equal(req.Checksums, map[string]string{"3": g3.Checksum}) {
		t.Errorf("checksums %v", req.Checksums)
	}
	assertSnapshot(t, dir, g3, group(5, true, "192.0.2.5"), group(12, false))
}

func TestReconcileReplacesSnapshot(t *testing.T) {
	g3, g4, g5 := group(3, true, "198.51.100.7"), group(4, true, "192.0.2.4"), group(5, true, "192.0.2.5")
	s, dir := seed(t, g3, g4, g5)

	g4b, g6 := group(4, true, "192.0.2.44"), group(6, false)
	srv := newServer(g3, g4b, g5, g6)
	res, err := s.Reconcile(context.Background(), refs(3, 4, 6), srv.sync)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Landed, []uint64{4, 6}) || !slices.Equal(res.Dropped, []uint64{5}) || res.Unchanged || len(res.Rejected) != 0 {
		t.Fatalf("result %+v", res)
	}
	assertSnapshot(t, dir, g3, g4b, g6)
	if got := s.Checksums(); !maps.Equal(got, sums(g3, g4b, g6)) {
		t.Fatalf("Checksums() = %v", got)
	}

	// The same sync again changes nothing and writes nothing.
	before := snapshotFiles(t, dir)
	res, err = s.Reconcile(context.Background(), refs(3, 4, 6), srv.sync)
	if err != nil || !res.Unchanged {
		t.Fatalf("result %+v, %v", res, err)
	}
	assertUntouched(t, dir, before)
}

func TestReconcileMissingGroup(t *testing.T) {
	g3 := group(3, true, "198.51.100.7")
	s, dir := seed(t, g3)
	g4 := group(4, true, "192.0.2.4")
	srv := newServer(g3, g4) // the server does not know 8
	res, err := s.Reconcile(context.Background(), refs(3, 4, 8), srv.sync)
	if err == nil || !strings.Contains(err.Error(), "8") || strings.Contains(err.Error(), "3") || strings.Contains(err.Error(), "4") {
		t.Fatalf("err %v, want one naming only 8", err)
	}
	if !slices.Equal(res.Landed, []uint64{4}) {
		t.Fatalf("result %+v", res)
	}
	assertSnapshot(t, dir, g3, g4)
	if got := s.Checksums(); !maps.Equal(got, sums(g3, g4)) {
		t.Fatalf("Checksums() = %v", got)
	}
}

// The store copies the groups it keeps from where it last found them in
// the file: a file rewritten behind its back (here reformatted, every
// group moved) must make a push fail without writing, not land bytes
// from the wrong place.
func TestSnapshotRewrittenBehindStore(t *testing.T) {
	g3, g4 := group(3, true, "198.51.100.7"), group(4, true, "192.0.2.4")
	s, dir := seed(t, g3, g4)
	path := filepath.Join(dir, SnapshotName)
	moved := append([]byte("{  "), readFile(t, path)[1:]...)
	if err := os.WriteFile(path, moved, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := push(s, []protocol.WAFIPGroup{group(3, true, "10.0.0.3")}); err == nil {
		t.Fatal("push over a rewritten snapshot succeeded")
	}
	if !bytes.Equal(readFile(t, path), moved) {
		t.Fatal("push wrote the snapshot")
	}
}

// A snapshot removed behind the store's back: Push fails without writing,
// Reconcile lands what the server returned and names what it lost.
func TestSnapshotVanished(t *testing.T) {
	g3, g4 := group(3, true, "198.51.100.7"), group(4, true, "192.0.2.4")
	s, dir := seed(t, g3, g4)
	os.Remove(filepath.Join(dir, SnapshotName))
	if _, err := push(s, []protocol.WAFIPGroup{group(3, true, "10.0.0.3")}); err == nil {
		t.Fatal("push without a snapshot succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, SnapshotName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("push wrote a snapshot: %v", err)
	}
	g4b := group(4, true, "192.0.2.44")
	res, err := s.Reconcile(context.Background(), refs(3, 4), newServer(g3, g4b).sync)
	if err == nil || !strings.Contains(err.Error(), "missing after sync: 3") {
		t.Fatalf("err %v", err)
	}
	if !slices.Equal(res.Landed, []uint64{4}) {
		t.Fatalf("result %+v", res)
	}
	assertSnapshot(t, dir, g4b)
	// The next sync asks for 3 without a checksum and gets it back.
	if _, err := s.Reconcile(context.Background(), refs(3, 4), newServer(g3, g4b).sync); err != nil {
		t.Fatal(err)
	}
	assertSnapshot(t, dir, g3, g4b)
}

func TestReconcileRejectsBadChecksum(t *testing.T) {
	g3 := group(3, true, "198.51.100.7")
	s, dir := seed(t, g3)
	bad3 := group(3, true, "10.0.0.3")
	bad3.Checksum = strings.Repeat("a", 64)
	bad9 := group(9, true, "10.0.0.9")
	bad9.Checksum = strings.Repeat("b", 64)
	g5 := group(5, true, "192.0.2.5")
	res, err := s.Reconcile(context.Background(), refs(3, 5, 9), reply(bad3, g5, bad9))
	// 3 keeps its old copy; 9 has none, so it is missing.
	if err == nil || !strings.Contains(err.Error(), "missing after sync: 9") {
		t.Fatalf("err %v", err)
	}
	var rejected []uint64
	for _, r := range res.Rejected {
		rejected = append(rejected, r.ID)
	}
	if !slices.Equal(rejected, []uint64{3, 9}) || !slices.Equal(res.Landed, []uint64{5}) {
		t.Fatalf("result %+v", res)
	}
	assertSnapshot(t, dir, g3, g5)
}

func TestReconcileFailures(t *testing.T) {
	g3 := group(3, true, "198.51.100.7")
	s, dir := seed(t, g3)
	before := snapshotFiles(t, dir)

	failing := func(context.Context, *protocol.IPGroupSyncRequest, func(*json.Decoder) error) error {
		return errors.New("HTTP 400")
	}
	if _, err := s.Reconcile(context.Background(), refs(3, 4), failing); err == nil || !strings.Contains(err.Error(), "HTTP 400") {
		t.Fatalf("err %v", err)
	}
	// The failed reconcile waits for its retry, spaced RetryEvery apart.
	if s.RetryDue(time.Now()) || !s.RetryDue(time.Now().Add(RetryEvery)) {
		t.Fatal("retry not due exactly after RetryEvery")
	}
	assertUntouched(t, dir, before)
	if got := s.Checksums(); !maps.Equal(got, sums(g3)) {
		t.Fatalf("Checksums() = %v", got)
	}
}

// hugeList is an ip_list whose encoding alone exceeds MaxSnapshotBytes.
func hugeList() []string {
	list := make([]string, 21<<10)
	for i := range list {
		list[i] = fmt.Sprintf("%08d%s", i, strings.Repeat("x", 1016))
	}
	return list
}

func TestSnapshotSizeLimit(t *testing.T) {
	g3, g4 := group(3, true, "198.51.100.7"), group(4, true, "192.0.2.4")
	s, dir := seed(t, g3, g4)
	before := snapshotFiles(t, dir)
	big := group(3, true, hugeList()...)

	check := func(res Result, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "limit") || !strings.Contains(err.Error(), fmt.Sprint(MaxSnapshotBytes)) {
			t.Fatalf("err %v, want the size limit with sizes", err)
		}
		if len(res.Landed) != 0 {
			t.Fatalf("result %+v", res)
		}
		assertUntouched(t, dir, before)
		if got := s.Checksums(); !maps.Equal(got, sums(g3, g4)) {
			t.Fatalf("Checksums() = %v", got)
		}
	}
	check(push(s, []protocol.WAFIPGroup{big}))
	// Dropping 4 and adding 5 while 3 grows too large changes nothing either.
	check(s.Reconcile(context.Background(), refs(3, 5), newServer(big, group(5, false)).sync))
}

func TestOpenLoadsChecksums(t *testing.T) {
	g3, g4 := group(3, true, "198.51.100.7"), group(4, false)
	_, dir := seed(t, g3, g4)
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Checksums()
	if !maps.Equal(got, sums(g3, g4)) {
		t.Fatalf("Checksums() = %v", got)
	}
	got["3"] = "changed"
	if s.Checksums()["3"] != g3.Checksum {
		t.Fatal("Checksums() exposed the store's map")
	}

	empty, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := empty.Checksums(); got == nil || len(got) != 0 {
		t.Fatalf("empty store Checksums() = %#v", got)
	}
}

func TestOpenMovesCorruptSnapshotAside(t *testing.T) {
	cases := map[string]string{
		"not json":        `{"groups":{"3":`,
		"groups array":    `{"groups":[]}`,
		"no groups":       `{}`,
		"null groups":     `{"groups":null}`,
		"non-numeric key": `{"groups":{"x":{"id":0,"checksum":""}}}`,
		"padded key":      `{"groups":{"03":{"id":3,"checksum":""}}}`,
		"id mismatch":     `{"groups":{"3":{"id":4,"checksum":""}}}`,
		"null group":      `{"groups":{"3":null}}`,
		"scalar group":    `{"groups":{"3":7}}`,
		// Refused by size before it is read: the tail is a sparse hole.
		"too large": `{"groups":{}}`,
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, SnapshotName)
			os.WriteFile(path, []byte(content), 0o644)
			if name == "too large" {
				if err := os.Truncate(path, MaxSnapshotBytes+1); err != nil {
					t.Fatal(err)
				}
				content = string(readFile(t, path))
			}
			os.WriteFile(filepath.Join(dir, ChecksumName), []byte(sha([]byte(content))+"\n"), 0o644)
			s, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Checksums()) != 0 {
				t.Fatalf("Checksums() = %v", s.Checksums())
			}
			aside, _ := filepath.Glob(filepath.Join(dir, SnapshotName+".corrupt-*"))
			if len(aside) != 1 || len(readFile(t, aside[0])) != len(content) {
				t.Fatalf("moved aside: %v", aside)
			}
			for _, name := range []string{SnapshotName, ChecksumName} {
				if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s still there: %v", name, err)
				}
			}
			// The store works from empty.
			g := group(3, true, "198.51.100.7")
			if _, err := s.Reconcile(context.Background(), refs(3), newServer(g).sync); err != nil {
				t.Fatal(err)
			}
			assertSnapshot(t, dir, g)
		})
	}
}

// A crash between the two writes leaves the checksum file one version
// behind; Open brings it up to date so the Lua side adopts the JSON.
func TestOpenRepairsChecksumFile(t *testing.T) {
	g3 := group(3, true, "198.51.100.7")
	_, dir := seed(t, g3)
	for _, stale := range []string{"0000\n", ""} {
		path := filepath.Join(dir, ChecksumName)
		if stale == "" {
			os.Remove(path)
		} else {
			os.WriteFile(path, []byte(stale), 0o644)
		}
		if _, err := Open(dir, nil); err != nil {
			t.Fatal(err)
		}
		assertSnapshot(t, dir, g3)
	}
}

func TestOpenRemovesStaleTemps(t *testing.T) {
	_, dir := seed(t, group(3, true, "198.51.100.7"))
	for _, name := range []string{"." + SnapshotName + ".tmp-123", "." + ChecksumName + ".tmp-456"} {
		os.WriteFile(filepath.Join(dir, name), []byte("partial"), 0o600)
	}
	if _, err := Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*")); len(left) != 0 {
		t.Fatalf("stale temps left: %v", left)
	}
}

// Heartbeat pushes, reconciles and checksum reads may run at once.
func TestConcurrentUse(t *testing.T) {
	s, dir := seed(t, group(3, true, "a"), group(4, true, "b"))
	srv := newServer(group(3, true, "a"), group(4, true, "b"))
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 10 {
				g := group(uint64(3+i%2), true, fmt.Sprintf("10.%d.%d.1", i, j))
				if _, err := push(s, []protocol.WAFIPGroup{g}); err != nil {
					t.Error(err)
				}
				s.Checksums()
			}
		})
	}
	wg.Go(func() {
		for range 10 {
			if _, err := s.Reconcile(context.Background(), refs(3, 4), srv.sync); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	assertConsistent(t, dir)
	reopened, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(reopened.Checksums(), s.Checksums()) {
		t.Fatalf("memory %v, file %v", s.Checksums(), reopened.Checksums())
	}
}

// A reconcile waiting on E6 holds up neither heartbeats (Checksums) nor
// pushes, and a push made meanwhile survives the reconcile unless the
// server returned that same group.
func TestReconcileDoesNotBlockDuringSync(t *testing.T) {
	g3, g4 := group(3, true, "198.51.100.3"), group(4, true, "198.51.100.4")
	s, dir := seed(t, g3, g4)

	// The server has a new 4 and a new 5; 3 is unchanged there.
	g4srv, g5 := group(4, true, "192.0.2.44"), group(5, false)
	srv := newServer(g3, g4srv, g5)
	entered, release := make(chan struct{}), make(chan struct{})
	blocking := func(ctx context.Context, req *protocol.IPGroupSyncRequest, read func(*json.Decoder) error) error {
		close(entered)
		<-release
		return srv.sync(ctx, req, read)
	}
	type outcome struct {
		res Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := s.Reconcile(context.Background(), refs(3, 4, 5), blocking)
		done <- outcome{res, err}
	}()
	<-entered

	// Both calls must return while the sync is still blocked; if either
	// waited for it, release would never be closed and the test would
	// hang (and fail at the test timeout) rather than pass.
	if got := s.Checksums(); !maps.Equal(got, sums(g3, g4)) {
		t.Fatalf("Checksums() during sync = %v", got)
	}
	g3push, g4push := group(3, true, "203.0.113.3"), group(4, true, "203.0.113.4")
	res, err := push(s, []protocol.WAFIPGroup{g3push, g4push})
	if err != nil || !slices.Equal(res.Landed, []uint64{3, 4}) {
		t.Fatalf("push during sync: %+v, %v", res, err)
	}
	assertSnapshot(t, dir, g3push, g4push)
	if got := s.Checksums(); !maps.Equal(got, sums(g3push, g4push)) {
		t.Fatalf("Checksums() after push = %v", got)
	}
	select {
	case o := <-done:
		t.Fatalf("reconcile finished before its sync returned: %+v, %v", o.res, o.err)
	default:
	}

	close(release)
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	// 3: the server sent nothing (the agent asked with the old checksum,
	// which still matched), so the pushed copy stays. 4: the server's
	// reply wins. 5: new.
	if !slices.Equal(o.res.Landed, []uint64{4, 5}) || len(o.res.Dropped) != 0 || o.res.Unchanged {
		t.Fatalf("result %+v", o.res)
	}
	assertSnapshot(t, dir, g3push, g4srv, g5)
	if got := s.Checksums(); !maps.Equal(got, sums(g3push, g4srv, g5)) {
		t.Fatalf("Checksums() = %v", got)
	}
	if got := srv.requests[0].Checksums; !maps.Equal(got, sums(g3, g4)) {
		t.Fatalf("request checksums %v, want the ones before the push", got)
	}
}

// Ids are uint64 whatever the target's int size: one above 2^32 is stored,
// reported and reloaded.
func TestLargeIDs(t *testing.T) {
	const big = 1<<32 + 7
	const maxID = ^uint64(0)
	gBig, gMax, g3 := group(big, true, "198.51.100.7"), group(maxID, false, "10.0.0.0/8"), group(3, true, "192.0.2.3")
	s, dir := seed(t, gBig, gMax, g3)
	assertSnapshot(t, dir, gBig, gMax, g3)
	want := sums(gBig, gMax, g3)
	if _, ok := want["4294967303"]; !ok {
		t.Fatalf("key of %d: %v", uint64(big), want)
	}
	if got := s.Checksums(); !maps.Equal(got, want) {
		t.Fatalf("Checksums() = %v", got)
	}
	reopened, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := reopened.Checksums(); !maps.Equal(got, want) {
		t.Fatalf("reopened Checksums() = %v", got)
	}
	if got, err := ReadChecksums(dir); err != nil || !maps.Equal(got, want) {
		t.Fatalf("ReadChecksums = %v, %v", got, err)
	}
	gBig2 := group(big, true, "198.51.100.8")
	if res, err := push(reopened, []protocol.WAFIPGroup{gBig2}); err != nil || !slices.Equal(res.Landed, []uint64{big}) {
		t.Fatalf("push: %+v, %v", res, err)
	}
	res, err := reopened.Reconcile(context.Background(), refs(big), newServer(gBig2).sync)
	if err != nil || !slices.Equal(res.Dropped, []uint64{3, maxID}) {
		t.Fatalf("reconcile: %+v, %v", res, err)
	}
	assertSnapshot(t, dir, gBig2)

	for key, want := range map[string]uint64{"4294967296": 1 << 32, "18446744073709551615": maxID} {
		if id, err := parseKey(key); err != nil || id != want {
			t.Errorf("parseKey(%q) = %d, %v", key, id, err)
		}
	}
	for _, key := range []string{"18446744073709551616", "04294967296", "-1", "+1", ""} {
		if _, err := parseKey(key); err == nil {
			t.Errorf("parseKey(%q) accepted", key)
		}
	}
}

// One wrong-typed element is rejected alone: the reply's other groups land.
func TestMalformedGroupRejectedAlone(t *testing.T) {
	g3 := group(3, true, "198.51.100.7")
	s, dir := seed(t, g3, group(4, true, "198.51.100.8"))
	g3b := group(3, true, "198.51.100.9")
	good, _ := json.Marshal(g3b)
	res, err := pushJSON(s, `[`+string(good)+`,{"id":4,"enabled":"yes","ip_list":[1]},{"id":-1}]`)
	if err != nil || !slices.Equal(res.Landed, []uint64{3}) || len(res.Rejected) != 2 || !strings.Contains(res.Rejected[0].Reason, "malformed") {
		t.Fatalf("result %+v, %v", res, err)
	}
	assertSnapshot(t, dir, g3b, group(4, true, "198.51.100.8"))
}
