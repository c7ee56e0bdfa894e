package linux

import (
	"bytes"
	"errors"
	"fmt"
)

// MemInfo holds the /proc/meminfo lines needed for used/total memory, in
// bytes. A line that is missing or not a valid "<n> kB" leaves its field 0.
type MemInfo struct {
	Total, Free, Available, Buffers, Cached, SReclaimable uint64

	// HasAvailable is false on kernels older than 3.14, which do not print
	// MemAvailable; Used then estimates it. A flag rather than a zero test
	// because MemAvailable can truly be 0 under memory pressure.
	HasAvailable bool
}

var errNoMemTotal = errors.New("no valid MemTotal line")

// Used is MemTotal minus MemAvailable. Without MemAvailable it falls back to
// Free + Buffers + Cached + SReclaimable (capped at Total), the kernel's own
// pre-3.14 approximation of reclaimable memory.
func (m MemInfo) Used() uint64 {
	avail := m.Available
	if !m.HasAvailable {
		avail = addSat(m.Free, m.Buffers)
		avail = addSat(avail, m.Cached)
		avail = addSat(avail, m.SReclaimable)
	}
	return subFloor(m.Total, avail)
}

// parseMeminfo reads the fields of MemInfo. It returns what it found even
// when it also reports that MemTotal is missing.
func parseMeminfo(b []byte) (MemInfo, error) {
	var m MemInfo
	var hasTotal bool
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			continue
		}
		val := line[colon+1:]
		switch string(line[:colon]) {
		case "MemTotal":
			m.Total, hasTotal = meminfoValue(val)
		case "MemFree":
			m.Free, _ = meminfoValue(val)
		case "MemAvailable":
			m.Available, m.HasAvailable = meminfoValue(val)
		case "Buffers":
			m.Buffers, _ = meminfoValue(val)
		case "Cached":
			m.Cached, _ = meminfoValue(val)
		case "SReclaimable":
			m.SReclaimable, _ = meminfoValue(val)
		}
	}
	if !hasTotal {
		return m, errNoMemTotal
	}
	return m, nil
}

// meminfoValue converts "   1234 kB" to bytes. The kernel prints every
// memory line in kB; a bare number is taken as bytes, any other unit or an
// overflowing product is rejected.
func meminfoValue(b []byte) (uint64, bool) {
	num, rest := nextField(b)
	v, ok := parseUint(num)
	if !ok {
		return 0, false
	}
	unit, rest := nextField(rest)
	if len(trimSpace(rest)) != 0 {
		return 0, false
	}
	switch string(unit) {
	case "kB":
		return mulOK(v, 1024)
	case "":
		return v, true
	}
	return 0, false
}

// MemInfo reads <proc>/meminfo.
func (r *Reader) MemInfo() (MemInfo, error) {
	b, err := r.read(r.meminfoPath)
	if err != nil {
		return MemInfo{}, err
	}
	m, err := parseMeminfo(b)
	if err != nil {
		return m, fmt.Errorf("%s: %w", r.meminfoPath, err)
	}
	return m, nil
}
