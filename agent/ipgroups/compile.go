package ipgroups

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/openflare/openflare-agent/internal/rangefile"
)

// The compiled snapshot, waf_ip_groups.bin, is what the nginx workers
// match against: decoding the JSON in every worker cost about 100 bytes of
// Lua heap per entry, so a 1 000 000-entry group got the workers of a
// small router OOM-killed. The file holds each group as sorted, merged
// address ranges that the Lua side binary-searches in place (mapped or as
// one string), with no per-entry Lua objects.
//
// The layout is internal/rangefile's, each group a set whose id is the
// group id. IPv4 and IPv4-mapped IPv6 addresses stay separate families, as
// in waf/ipmatch.lua.
const (
	CompiledName = "waf_ip_groups.bin"

	compiledMagic = "OFIPGBIN"
)

// MaxCompiledBytes bounds the compiled file. Every snapshot within
// MaxSnapshotBytes fits: the shortest IPv6 entry that yields a range of its
// own takes 5 bytes of JSON ("::1",) and 32 in the file. The Lua side
// refuses larger files with the same bound.
const MaxCompiledBytes = 7 * MaxSnapshotBytes

// labelOf is the checksum label of a snapshot: the .checksum file's content
// without the newline.
func labelOf(snapshot []byte) string {
	sum := sha256.Sum256(snapshot)
	return hex.EncodeToString(sum[:])
}

// Compile builds the compiled file for a snapshot (the exact bytes of
// waf_ip_groups.json).
func Compile(snapshot []byte) ([]byte, error) {
	groups, err := parseRaw(snapshot)
	if err != nil {
		return nil, fmt.Errorf("ip groups: compile: decode snapshot: %w", err)
	}
	return compileGroups(groups, labelOf(snapshot))
}

// compileGroups builds the compiled file from the snapshot's raw groups.
// Memory is the output plus one group's ranges at a time: the entries are
// read in place from the raw JSON, never collected as strings.
func compileGroups(groups map[string]json.RawMessage, label string) ([]byte, error) {
	keys := make([]uint64, 0, len(groups))
	for key := range maps.Keys(groups) {
		id, err := parseKey(key)
		if err != nil {
			return nil, fmt.Errorf("ip groups: compile: %w", err)
		}
		keys = append(keys, id)
	}
	slices.Sort(keys)

	// Every comma may separate entries; IPv4 ranges take 8 bytes. Sizing
	// the buffer for that once spares the copies of growing it by appends
	// (for IPv6 it still grows).
	hint := rangefile.HeaderSize + rangefile.RecordSize*len(keys)
	for _, raw := range groups {
		hint += rangefile.V4RangeSize * (bytes.Count(raw, []byte{','}) + 1)
	}
	buf, err := rangefile.New(compiledMagic, label, len(keys), 0, min(hint, MaxCompiledBytes))
	if err != nil {
		return nil, fmt.Errorf("ip groups: compile: %w", err)
	}

	var c compiler
	for i, id := range keys {
		key := idKey(id)
		enabled, err := c.group(groups[key])
		if err != nil {
			return nil, fmt.Errorf("ip groups: compile group %s: %w", key, err)
		}
		rec := rangefile.Record{ID: rangefile.NumericID(id), Enabled: enabled}
		if enabled {
			// The offsets are checked below: the whole file stays under 4 GiB.
			rec.N4, rec.Off4 = len(c.v4), len(buf)
			for _, r := range c.v4 {
				buf = rangefile.AppendV4(buf, uint32(r>>32), uint32(r))
			}
			rec.N6, rec.Off6 = len(c.v6), len(buf)
			for _, r := range c.v6 {
				buf = rangefile.AppendV6(buf, r.lo.hi, r.lo.lo, r.hi.hi, r.hi.lo)
			}
			if len(buf) > MaxCompiledBytes {
				return nil, fmt.Errorf("ip groups: compiled snapshot exceeds %d bytes", MaxCompiledBytes)
			}
		}
		rec.Put(buf, i)
	}
	return buf, nil
}

type range6 struct{ lo, hi u128 }

// compiler holds one group's ranges; the slices are reused from group to
// group.
type compiler struct {
	// v4 packs each range as lo<<32 | hi, so sorting the integers sorts
	// the ranges: 8 bytes per entry.
	v4 []uint64
	v6 []range6
}

// group compiles one stored group object into c.v4 and c.v6 and reports
// whether it is enabled. Like the Lua runtime used to, it counts any
// "enabled" other than false or null as enabled (the agent only ever
// writes booleans), takes a non-array ip_list as empty, and ignores
// entries that are not strings. Of repeated keys the last wins, as in a
// decoded object.
func (c *compiler) group(raw json.RawMessage) (enabled bool, err error) {
	c.v4, c.v6 = c.v4[:0], c.v6[:0]
	// As for the buffer: one allocation for the common IPv4 list.
	c.v4 = slices.Grow(c.v4, bytes.Count(raw, []byte{','})+1)
	s := &scanner{b: raw}
	err = s.members(func(key []byte) error {
		switch string(key) {
		case "enabled":
			v := s.peek()
			enabled = v != 'f' && v != 'n'
			return s.skip()
		case "ip_list":
			c.v4, c.v6 = c.v4[:0], c.v6[:0]
			if s.peek() != '[' {
				return s.skip()
			}
			return s.elements(c.element(s))
		}
		return s.skip()
	})
	if err != nil {
		return false, err
	}
	if s.peek() != 0 {
		return false, fmt.Errorf("%w: data after the group object", errSyntax)
	}
	if !enabled {
		c.v4, c.v6 = c.v4[:0], c.v6[:0]
		return false, nil
	}
	c.merge()
	return true, nil
}

// element returns the per-element step of an ip_list walk.
func (c *compiler) element(s *scanner) func() error {
	return func() error {
		if s.peek() != '"' {
			return s.skip()
		}
		text, err := s.str()
		if err != nil {
			return err
		}
		e, ok := parseEntry(text)
		switch {
		case !ok:
		case e.v6:
			lo, hi := v6Range(e.a6, e.plen)
			c.v6 = append(c.v6, range6{lo, hi})
		default:
			lo, hi := v4Range(e.v4, e.plen)
			c.v4 = append(c.v4, uint64(lo)<<32|uint64(hi))
		}
		return nil
	}
}

// merge sorts the ranges and joins overlapping and adjacent ones in place.
func (c *compiler) merge() {
	slices.Sort(c.v4)
	out := c.v4[:0]
	for _, r := range c.v4 {
		if n := len(out); n > 0 {
			last := &out[n-1]
			lastHi := *last & 0xffffffff
			if r>>32 <= lastHi+1 {
				if hi := r & 0xffffffff; hi > lastHi {
					*last = *last&^0xffffffff | hi
				}
				continue
			}
		}
		out = append(out, r)
	}
	c.v4 = out

	slices.SortFunc(c.v6, func(a, b range6) int {
		// The merge below joins ranges with equal lo in any order.
		if c := cmp.Compare(a.lo.hi, b.lo.hi); c != 0 {
			return c
		}
		return cmp.Compare(a.lo.lo, b.lo.lo)
	})
	out6 := c.v6[:0]
	for _, r := range c.v6 {
		if n := len(out6); n > 0 {
			last := &out6[n-1]
			after, ok := last.hi.next()
			if !ok || !after.less(r.lo) {
				if last.hi.less(r.hi) {
					last.hi = r.hi
				}
				continue
			}
		}
		out6 = append(out6, r)
	}
	c.v6 = out6
}

// errStaleCompiled marks a compiled file that does not belong to the JSON.
var errStaleCompiled = errors.New("compiled snapshot does not match")

// readCompiledLabel reads the label of the compiled file in dir, checking
// that its header is one this agent writes.
func readCompiledLabel(dir string) (string, error) {
	x, err := rangefile.ReadIndex(filepath.Join(dir, CompiledName), compiledMagic, false)
	if errors.Is(err, rangefile.ErrHeader) {
		return "", fmt.Errorf("%w: %w", errStaleCompiled, err)
	}
	return x.Label, err
}
