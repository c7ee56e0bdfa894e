package mmdb

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"unicode/utf8"
)

// Offset is the position of a record in the data section. Networks that
// share a record (most do: a Country database has a few hundred distinct
// records for hundreds of thousands of networks) have the same Offset, so a
// caller that processes every network can decode each record once.
type Offset uint32

// ErrPathType is wrapped by the errors of path lookups whose path does not
// fit the data: a key looked up in something that is not a map, an index in
// something that is not an array, or a string asked for where the value is
// of another type.
var ErrPathType = errors.New("mmdb: path does not match the data")

// A path names a value inside a record, one element per level: a map key,
// or, where the value is an array, a decimal index (negative indexes count
// from the end, -1 being the last element), as in mmdblookup. An empty path
// names the record itself.

// LookupNetwork returns the offset of the record for ip and the network the
// record covers, which contains ip. ok is false when the database has no
// record for ip; the network is then still the one ip is in. An IPv4 address
// (or IPv4-mapped IPv6 address) gets an IPv4 network, also in an IPv6 tree.
func (r *Reader) LookupNetwork(ip netip.Addr) (network netip.Prefix, off Offset, ok bool, err error) {
	o, bits, ok, err := r.findNetwork(ip)
	if err != nil {
		return netip.Prefix{}, 0, false, err
	}
	ip = ip.Unmap()
	if ip.Is4() && r.meta.IPVersion == 6 {
		bits = max(0, bits-96)
	} else if ip.Is6() && r.meta.IPVersion == 4 {
		bits = 0 // an IPv6 address is in no network of an IPv4 tree
	}
	network, _ = ip.WithZone("").Prefix(bits)
	return network, Offset(o), ok, nil
}

// offsetOK checks an Offset from the caller.
func (r *Reader) offsetOK(off Offset) error {
	if r.closed.Load() {
		return ErrClosed
	}
	if uint64(off) >= uint64(len(r.data)) {
		return fmt.Errorf("mmdb: offset %d is outside the %d-byte data section", off, len(r.data))
	}
	return nil
}

// Decode decodes the whole record at off, as Lookup does.
func (r *Reader) Decode(off Offset) (any, error) {
	v, _, err := r.DecodePath(off)
	return v, err
}

// DecodePath decodes the value that path names in the record at off, and
// only that value: the values before it are skipped, not decoded. ok is
// false when a key or index of the path is absent. Values decode as in
// Lookup.
func (r *Reader) DecodePath(off Offset, path ...string) (v any, ok bool, err error) {
	if err := r.offsetOK(off); err != nil {
		return nil, false, err
	}
	budget := maxItems
	at, ok, err := r.data.path(int(off), path, &budget)
	if err != nil || !ok {
		return nil, false, wrapPath(path, err)
	}
	d := decoder{s: r.data, build: true, items: budget, bytes: maxBytes}
	if v, _, err = d.value(at, 0); err != nil {
		return nil, false, invalid(pathString(path), err)
	}
	return v, true, nil
}

// StringAt returns the string that path names in the record at off. ok is
// false when a key or index of the path is absent; a value that is not a
// string is an error wrapping ErrPathType. Strings of up to 16 bytes are
// interned, so looking up a short code such as country.iso_code allocates
// nothing once that code has been seen.
func (r *Reader) StringAt(off Offset, path ...string) (s string, ok bool, err error) {
	if err := r.offsetOK(off); err != nil {
		return "", false, err
	}
	return r.stringAt(int(off), path)
}

func (r *Reader) stringAt(off int, path []string) (string, bool, error) {
	budget := maxItems
	at, ok, err := r.data.path(off, path, &budget)
	if err != nil || !ok {
		return "", false, wrapPath(path, err)
	}
	h, err := r.data.resolve(at)
	if err != nil {
		return "", false, invalid(pathString(path), err)
	}
	if h.kind != kindString {
		return "", false, fmt.Errorf("%w: %s is a %s, not a string", ErrPathType, pathString(path), h.kind)
	}
	p := r.data[h.start:h.end()]
	if !utf8.Valid(p) {
		return "", false, invalid(pathString(path), errAt(at, "string is not valid UTF-8"))
	}
	if len(p) <= maxIntern {
		return intern(p), true, nil
	}
	return string(p), true, nil
}

// LookupString returns the string that path (for example "country",
// "iso_code") names in the record for ip, as StringAt does. ok is false when
// the database has no record for ip or the record has no such value.
func (r *Reader) LookupString(ip netip.Addr, path ...string) (string, bool, error) {
	off, ok, err := r.find(ip)
	if err != nil || !ok {
		return "", false, err
	}
	// country.iso_code, the lookup of every geo rule, comes from the
	// per-record cache that Country fills.
	if len(path) == 2 && path[0] == "country" && path[1] == "iso_code" {
		if code, ok := r.codes.get(off); ok {
			return code, code != "", nil
		}
		s, ok, err := r.stringAt(off, path)
		if err == nil {
			if !ok {
				r.codes.put(off, nil)
			} else if len(s) <= 3 {
				var b [3]byte
				r.codes.put(off, b[:copy(b[:], s)])
			}
		}
		return s, ok, err
	}
	return r.stringAt(off, path)
}

// LookupPath decodes the value that path names in the record for ip, as
// DecodePath does. ok is false when the database has no record for ip or the
// record has no such value.
func (r *Reader) LookupPath(ip netip.Addr, path ...string) (any, bool, error) {
	off, ok, err := r.find(ip)
	if err != nil || !ok {
		return nil, false, err
	}
	return r.DecodePath(Offset(off), path...)
}

// CodesAt returns the upper-case country.iso_code and
// subdivisions[0].iso_code of the record at off, as CountryAndSubdivision
// does for an address.
func (r *Reader) CodesAt(off Offset) (country, subdivision string, err error) {
	if err := r.offsetOK(off); err != nil {
		return "", "", err
	}
	if country, subdivision, err = r.codesAt(int(off)); err != nil {
		return "", "", invalid(fmt.Sprintf("codes of the record at %d", off), err)
	}
	return country, subdivision, nil
}

// pathError is a path that does not fit the data, as opposed to a corrupt
// database.
type pathError struct{ msg string }

func (e *pathError) Error() string { return e.msg }

func wrapPath(path []string, err error) error {
	if err == nil {
		return nil
	}
	var pe *pathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%w: %s: %s", ErrPathType, pathString(path), pe.msg)
	}
	return invalid(pathString(path), err)
}

func pathString(path []string) string {
	if len(path) == 0 {
		return "record"
	}
	s := ""
	for i, p := range path {
		if i > 0 {
			s += "."
		}
		s += p
	}
	return s
}

// path returns the offset of the value that path names in the value at off.
func (s section) path(off int, path []string, budget *int) (int, bool, error) {
	for _, key := range path {
		h, err := s.resolve(off)
		if err != nil {
			return 0, false, err
		}
		switch h.kind {
		case kindMap:
			var ok bool
			if off, ok, err = s.mapLookup(h, key, budget); err != nil || !ok {
				return 0, false, err
			}
		case kindArray:
			i, err := strconv.Atoi(key)
			if err != nil {
				return 0, false, &pathError{fmt.Sprintf("index %q into an array", key)}
			}
			if i < 0 {
				i += h.size
			}
			if i < 0 || i >= h.size {
				return 0, false, nil
			}
			off = h.start
			for ; i > 0; i-- {
				if off, err = s.skip(off, budget); err != nil {
					return 0, false, err
				}
			}
		default:
			return 0, false, &pathError{fmt.Sprintf("looking for %q in a %s", key, h.kind)}
		}
	}
	return off, true, nil
}
