package ipgroups

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"openflare/internal/rangefile"
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

// Compile builds the compiled file for a snapshot held in memory (the
// exact bytes of waf_ip_groups.json), as the store writes it beside the
// JSON: for tools and tests that make snapshots by hand. As the Lua
// runtime did, it takes a group's id from its key.
func Compile(snapshot []byte) ([]byte, error) {
	r := bytes.NewReader(snapshot)
	var keys []string
	parts := make(map[string]part)
	err := walk(r, nil, func(key string, _ uint64, g *storedGroup) error {
		keys = append(keys, key)
		parts[key] = part{r: r, at: g.at}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ip groups: compile: decode snapshot: %w", err)
	}
	f, err := os.CreateTemp("", "openflare-compile-*")
	if err != nil {
		return nil, fmt.Errorf("ip groups: compile: %w", err)
	}
	os.Remove(f.Name())
	defer f.Close()
	if err := compile(keys, parts, labelOf(snapshot), f, os.TempDir()); err != nil {
		return nil, err
	}
	return io.ReadAll(io.NewSectionReader(f, 0, MaxCompiledBytes))
}

// compile writes the compiled file of the snapshot of parts, in the order
// of keys, to f, sorting in dir. A batch's group was compiled as it was
// verified and is copied; a group from a JSON file is walked as a snapshot
// of its own. Memory is a sort chunk and the buffers: the entries are read
// as a stream and each group's ranges sorted on disk. The header and
// records lead the file but are known only at the end, so the ranges are
// written behind room kept for them, and they last.
func compile(keys []string, parts map[string]part, label string, f *os.File, dir string) error {
	head, err := rangefile.New(compiledMagic, label, len(keys), 0, 0)
	if err != nil {
		return fmt.Errorf("ip groups: compile: %w", err)
	}
	w := bufio.NewWriterSize(f, 64<<10)
	c := &compiler{w: w, off: len(head), sort: sorter{dir: dir}, recs: make([]rangedGroup, 0, len(keys))}
	defer c.sort.close()
	if _, err := w.Write(head); err != nil {
		return fmt.Errorf("ip groups: compile: %w", err)
	}
	r := bufio.NewReaderSize(nil, readBuffer)
	walked := func(_ string, id uint64, g *storedGroup) error {
		rec, err := c.group(id, g.enabled)
		c.recs = append(c.recs, rangedGroup{id, rec})
		return err
	}
	for _, key := range keys {
		p := parts[key]
		if p.bin != nil {
			err = c.copy(p.rec, p.bin)
		} else {
			r.Reset(io.MultiReader(strings.NewReader(`{"groups":{"`+key+`":`), io.NewSectionReader(p.r, p.at.off, p.at.n), strings.NewReader(`}}`)))
			err = walk(r, c.entry, walked)
		}
		if err != nil {
			return fmt.Errorf("ip groups: compile: group %s: %w", key, err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("ip groups: compile: %w", err)
	}
	recs := c.recs
	sort.Slice(recs, func(i, j int) bool { return recs[i].id < recs[j].id })
	for i, r := range recs {
		r.rec.Put(head, i)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("ip groups: compile: %w", err)
	}
	if _, err := f.Write(head); err != nil {
		return fmt.Errorf("ip groups: compile: %w", err)
	}
	return nil
}

// rangedGroup is a group's record in the compiled file.
type rangedGroup struct {
	id  uint64
	rec rangefile.Record
}

// copy adds a group compiled beforehand (Batch.verify), its ranges in r
// where its record says.
func (c *compiler) copy(g rangedGroup, r io.ReaderAt) error {
	if g.rec.Enabled {
		n := g.rec.Off6 + rangefile.V6RangeSize*g.rec.N6 - g.rec.Off4
		if _, err := io.Copy(c.w, io.NewSectionReader(r, int64(g.rec.Off4), int64(n))); err != nil {
			return err
		}
		g.rec.Off4, g.rec.Off6 = c.off, c.off+g.rec.Off6-g.rec.Off4
		if c.off += n; c.off > MaxCompiledBytes {
			return fmt.Errorf("compiled snapshot exceeds %d bytes", MaxCompiledBytes)
		}
	}
	c.recs = append(c.recs, g)
	return nil
}

// compiler turns one group at a time into ranges. Each entry's range is
// sorted as a record that orders as the range does: a family byte (all of
// IPv4 before IPv6) and lo, hi big-endian.
type compiler struct {
	w    io.Writer
	off  int // bytes of the file so far
	sort sorter
	recs []rangedGroup
	rec  [1 + 32]byte
	buf  []byte // ranges not yet written
}

var be = binary.BigEndian

// entry adds one entry's range to the group's; nil starts the list again.
func (c *compiler) entry(text []byte) error {
	if text == nil {
		return c.sort.reset()
	}
	e, ok := parseEntry(text)
	if !ok {
		return nil
	}
	rec := c.rec[:]
	if e.v6 {
		lo, hi := v6Range(e.a6, e.plen)
		rec[0] = 6
		be.PutUint64(rec[1:], lo.Hi)
		be.PutUint64(rec[9:], lo.Lo)
		be.PutUint64(rec[17:], hi.Hi)
		be.PutUint64(rec[25:], hi.Lo)
	} else {
		lo, hi := v4Range(e.v4, e.plen)
		rec = rec[:9]
		rec[0] = 4
		be.PutUint32(rec[1:], lo)
		be.PutUint32(rec[5:], hi)
	}
	return c.sort.add(rec)
}

// group writes the ranges of a group whose object just ended, joining
// those that overlap or touch, and returns its record.
func (c *compiler) group(id uint64, enabled bool) (rangefile.Record, error) {
	rec := rangefile.Record{ID: rangefile.NumericID(id), Enabled: enabled}
	if enabled {
		rec.Off4 = c.off
		var v4 [2]uint64 // lo, hi of the range being joined
		var v6 rangefile.Range
		has4, has6 := false, false
		err := c.sort.each(func(r []byte) error {
			if r[0] == 4 {
				lo, hi := uint64(be.Uint32(r[1:])), uint64(be.Uint32(r[5:]))
				if has4 && lo <= v4[1]+1 {
					v4[1] = max(v4[1], hi)
					return nil
				}
				if has4 {
					c.buf = rangefile.AppendV4(c.buf, uint32(v4[0]), uint32(v4[1]))
					rec.N4++
				}
				v4, has4 = [2]uint64{lo, hi}, true
				return c.spill()
			}
			if has4 {
				c.buf = rangefile.AppendV4(c.buf, uint32(v4[0]), uint32(v4[1]))
				rec.N4++
				has4 = false
			}
			next := rangefile.Range{
				Lo: rangefile.U128{Hi: be.Uint64(r[1:]), Lo: be.Uint64(r[9:])},
				Hi: rangefile.U128{Hi: be.Uint64(r[17:]), Lo: be.Uint64(r[25:])},
			}
			if has6 && v6.Join(next) {
				return nil
			}
			if has6 {
				c.buf = rangefile.AppendV6(c.buf, v6)
				rec.N6++
			}
			v6, has6 = next, true
			return c.spill()
		})
		if err != nil {
			return rec, err
		}
		if has4 {
			c.buf = rangefile.AppendV4(c.buf, uint32(v4[0]), uint32(v4[1]))
			rec.N4++
		}
		if has6 {
			c.buf = rangefile.AppendV6(c.buf, v6)
			rec.N6++
		}
		rec.Off6 = rec.Off4 + rangefile.V4RangeSize*rec.N4
		c.off = rec.Off6 + rangefile.V6RangeSize*rec.N6
		if c.off > MaxCompiledBytes {
			return rec, fmt.Errorf("compiled snapshot exceeds %d bytes", MaxCompiledBytes)
		}
	}
	if _, err := c.w.Write(c.buf); err != nil {
		return rec, err
	}
	c.buf = c.buf[:0]
	return rec, c.sort.reset()
}

// spill writes out ranges once enough have gathered.
func (c *compiler) spill() error {
	if len(c.buf) < 32<<10 {
		return nil
	}
	_, err := c.w.Write(c.buf)
	c.buf = c.buf[:0]
	return err
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
