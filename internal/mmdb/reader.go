package mmdb

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
)

// MaxFileSize is the largest file Open reads. GeoLite2 City is about 70 MiB;
// the cap keeps a wrong or hostile download from exhausting a router's RAM.
const MaxFileSize = 256 << 20

// ErrInvalidDatabase is wrapped by every error caused by the contents of the
// file (as opposed to I/O errors or invalid arguments).
var ErrInvalidDatabase = errors.New("mmdb: invalid database")

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
}

// Open reads the database at path into memory and validates its metadata;
// call Verify as well before trusting a newly downloaded file. See the
// package documentation for why it does not memory-map the file.
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
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("mmdb: %s is %d bytes, more than the %d-byte limit", path, st.Size(), MaxFileSize)
	}
	buf := make([]byte, st.Size())
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, fmt.Errorf("mmdb: reading %s: %w", path, err)
	}
	// A file that grew while it was read is being rewritten: its tail,
	// where the metadata lives, cannot be trusted.
	var extra [1]byte
	if n, _ := f.Read(extra[:]); n != 0 {
		return nil, fmt.Errorf("mmdb: %s grew while it was being read", path)
	}
	r, err := FromBytes(buf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
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
		meta:       meta,
		tree:       b[:treeSize],
		separator:  b[treeSize : treeSize+16],
		data:       section(b[treeSize+16 : markerAt]),
		nodeCount:  uint32(nodes),
		recordSize: int(meta.RecordSize),
	}
	r.ipv4Start = r.findIPv4Start()
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
// has no record in an IPv4-only database.
func (r *Reader) Country(ip netip.Addr) (string, error) {
	off, ok, err := r.find(ip)
	if err != nil || !ok {
		return "", err
	}
	budget := maxItems
	code, err := r.data.isoCode(off, "country", &budget)
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
	budget := maxItems
	if country, err = r.data.isoCode(off, "country", &budget); err != nil {
		return "", "", invalid("country of "+ip.String(), err)
	}
	if subdivision, err = r.data.subdivisionCode(off, &budget); err != nil {
		return "", "", invalid("subdivision of "+ip.String(), err)
	}
	return country, subdivision, nil
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
	return strings.ToUpper(string(p))
}
