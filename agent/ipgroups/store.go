// Package ipgroups keeps the WAF IP-group snapshot the OpenResty Lua runtime
// reads (PROTOCOL 7, DATAPLANE 3): waf_ip_groups.json, the compiled
// waf_ip_groups.bin the workers match against, and the .checksum file in
// runtime_config_dir. Groups land without an nginx reload: the Lua
// coordinator polls the checksum file and adopts the compiled file when it
// changes. Groups of any size the server ships land in bounded memory: they
// are read as a stream, sorted on disk, verified and compiled from there.
package ipgroups

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"openflare/agent/protocol"
	"openflare/internal/atomicfile"
)

// Store is the snapshot in runtime_config_dir: waf_ip_groups.json, its
// compiled form and waf_ip_groups.json.checksum. A snapshot may hold 1.5
// million entries, more than the agent's memory: between calls only id →
// checksum stays in memory, groups arrive as a stream (Batch), and an
// update copies the groups it keeps from the file, byte for byte.
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

	// failed is id → why the node does not hold that group as the server
	// has it (Failures).
	failed struct {
		sync.Mutex
		m map[uint64]string
	}

	// heads are the groups of the file as Open read it or land wrote it,
	// nil when unknown (under mu): an update copies the groups it keeps
	// from where they are without walking the whole file again.
	heads map[string]storedGroup

	// sums is "<id>" → checksum of every group in the file, never nil. It
	// is replaced (under mu) and never changed once published, so
	// Checksums reads it without locking.
	sums atomic.Pointer[map[string]string]
}

// Fetch is the E6 call (agent/controlplane's SyncIPGroups): it hands the
// reply's groups array to groups as it arrives.
type Fetch func(ctx context.Context, req *protocol.IPGroupSyncRequest, groups func(*json.Decoder) error) error

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

// Failures lists, ascending by id, the groups the node should enforce as
// the server has them but does not: a checksum that did not verify, a
// malformed element, a failed sync or landing, a referenced group still
// missing. Each Rejection's Reason says why; the node keeps enforcing the
// copy it holds, if any. A group leaves the list when a version of it
// lands, when a reconcile finds the copy held current, and when the WAF
// config stops referencing it. It is meant for the beat's last_error and
// health events: only with an empty list are the node's groups what the
// server asked for.
func (s *Store) Failures() []Rejection {
	s.failed.Lock()
	defer s.failed.Unlock()
	out := make([]Rejection, 0, len(s.failed.m))
	for _, id := range sortedIDs(slices.Collect(maps.Keys(s.failed.m))) {
		out = append(out, Rejection{ID: id, Reason: s.failed.m[id]})
	}
	return out
}

// noteFailures sets the reason of each id in set, or clears it where the
// reason is empty; with replace the others go.
func (s *Store) noteFailures(set map[uint64]string, replace bool) {
	s.failed.Lock()
	defer s.failed.Unlock()
	if replace || s.failed.m == nil {
		s.failed.m = make(map[uint64]string, len(set))
	}
	for id, why := range set {
		if why == "" {
			delete(s.failed.m, id)
		} else {
			s.failed.m[id] = why
		}
	}
}

// Result says what an update did.
type Result struct {
	Landed    []uint64    // groups written with new content, ascending
	Rejected  []Rejection // groups refused: a checksum that did not verify, a malformed element
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
	hash := sha256.New()
	f, heads, err := readSnapshot(s.path(), hash)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err == nil:
		defer f.Close()
		s.setSums(sumsOf(heads))
		s.heads = heads
		return s, s.repair(f, hex.EncodeToString(hash.Sum(nil)))
	case !errors.Is(err, errTooLarge) && !errors.Is(err, errUnusable):
		return nil, fmt.Errorf("ip groups: read snapshot: %w", err)
	}
	aside, merr := moveAside(dir)
	if merr != nil {
		return nil, merr
	}
	log.Warn("ip group snapshot could not be used; moved aside, starting empty", "path", s.path(), "moved_to", aside, "err", err)
	return s, nil
}

// repair rebuilds a compiled file that is missing or was compiled from
// other JSON (a crash between the writes, or an agent that predates it),
// then the checksum file: that file is what makes the workers look, so it
// comes last.
func (s *Store) repair(f *os.File, label string) error {
	if have, err := readCompiledLabel(s.dir); err != nil || have != label {
		s.log.Info("ip group compiled snapshot is missing or stale; rebuilding", "path", filepath.Join(s.dir, CompiledName), "reason", err)
		parts := make(map[string]part, len(s.heads))
		for key, g := range s.heads {
			parts[key] = part{r: f, at: g.at}
		}
		bin, err := s.compiled(sortedKeys(parts), parts, label)
		if err != nil {
			return err
		}
		defer bin.Abort()
		if err := bin.Commit(); err != nil {
			return fmt.Errorf("ip groups: repair compiled snapshot: %w", err)
		}
	}
	return s.repairChecksum(label)
}

// compiled compiles the snapshot of parts, in the order of keys, into a
// replacement of the compiled file, for the caller to commit or abort.
func (s *Store) compiled(keys []string, parts map[string]part, label string) (*atomicfile.File, error) {
	bin, err := atomicfile.Create(filepath.Join(s.dir, CompiledName), fileMode)
	if err != nil {
		return nil, fmt.Errorf("ip groups: %w", err)
	}
	if err := compile(keys, parts, label, bin.Temp(), s.dir); err != nil {
		bin.Abort()
		return nil, err
	}
	return bin, nil
}

// repairChecksum rewrites the checksum file when it does not describe the
// JSON: a crash between the two writes leaves it one version behind, and
// the Lua side would keep the old groups while heartbeats report the new.
func (s *Store) repairChecksum(label string) error {
	want := []byte(label + "\n")
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

// Push lands the groups of a heartbeat reply or a WebSocket waf_ip_groups
// message, decoded into b (Store.Batch). Only groups already in the
// snapshot are updated: new ids arrive only through Reconcile (PROTOCOL
// 7.2). A group whose checksum does not verify is rejected and reported
// while the others still land. Nothing is written when no group changed.
func (s *Store) Push(b *Batch) (Result, error) {
	res := Result{Rejected: b.rejected}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.currentSums()
	changed := b.changed(cur)
	for key := range changed {
		if _, ok := cur[key]; !ok {
			delete(changed, key)
		}
	}
	notes := make(map[uint64]string)
	defer func() { s.noteFailures(notes, false) }()
	for _, r := range b.rejected {
		if _, ok := cur[idKey(r.ID)]; ok {
			notes[r.ID] = r.Reason
		}
	}
	if len(changed) == 0 {
		res.Unchanged = true
		return res, nil
	}
	parts, err := b.parts(changed)
	if err == nil {
		f, lost, kerr := s.keep(parts, slices.Collect(maps.Keys(cur)))
		if f != nil {
			defer f.Close()
		}
		if err = kerr; err == nil && len(lost) > 0 {
			err = fmt.Errorf("ip groups: %s lacks groups %s", s.path(), strings.Join(lost, ", "))
		}
	}
	if err == nil {
		err = s.land(parts)
	}
	next := maps.Clone(cur)
	for key, v := range changed {
		if err != nil {
			notes[v.id] = err.Error()
			continue
		}
		next[key] = v.checksum
		notes[v.id] = ""
		res.Landed = append(res.Landed, v.id)
	}
	if err != nil {
		return res, err
	}
	s.setSums(next)
	sortedIDs(res.Landed)
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

	referenced := make(map[string]bool, len(ids))
	for _, id := range ids {
		referenced[idKey(id)] = true
	}
	b := s.newBatch(func(key string) bool { return referenced[key] })
	defer b.Close()
	if len(ids) > 0 {
		if err := fetch(ctx, s.syncRequest(ids), b.Decode); err != nil {
			err = fmt.Errorf("ip groups: sync %d groups: %w", len(ids), err)
			notes := make(map[uint64]string, len(ids))
			for _, id := range ids {
				notes[id] = err.Error()
			}
			s.noteFailures(notes, true)
			return Result{}, err
		}
	}
	res = Result{Rejected: b.rejected}

	s.mu.Lock()
	defer s.mu.Unlock()
	// The snapshot as it is now, including anything pushed during the call.
	cur := s.currentSums()
	fresh := b.changed(cur)

	var kept, missing []uint64
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
	sortedIDs(res.Dropped)
	// What the snapshot lacks once this returns: it replaces every earlier
	// failure, the unreferenced groups' included.
	notes := make(map[uint64]string)
	defer func() {
		for _, r := range res.Rejected {
			if referenced[idKey(r.ID)] && notes[r.ID] == "" {
				notes[r.ID] = r.Reason
			}
		}
		for _, id := range missing {
			if notes[id] == "" {
				notes[id] = "referenced group missing after sync"
			}
		}
		s.noteFailures(notes, true)
	}()

	// A missing file is rewritten even when nothing changed, so the Lua
	// side gets a definite snapshot (at least {"groups":{}}).
	if _, statErr := os.Stat(s.path()); statErr == nil && len(fresh) == 0 && len(res.Dropped) == 0 {
		res.Unchanged = true
		return res, missingError(missing)
	}

	parts, err := b.parts(fresh)
	var readErr error
	if err == nil && len(kept) > 0 {
		keys := make([]string, len(kept))
		for i, id := range kept {
			keys[i] = idKey(id)
		}
		// Unreadable local copies count as missing: landing the fresh
		// groups is still better than keeping the whole old snapshot.
		f, lost, kerr := s.keep(parts, keys)
		if f != nil {
			defer f.Close()
		}
		for _, key := range lost {
			id, _ := parseKey(key)
			missing = append(missing, id)
		}
		readErr = kerr
	}
	if err == nil {
		err = s.land(parts)
	}
	if err != nil {
		for _, v := range fresh {
			notes[v.id] = err.Error()
		}
		return Result{Rejected: res.Rejected}, err
	}
	sums := make(map[string]string, len(parts))
	for key := range parts {
		sums[key] = cur[key]
	}
	for key, v := range fresh {
		sums[key] = v.checksum
		res.Landed = append(res.Landed, v.id)
	}
	s.setSums(sums)
	sortedIDs(res.Landed)
	sortedIDs(missing)
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

// changed returns the verified groups whose content differs from the local
// copy in sums. Same checksum means same membership: a rename alone is not
// worth rewriting a file of up to 20 MiB (the Lua side ignores names).
func (b *Batch) changed(sums map[string]string) map[string]verifiedGroup {
	out := make(map[string]verifiedGroup, len(b.verified))
	for key, v := range b.verified {
		if local, ok := sums[key]; !ok || local != v.checksum {
			out[key] = v
		}
	}
	return out
}

// part is where the object of a group to land is read from: the current
// snapshot file or a batch's scratch file. A batch's group is compiled
// already: its ranges are in bin, where rec says.
type part struct {
	r   io.ReaderAt
	at  section
	bin io.ReaderAt
	rec rangedGroup
}

// parts returns where the groups of vs are in the batch's file.
func (b *Batch) parts(vs map[string]verifiedGroup) (map[string]part, error) {
	out := make(map[string]part, len(vs))
	if len(vs) == 0 {
		return out, nil
	}
	f, err := b.out.file()
	if err != nil {
		return nil, err
	}
	bin, err := b.bin.file()
	if err != nil {
		return nil, err
	}
	for key, v := range vs {
		out[key] = part{f, v.raw, bin, rangedGroup{v.id, v.rec}}
	}
	return out, nil
}

// keep adds to parts, from the current file, the groups of keys that
// parts lacks. It returns the file, for the caller to close after landing,
// and the keys the file does not hold: all of them, with the error, when
// it cannot be read.
func (s *Store) keep(parts map[string]part, keys []string) (*os.File, []string, error) {
	var want []string
	for _, key := range keys {
		if _, ok := parts[key]; !ok {
			want = append(want, key)
		}
	}
	if len(want) == 0 {
		return nil, nil, nil
	}
	// The file is walked again only when where its groups are is not
	// known; a kept group is walked when it is compiled, so a file changed
	// behind the store's back does not land.
	var f *os.File
	var err error
	heads := s.heads
	if heads == nil {
		f, heads, err = readSnapshot(s.path(), nil)
	} else {
		f, err = os.Open(s.path())
	}
	if err != nil {
		return nil, want, fmt.Errorf("ip groups: read snapshot: %w", err)
	}
	var lost []string
	for _, key := range want {
		if g, ok := heads[key]; ok {
			parts[key] = part{r: f, at: g.at}
		} else {
			lost = append(lost, key)
		}
	}
	return f, lost, nil
}

// land writes a complete snapshot of parts with its compiled form and
// checksum file, leaving the old files untouched when it is over the size
// limit, does not compile, or a write fails. The JSON is streamed to its
// temp file from the parts, compiled from there, and only then are the
// files put in place: the JSON, then the compiled file, then the checksum
// file, each atomically. The Lua side looks at the compiled file only
// after the checksum file changes, and takes it only when its label is
// that checksum, so it never uses a file that is not complete on disk. A
// crash before the checksum file leaves the old checksum, which the old
// compiled file no longer matches: the workers keep their groups until
// Open repairs both.
func (s *Store) land(parts map[string]part) error {
	const head, tail = `{"groups":{`, `}}`
	keys := sortedKeys(parts)
	size := int64(len(head) + len(tail))
	for _, key := range keys {
		size += int64(len(key)+len(`"":`)) + parts[key].at.n
	}
	if len(keys) > 1 {
		size += int64(len(keys) - 1) // commas
	}
	if size > MaxSnapshotBytes {
		return fmt.Errorf("ip groups: snapshot would be %d bytes, over the %d-byte (20 MiB) limit; kept the previous snapshot", size, MaxSnapshotBytes)
	}
	js, err := atomicfile.Create(s.path(), fileMode)
	if err != nil {
		return fmt.Errorf("ip groups: %w", err)
	}
	defer js.Abort()
	hash := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(js.Temp(), hash), readBuffer)
	w.WriteString(head)
	heads, off := make(map[string]storedGroup, len(keys)), int64(len(head))
	for i, key := range keys {
		if i > 0 {
			w.WriteByte(',')
			off++
		}
		// Keys are canonical decimal ids: nothing to escape.
		w.WriteString(`"` + key + `":`)
		p := parts[key]
		off += int64(len(key) + len(`"":`))
		heads[key] = storedGroup{at: section{off, p.at.n}}
		off += p.at.n
		if n, err := io.Copy(w, io.NewSectionReader(p.r, p.at.off, p.at.n)); err != nil || n != p.at.n {
			return fmt.Errorf("ip groups: write snapshot: group %s: %d of %d bytes: %w", key, n, p.at.n, err)
		}
	}
	w.WriteString(tail)
	if err := w.Flush(); err != nil {
		return fmt.Errorf("ip groups: write snapshot: %w", err)
	}
	label := hex.EncodeToString(hash.Sum(nil))
	bin, err := s.compiled(keys, parts, label)
	if err != nil {
		return err
	}
	defer bin.Abort()
	// A commit that fails may have renamed the file already.
	s.heads = nil
	if err := js.Commit(); err != nil {
		return fmt.Errorf("ip groups: %w", err)
	}
	s.heads = heads
	if err := bin.Commit(); err != nil {
		return fmt.Errorf("ip groups: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, ChecksumName), []byte(label+"\n"), fileMode); err != nil {
		return fmt.Errorf("ip groups: %w", err)
	}
	return nil
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

// sortedKeys returns the keys of parts sorted as strings, as encoding/json
// orders a map. Not maps.Keys: its instance for part would be named after
// every field of it, in the binary's read-only data.
func sortedKeys(parts map[string]part) []string {
	keys := make([]string, 0, len(parts))
	for key := range parts {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}

func idKey(id uint64) string { return strconv.FormatUint(id, 10) }

// ReadChecksums reads the snapshot in dir without changing anything (for
// `openflare-agent status`): id → checksum, empty when there is none.
func ReadChecksums(dir string) (map[string]string, error) {
	f, heads, err := readSnapshot(filepath.Join(dir, SnapshotName), nil)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ip groups: %w", err)
	}
	f.Close()
	return sumsOf(heads), nil
}

// sortedIDs sorts group ids in place and returns them. sort.Slice, not
// slices.Sort: the lists are a handful of ids, and slices.Sort would put
// a sort of its own for uint64 into the binary, which is at its flash
// budget.
func sortedIDs(ids []uint64) []uint64 {
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
