package ipgroups

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sort"
)

// A group may hold a million entries and the snapshot 20 MiB of them, more
// than a node with memory_limit 32 MiB can hold while it sorts them (the
// checksum wants them byte-wise, the compiled file numerically). They are
// sorted on disk instead: chunks of chunkBytes are sorted in memory and
// written out as runs, and the runs are merged as they are read back.

// chunkBytes is what a sorter holds in memory, records and their offsets.
// It bounds the memory of a sort, not its size: a 20 MiB list makes some
// 30 runs.
const chunkBytes = 1 << 20

// runBuffer is the read buffer of each run while runs are merged.
const runBuffer = 16 << 10

// scratch is an unlinked temporary file beside the snapshot: it is gone
// with its descriptor, so a crash leaves nothing behind, and its name
// starts like the snapshot's temp files, which Open removes, for the
// instant between creating and unlinking it.
type scratch struct {
	f   *os.File
	w   *bufio.Writer
	off int64 // bytes written, buffered ones included
}

// section is a byte range of a file.
type section struct{ off, n int64 }

func newScratch(dir string) (*scratch, error) {
	f, err := os.CreateTemp(dir, "."+SnapshotName+".tmp-scratch-*")
	if err != nil {
		return nil, fmt.Errorf("ip groups: create scratch file: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("ip groups: unlink scratch file: %w", err)
	}
	return &scratch{f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

func (s *scratch) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.off += int64(n)
	if err != nil {
		return n, fmt.Errorf("ip groups: write scratch file: %w", err)
	}
	return n, nil
}

// file returns the file to read back from, once what is buffered is on
// disk.
func (s *scratch) file() (io.ReaderAt, error) {
	if err := s.w.Flush(); err != nil {
		return nil, fmt.Errorf("ip groups: write scratch file: %w", err)
	}
	return s.f, nil
}

// reset writes from the start again, over what the file holds.
func (s *scratch) reset() error {
	s.w.Reset(s.f)
	s.off = 0
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("ip groups: rewind scratch file: %w", err)
	}
	return nil
}

func (s *scratch) close() {
	if s != nil {
		s.f.Close()
	}
}

// sorter sorts byte strings of at most maxEntry bytes, keeping duplicates.
// Input that fits one chunk never touches the disk; input already in order
// is read back run after run without a merge.
type sorter struct {
	dir   string
	runs  *scratch // created at the first run
	buf   []byte   // the chunk: each record as a 2-byte length and its bytes
	at    []int32  // where each record of the chunk starts in buf
	keys  []uint64 // each record's first 8 bytes, zero-padded, big-endian
	spans []section
	prev  []byte // the last record added
	n     int
	// ordered: every record so far sorts at or after the one before it.
	ordered bool
}

func (s *sorter) reset() error {
	s.buf, s.at, s.keys, s.spans, s.n, s.ordered = s.buf[:0], s.at[:0], s.keys[:0], s.spans[:0], 0, true
	if s.runs != nil && s.runs.off > 0 {
		return s.runs.reset()
	}
	return nil
}

func (s *sorter) close() { s.runs.close() }

func (s *sorter) add(rec []byte) error {
	if s.n > 0 && s.ordered && bytes.Compare(rec, s.prev) < 0 {
		s.ordered = false
	}
	s.prev = append(s.prev[:0], rec...)
	s.n++
	// The offsets and keys count too: a chunk of empty strings is mostly
	// them.
	if len(s.buf)+12*len(s.at)+2+len(rec) > chunkBytes && len(s.at) > 0 {
		if err := s.spill(); err != nil {
			return err
		}
	}
	if s.buf == nil {
		s.buf = make([]byte, 0, chunkBytes)
	}
	s.at = append(s.at, int32(len(s.buf)))
	var key [8]byte
	copy(key[:], rec)
	s.keys = append(s.keys, binary.BigEndian.Uint64(key[:]))
	s.buf = binary.BigEndian.AppendUint16(s.buf, uint16(len(rec)))
	s.buf = append(s.buf, rec...)
	return nil
}

// record returns the chunk's record starting at i.
func (s *sorter) record(i int32) []byte {
	n := int(binary.BigEndian.Uint16(s.buf[i:]))
	return s.buf[i+2 : int(i)+2+n]
}

// sortChunk orders the chunk in memory (a chunk already in order costs one
// pass: the sort detects it). sort.Sort's code is in the binary anyway; a
// generic sort would add a copy for this element type.
func (s *sorter) sortChunk() { sort.Sort(chunk{s}) }

// chunk orders a sorter's chunk by record. Records whose first 8 bytes
// differ, nearly all of them, are ordered by their keys without reading
// the records: zero padding orders a record before a longer one it
// begins, unless the longer one goes on with zero bytes, and then the
// keys are equal and the records are compared.
type chunk struct{ s *sorter }

func (c chunk) Len() int { return len(c.s.at) }
func (c chunk) Less(i, j int) bool {
	if ki, kj := c.s.keys[i], c.s.keys[j]; ki != kj {
		return ki < kj
	}
	return bytes.Compare(c.s.record(c.s.at[i]), c.s.record(c.s.at[j])) < 0
}
func (c chunk) Swap(i, j int) {
	c.s.at[i], c.s.at[j] = c.s.at[j], c.s.at[i]
	c.s.keys[i], c.s.keys[j] = c.s.keys[j], c.s.keys[i]
}

// spill writes the chunk, sorted, as a run.
func (s *sorter) spill() error {
	if s.runs == nil {
		sc, err := newScratch(s.dir)
		if err != nil {
			return err
		}
		s.runs = sc
	}
	s.sortChunk()
	start := s.runs.off
	for _, i := range s.at {
		if _, err := s.runs.Write(s.buf[i : int(i)+2+len(s.record(i))]); err != nil {
			return err
		}
	}
	s.spans = append(s.spans, section{start, s.runs.off - start})
	s.buf, s.at, s.keys = s.buf[:0], s.at[:0], s.keys[:0]
	return nil
}

// each calls f with every record in order; a record is valid only during
// its call.
func (s *sorter) each(f func(rec []byte) error) error {
	if len(s.spans) == 0 {
		s.sortChunk()
		for _, i := range s.at {
			if err := f(s.record(i)); err != nil {
				return err
			}
		}
		return nil
	}
	if len(s.at) > 0 {
		if err := s.spill(); err != nil {
			return err
		}
	}
	file, err := s.runs.file()
	if err != nil {
		return err
	}
	runs := make([]*run, 0, len(s.spans))
	for _, sp := range s.spans {
		rn := &run{r: bufio.NewReaderSize(io.NewSectionReader(file, sp.off, sp.n), runBuffer)}
		if err := rn.next(); err != nil {
			return err
		}
		if rn.rec != nil {
			runs = append(runs, rn)
		}
	}
	if s.ordered {
		// The runs follow each other: read them in turn.
		for _, rn := range runs {
			for rn.rec != nil {
				if err := f(rn.rec); err != nil {
					return err
				}
				if err := rn.next(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return merge(runs, f)
}

// run is one sorted run being read back.
type run struct {
	r   *bufio.Reader
	rec []byte // the current record, nil at the end
	buf [2 + maxEntry]byte
}

func (r *run) next() error {
	_, err := io.ReadFull(r.r, r.buf[:2])
	if err == io.EOF {
		r.rec = nil
		return nil
	}
	if n := int(binary.BigEndian.Uint16(r.buf[:])); err == nil && n <= maxEntry {
		r.rec = r.buf[2 : 2+n]
		_, err = io.ReadFull(r.r, r.rec)
	} else if err == nil {
		err = fmt.Errorf("a record of %d bytes", n)
	}
	if err != nil {
		return fmt.Errorf("ip groups: read sort run: %w", err)
	}
	return nil
}

// merge calls f with the records of runs in order, smallest first, through
// a binary min-heap of the runs by current record.
func merge(runs []*run, f func([]byte) error) error {
	less := func(i, j int) bool { return bytes.Compare(runs[i].rec, runs[j].rec) < 0 }
	down := func(i int) {
		for {
			c := 2*i + 1
			if c >= len(runs) {
				return
			}
			if c+1 < len(runs) && less(c+1, c) {
				c++
			}
			if !less(c, i) {
				return
			}
			runs[i], runs[c] = runs[c], runs[i]
			i = c
		}
	}
	for i := len(runs)/2 - 1; i >= 0; i-- {
		down(i)
	}
	for len(runs) > 0 {
		if err := f(runs[0].rec); err != nil {
			return err
		}
		if err := runs[0].next(); err != nil {
			return err
		}
		if runs[0].rec == nil {
			runs[0] = runs[len(runs)-1]
			runs = runs[:len(runs)-1]
		}
		down(0)
	}
	return nil
}
