package ipgroups

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/internal/atomicfile"
)

// Store is the snapshot in runtime_config_dir: waf_ip_groups.json and
// waf_ip_groups.json.checksum. A snapshot may hold 1.5 million entries, so
// between calls only id → checksum stays in memory; an update re-reads the
// file and splices raw per-group JSON.
type Store struct {
	dir string
	log *slog.Logger

	// reconcileMu keeps reconciles in order: one waits for the previous
	// one's E6 call, so an older WAF config never lands after a newer one.
	// Push and Checksums never take it.
	reconcileMu sync.Mutex

	// mu serialises the file updates: a heartbeat push and the landing
	// phase of a reconcile both rewrite the whole file. It is never held
	// across an E6 call.
	mu sync.Mutex

	// retry is the reconcile that failed, retried by Retry (a missing
	// group would leave its deny list off).
	retry struct {
		sync.Mutex
		ids     []uint64
		pending bool
		last    time.Time
	}

	// sums is "<id>" → checksum of every group in the file, never nil. It
	// is replaced (under mu) and never changed once published, so
	// Checksums reads it without locking.
	sums atomic.Pointer[map[string]string]
}

// Fetch is the E6 call (agent/controlplane's SyncIPGroups).
type Fetch func(context.Context, *protocol.IPGroupSyncRequest) (protocol.IPGroupSyncReply, error)

// RetryEvery spaces retries of a failed reconcile: E6 may carry 20 MiB.
const RetryEvery = 30 * time.Second

func (s *Store) noteReconcile(ids []uint64, err error) {
	s.retry.Lock()
	defer s.retry.Unlock()
	s.retry.ids, s.retry.pending, s.retry.last = ids, err != nil, time.Now()
}

// RetryDue reports whether a failed reconcile waits and its retry is due.
func (s *Store) RetryDue(now time.Time) bool {
	s.retry.Lock()
	defer s.retry.Unlock()
	return s.retry.pending && now.Sub(s.retry.last) >= RetryEvery
}

// Retry runs the failed reconcile again; ok is false when none waits.
func (s *Store) Retry(ctx context.Context, fetch Fetch) (res Result, ok bool, err error) {
	s.retry.Lock()
	ids, pending := s.retry.ids, s.retry.pending
	s.retry.Unlock()
	if !pending {
		return Result{}, false, nil
	}
	res, err = s.Reconcile(ctx, ids, fetch)
	return res, true, err
}

// Result says what an update did.
type Result struct {
	Landed    []uint64    // groups written with new content, ascending
	Rejected  []Rejection // groups refused because their checksum did not verify
	Dropped   []uint64    // groups removed because the WAF config no longer references them, ascending
	Unchanged bool        // nothing was written
}

// Rejection is a group from the server that was not landed.
type Rejection struct {
	ID     uint64
	Reason string
}

// Open loads the per-group checksums of the snapshot in dir. A missing file
// is an empty snapshot. A file that cannot be used is moved aside as
// <name>.corrupt-<unix> with a warning and the store starts empty, so a bad
// file never makes the agent crash-loop.
func Open(dir string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := atomicfile.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("ip groups: create %s: %w", dir, err)
	}
	removeStaleTemps(dir)
	s := &Store{dir: dir, log: log}
	s.setSums(map[string]string{})
	data, err := readSnapshotFile(s.path())
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil && !errors.Is(err, errTooLarge) {
		return nil, fmt.Errorf("ip groups: read snapshot: %w", err)
	}
	if err == nil {
		sums, perr := parseHeads(data)
		var compiled []byte
		if perr == nil {
			compiled, perr = s.staleCompiled(data)
		}
		if perr == nil {
			s.setSums(sums)
			if err := s.repairCompiled(compiled); err != nil {
				return nil, err
			}
			return s, s.repairChecksum(data)
		}
		err = perr
	}
	aside, merr := moveAside(dir)
	if merr != nil {
		return nil, merr
	}
	log.Warn("ip group snapshot could not be used; moved aside, starting empty", "path", s.path(), "moved_to", aside, "err", err)
	return s, nil
}

// staleCompiled returns the compiled file for data when the one on disk is
// missing or was compiled from other JSON (a crash between the writes, or
// an agent that predates it), and nil when it is current.
func (s *Store) staleCompiled(data []byte) ([]byte, error) {
	label, err := readCompiledLabel(s.dir)
	if err == nil && label == labelOf(data) {
		return nil, nil
	}
	s.log.Info("ip group compiled snapshot is missing or stale; rebuilding", "path", filepath.Join(s.dir, CompiledName), "reason", err)
	return Compile(data)
}

// repairCompiled writes a rebuilt compiled file (nil: none needed). It runs
// before repairChecksum: the checksum file is what makes the workers look,
// so it must come last.
func (s *Store) repairCompiled(compiled []byte) error {
	if compiled == nil {
		return nil
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, CompiledName), compiled, fileMode); err != nil {
		return fmt.Errorf("ip groups: repair compiled snapshot: %w", err)
	}
	return nil
}

// repairChecksum rewrites the checksum file when it does not describe the
// JSON: a crash between the two writes leaves it one version behind, and
// the Lua side would keep the old groups while heartbeats report the new.
func (s *Store) repairChecksum(data []byte) error {
	want := checksumLine(data)
	have, err := os.ReadFile(filepath.Join(s.dir, ChecksumName))
	if err == nil && bytes.Equal(have, want) {
		return nil
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, ChecksumName), want, fileMode); err != nil {
		return fmt.Errorf("ip groups: repair checksum file: %w", err)
	}
	s.log.Info("ip group checksum file did not match the snapshot; rewritten", "path", filepath.Join(s.dir, ChecksumName))
	return nil
}

func (s *Store) path() string { return filepath.Join(s.dir, SnapshotName) }

// Checksums returns "<id>" → checksum of every group in the snapshot, for
// the heartbeat's waf_ip_group_checksums. The map is a copy, never nil. It
// takes no lock, so a slow update never holds up a heartbeat.
func (s *Store) Checksums() map[string]string {
	return maps.Clone(s.currentSums())
}

// currentSums is the published id → checksum map. Callers must not modify it.
func (s *Store) currentSums() map[string]string { return *s.sums.Load() }

// setSums publishes sums; the map must not be modified afterwards.
func (s *Store) setSums(sums map[string]string) { s.sums.Store(&sums) }

// Push lands groups from a heartbeat reply or a WebSocket waf_ip_groups
// message. Only groups already in the snapshot are updated: new ids arrive
// only through Reconcile (PROTOCOL 7.2). A group whose checksum does not
// verify is rejected and reported while the others still land. Nothing is
// written when no group changed.
func (s *Store) Push(groups []protocol.WAFIPGroup) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.currentSums()
	verified, rejected, err := s.verifyGroups(groups, func(key string) bool {
		_, ok := cur[key]
		return ok
	})
	res := Result{Rejected: rejected}
	if err != nil {
		return res, err
	}
	changed := changedFrom(verified, cur)
	if len(changed) == 0 {
		res.Unchanged = true
		return res, nil
	}
	raw, err := readRaw(s.path())
	if err != nil {
		return res, err
	}
	for key, v := range changed {
		raw[key] = v.raw
	}
	if err := s.land(raw); err != nil {
		return res, err
	}
	next := maps.Clone(cur)
	for key, v := range changed {
		next[key] = v.checksum
		res.Landed = append(res.Landed, v.id)
	}
	s.setSums(next)
	slices.Sort(res.Landed)
	return res, nil
}

// Reconcile runs the post-apply sync (PROTOCOL 7.2) after an apply whose
// outcome was success or warning. It asks fetch (E6) for every group in
// ids (the version's references, render.Output.IPGroups), sending the local checksums so the server
// returns only what differs, and replaces the snapshot with exactly those
// groups. With no reference E6 is not called and the snapshot becomes
// {"groups":{}}. A referenced group that is still missing afterwards is an
// error naming it; the rest still lands. A failed reconcile is kept for
// Retry.
//
// The store is not locked during the E6 call: heartbeats keep reading
// Checksums and Push keeps landing groups meanwhile. The landing phase
// works from the snapshot as it is then, so a group pushed during the call
// is kept unless the server returned that group itself. Reconciles run one
// at a time.
func (s *Store) Reconcile(ctx context.Context, ids []uint64, fetch Fetch) (res Result, err error) {
	defer func() { s.noteReconcile(ids, err) }()
	s.reconcileMu.Lock()
	defer s.reconcileMu.Unlock()

	var reply protocol.IPGroupSyncReply
	if len(ids) > 0 {
		req := s.syncRequest(ids)
		if reply, err = fetch(ctx, req); err != nil {
			return Result{}, fmt.Errorf("ip groups: sync %d groups: %w", len(ids), err)
		}
	}

	referenced := make(map[string]bool, len(ids))
	for _, id := range ids {
		referenced[idKey(id)] = true
	}
	// Hashing up to 20 MiB of groups needs no lock.
	verified, rejected, err := s.verifyGroups(reply.Groups, func(key string) bool { return referenced[key] })
	res = Result{Rejected: rejected}
	if err != nil {
		return res, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	// The snapshot as it is now, including anything pushed during the call.
	cur := s.currentSums()
	fresh := changedFrom(verified, cur)

	var kept []uint64
	var missing []uint64
	for _, id := range ids {
		if _, ok := fresh[idKey(id)]; ok {
			continue
		}
		if _, ok := cur[idKey(id)]; ok {
			kept = append(kept, id)
		} else {
			missing = append(missing, id)
		}
	}
	for key := range cur {
		if !referenced[key] {
			id, _ := parseKey(key)
			res.Dropped = append(res.Dropped, id)
		}
	}
	slices.Sort(res.Dropped)

	// A missing file is rewritten even when nothing changed, so the Lua
	// side gets a definite snapshot (at least {"groups":{}}).
	if _, statErr := os.Stat(s.path()); statErr == nil && len(fresh) == 0 && len(res.Dropped) == 0 {
		res.Unchanged = true
		return res, missingError(missing)
	}

	out := make(map[string]json.RawMessage, len(ids))
	sums := make(map[string]string, len(ids))
	var readErr error
	if len(kept) > 0 {
		raw, err := readRaw(s.path())
		// Unreadable local copies count as missing: landing the fresh
		// groups is still better than keeping the whole old snapshot.
		readErr = err
		for _, id := range kept {
			key := idKey(id)
			if r, ok := raw[key]; ok {
				out[key] = r
				sums[key] = cur[key]
			} else {
				missing = append(missing, id)
			}
		}
	}
	for key, v := range fresh {
		out[key] = v.raw
		sums[key] = v.checksum
		res.Landed = append(res.Landed, v.id)
	}
	if err := s.land(out); err != nil {
		return Result{Rejected: res.Rejected}, err
	}
	s.setSums(sums)
	slices.Sort(res.Landed)
	slices.Sort(missing)
	return res, errors.Join(readErr, missingError(missing))
}

// syncRequest builds the E6 request for ids with the local checksums, under
// the lock so it sees a complete update.
func (s *Store) syncRequest(ids []uint64) *protocol.IPGroupSyncRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.currentSums()
	req := &protocol.IPGroupSyncRequest{IDs: ids, Checksums: make(map[string]string)}
	for _, id := range ids {
		if sum := cur[idKey(id)]; sum != "" {
			req.Checksums[idKey(id)] = sum
		}
	}
	return req
}

// verifyGroups verifies the groups that wanted accepts and returns them by
// "<id>", plus the rejected ones. Of several valid entries for one id the
// last wins.
func (s *Store) verifyGroups(groups []protocol.WAFIPGroup, wanted func(key string) bool) (map[string]verifiedGroup, []Rejection, error) {
	valid := make(map[string]verifiedGroup)
	var rejected []Rejection
	for _, g := range groups {
		key := idKey(g.ID)
		if g.Malformed != "" {
			rejected = append(rejected, Rejection{ID: g.ID, Reason: "malformed: " + g.Malformed})
			continue
		}
		if !wanted(key) {
			s.log.Debug("ip group ignored: not in the snapshot or not referenced", "id", g.ID)
			continue
		}
		v, reason, err := verify(g)
		if err != nil {
			return nil, rejected, err
		}
		if reason != "" {
			rejected = append(rejected, Rejection{ID: g.ID, Reason: reason})
			continue
		}
		valid[key] = v
	}
	return valid, rejected, nil
}

// changedFrom removes from verified, and returns, the groups whose content
// is the same as the local copy in sums. Same checksum means same
// membership: a rename alone is not worth rewriting a file of up to 20 MiB
// (the Lua side ignores names).
func changedFrom(verified map[string]verifiedGroup, sums map[string]string) map[string]verifiedGroup {
	for key, v := range verified {
		if local, ok := sums[key]; ok && local == v.checksum {
			delete(verified, key)
		}
	}
	return verified
}

// land encodes, compiles and writes a complete snapshot, leaving the old
// files untouched when it is over the size limit, does not compile, or the
// JSON write fails. The snapshot is compiled here, exactly when the JSON
// is rewritten, and never for an unchanged one.
func (s *Store) land(groups map[string]json.RawMessage) error {
	data, err := encodeSnapshot(groups)
	if err != nil {
		return err
	}
	compiled, err := compileGroups(groups, labelOf(data))
	if err != nil {
		return err
	}
	return writeSnapshot(s.dir, data, compiled)
}

// missingError names referenced groups the snapshot still lacks, or is nil.
func missingError(ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = idKey(id)
	}
	return fmt.Errorf("ip groups: referenced groups missing after sync: %s", strings.Join(names, ", "))
}

func idKey(id uint64) string { return strconv.FormatUint(id, 10) }

// ReadChecksums reads the snapshot in dir without changing anything (for
// `openflare-agent status`): id → checksum, empty when there is none.
func ReadChecksums(dir string) (map[string]string, error) {
	data, err := readSnapshotFile(filepath.Join(dir, SnapshotName))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ip groups: %w", err)
	}
	sums, err := parseHeads(data)
	if err != nil {
		return nil, fmt.Errorf("ip groups: %s: %w", SnapshotName, err)
	}
	return sums, nil
}
