package mmdb

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// MaxFileSize is the largest file Open maps. GeoLite2 City is about 70 MiB;
// the cap keeps a wrong download from using up the address space of a
// 32-bit router.
const MaxFileSize = 256 << 20

// ErrInvalidDatabase is wrapped by every error caused by the contents of the
// file (as opposed to I/O errors or invalid arguments).
var ErrInvalidDatabase = errors.New("mmdb: invalid database")

// ErrClosed is returned by lookups on a Reader after Close.
var ErrClosed = errors.New("mmdb: reader is closed")

// corrupt returns an error wrapping ErrInvalidDatabase.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidDatabase, fmt.Sprintf(format, args...))
}

// invalid wraps err, a decoding error found while doing what, in
// ErrInvalidDatabase.
func invalid(what string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrInvalidDatabase, what, err)
}

// Reader looks up addresses in one database. It never modifies its buffer, so
// it is safe for concurrent use.
type Reader struct {
	meta       Metadata
	tree       []byte  // the search tree, nodeCount nodes
	separator  []byte  // the 16 bytes between the tree and the data section
	data       section // the data section, after the 16-byte separator
	nodeCount  uint32
	recordSize int
	// ipv4Start is the record value reached after following 96 zero bits
	// from the root of an IPv6 tree: IPv4 lookups start there (the spec's
	// "IPv4 start node"). It is 0, the root, in an IPv4 tree.
	ipv4Start uint32
	// ipv4Depth is how many bits the walk to ipv4Start consumed: 96, or
	// fewer when it ended early at a data or "no data" record.
	ipv4Depth int

	// codes and subdivisions remember the country and subdivision codes
	// of recently used records.
	codes, subdivisions codeCache
	// v4Nodes and v6Nodes remember where the first bits of recently seen
	// addresses lead in the tree.
	v4Nodes, v6Nodes nodeCache

	// mapping is the memory mapping Open made, unmapped by Close; nil for
	// a Reader from FromBytes.
	mapping []byte
	closed  atomic.Bool
	closeMu sync.Mutex
}

// Open maps the database at path read-only and validates its metadata; call
// Verify as well before trusting a newly downloaded file. The file's pages
// are shared with the page cache rather than copied to the heap, so the
// agent's heap does not grow with the database. Close unmaps it.
//
// The file must not be truncated or rewritten in place while it is mapped (a
// read of a page cut off from the file kills the process with SIGBUS):
// replace a database by writing a new file and renaming it over the old one,
// which leaves the old inode, and this mapping, intact.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mmdb: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("mmdb: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("mmdb: %s is not a regular file", path)
	}
	size := st.Size()
	if size > MaxFileSize {
		return nil, fmt.Errorf("mmdb: %s is %d bytes, more than the %d-byte limit", path, size, MaxFileSize)
	}
	if size == 0 {
		// mmap refuses an empty mapping.
		return nil, fmt.Errorf("%s: %w", path, corrupt("empty file"))
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmdb: mapping %s: %w", path, err)
	}
	r, err := FromBytes(m)
	if err != nil {
		unix.Munmap(m)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.mapping = m
	return r, nil
}

// Close unmaps the file of a Reader from Open (a Reader from FromBytes has
// nothing to release). Lookups after Close return ErrClosed. Close must not run while
// lookups, walks or Verify on r are still in progress, and strings returned
// earlier stay valid (none of them points into the mapping).
func (r *Reader) Close() error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.closed.Swap(true) || r.mapping == nil {
		return nil
	}
	m := r.mapping
	r.mapping = nil
	if err := unix.Munmap(m); err != nil {
		return fmt.Errorf("mmdb: unmapping: %w", err)
	}
	return nil
}

// ReleasePages drops the pages of a mapped file from the process's
// resident set; they stay in the page cache, and a later read maps them
// again. A walk of a whole database touches every page of it (70 MiB for
// GeoLite2 City): a caller walking one calls this now and then, so the
// walk does not count the whole file against the process. A Reader from
// FromBytes has nothing to release.
func (r *Reader) ReleasePages() {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.mapping != nil {
		// Advice on a read-only shared mapping: nothing is lost, so the
		// error (none is expected) changes nothing.
		unix.Madvise(r.mapping, unix.MADV_DONTNEED)
	}
}

// FromBytes returns a Reader over b after validating the metadata and the
// layout it describes. The Reader keeps b, which must not be modified
// afterwards.
func FromBytes(b []byte) (*Reader, error) {
	meta, markerAt, err := parseMetadata(b)
	if err != nil {
		return nil, err
	}
	if meta.BinaryFormatMajorVersion != 2 {
		return nil, corrupt("unsupported binary format version %d.%d", meta.BinaryFormatMajorVersion, meta.BinaryFormatMinorVersion)
	}
	if meta.IPVersion != 4 && meta.IPVersion != 6 {
		return nil, corrupt("ip_version %d is neither 4 nor 6", meta.IPVersion)
	}
	switch meta.RecordSize {
	case 24, 28, 32:
	default:
		return nil, corrupt("unsupported record_size %d (want 24, 28 or 32)", meta.RecordSize)
	}
	nodes := uint64(meta.NodeCount)
	if nodes == 0 {
		return nil, corrupt("node_count is 0")
	}
	// A record must be able to name every node and the "no data" value.
	if nodes >= 1<<meta.RecordSize {
		return nil, corrupt("node_count %d does not fit in %d-bit records", nodes, meta.RecordSize)
	}
	treeSize := nodes * uint64(meta.RecordSize) / 4
	if treeSize+16 > uint64(markerAt) {
		return nil, corrupt("search tree of %d nodes needs %d bytes and a 16-byte separator, but only %d bytes precede the metadata",
			nodes, treeSize, markerAt)
	}
	r := &Reader{
		meta:         meta,
		tree:         b[:treeSize],
		separator:    b[treeSize : treeSize+16],
		data:         section(b[treeSize+16 : markerAt]),
		nodeCount:    uint32(nodes),
		recordSize:   int(meta.RecordSize),
		codes:        newCodeCache(),
		subdivisions: newCodeCache(),
		v4Nodes:      newNodeCache(16),
		v6Nodes:      newNodeCache(32),
	}
	r.ipv4Start, r.ipv4Depth = r.findIPv4Start()
	return r, nil
}

// Metadata returns a copy of the database's metadata.
func (r *Reader) Metadata() Metadata {
	m := r.meta
	m.Languages = append([]string(nil), m.Languages...)
	if m.Description != nil {
		m.Description = make(map[string]string, len(r.meta.Description))
		for k, v := range r.meta.Description {
			m.Description[k] = v
		}
	}
	return m
}

// Country returns country.iso_code of the record for ip, in upper case, or ""
// when the database has no record (or no country) for ip. An IPv6 address
// has no record in an IPv4-only database. It allocates nothing: two-letter
// codes are slices of a constant string, and the answer for each record is
// remembered (see codeCache).
func (r *Reader) Country(ip netip.Addr) (string, error) {
	off, ok, err := r.find(ip)
	if err != nil || !ok {
		return "", err
	}
	code, err := r.countryAt(off)
	if err != nil {
		return "", invalid("country of "+ip.String(), err)
	}
	return code, nil
}

// CountryAndSubdivision returns country.iso_code and subdivisions[0].iso_code
// (the largest subdivision, as in GeoLite2 City) of the record for ip, in
// upper case; each is "" when absent.
func (r *Reader) CountryAndSubdivision(ip netip.Addr) (country, subdivision string, err error) {
	off, ok, err := r.find(ip)
	if err != nil || !ok {
		return "", "", err
	}
	if country, subdivision, err = r.codesAt(off); err != nil {
		return "", "", invalid("codes of "+ip.String(), err)
	}
	return country, subdivision, nil
}

// codesAt returns the upper-case country and subdivision codes of the record
// at off.
func (r *Reader) codesAt(off int) (country, subdivision string, err error) {
	if country, err = r.countryAt(off); err != nil {
		return "", "", err
	}
	if sub, ok := r.subdivisions.get(off); ok {
		return country, sub, nil
	}
	budget := maxItems
	code, err := r.data.subdivisionCode(off, &budget)
	if err != nil {
		return "", "", err
	}
	r.subdivisions.put(off, code)
	if code == nil {
		return country, "", nil
	}
	return country, isoString(code), nil
}

// countryAt returns the upper-case country code of the record at off,
// through the cache.
func (r *Reader) countryAt(off int) (string, error) {
	if code, ok := r.codes.get(off); ok {
		return code, nil
	}
	budget := maxItems
	code, err := r.data.isoCode(off, "country", &budget)
	if err != nil {
		return "", err
	}
	r.codes.put(off, code)
	if code == nil {
		return "", nil
	}
	return isoString(code), nil
}

// Lookup decodes the whole record for ip into map[string]any, []any, string,
// []byte, uint64 (uint16, uint32, uint64), int64 (int32), float64 (double,
// float), bool and *big.Int (uint128). It returns nil when the database has
// no record for ip. It is meant for tests and debugging; the hot path is
// Country.
func (r *Reader) Lookup(ip netip.Addr) (any, error) {
	off, ok, err := r.find(ip)
	if err != nil || !ok {
		return nil, err
	}
	d := decoder{s: r.data, build: true, items: maxItems, bytes: maxBytes}
	v, _, err := d.value(off, 0)
	if err != nil {
		return nil, invalid("record of "+ip.String(), err)
	}
	return v, nil
}

// upperPairs holds every pair of upper-case letters, "AAAB…ZZ", so that an
// ordinary ISO 3166 code is returned as a substring of it: the WAF looks up
// every request and should not allocate for that.
var upperPairs = func() string {
	b := make([]byte, 0, 26*26*2)
	for x := byte('A'); x <= 'Z'; x++ {
		for y := byte('A'); y <= 'Z'; y++ {
			b = append(b, x, y)
		}
	}
	return string(b)
}()

// isoString returns p in upper case.
func isoString(p []byte) string {
	if len(p) == 2 {
		x, y := p[0]&^0x20, p[1]&^0x20 // ASCII upper case; checked below
		if x >= 'A' && x <= 'Z' && y >= 'A' && y <= 'Z' {
			i := (int(x-'A')*26 + int(y-'A')) * 2
			return upperPairs[i : i+2]
		}
	}
	if len(p) <= maxIntern {
		var u [maxIntern]byte
		for i, c := range p {
			if c >= 'a' && c <= 'z' {
				c -= 'a' - 'A'
			}
			u[i] = c
		}
		if utf8.Valid(u[:len(p)]) {
			return intern(u[:len(p)])
		}
	}
	return strings.ToUpper(string(p))
}
