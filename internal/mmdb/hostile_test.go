package mmdb

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// smallDB is the database the exhaustive corruption tests mangle.
func smallDB(t testing.TB) []byte {
	t.Helper()
	return buildDB(t, writerOptions{ipVersion: 6, recordSize: 28, dedup: true, aliasIPv4: true}, []network{
		{mustPrefix("1.0.0.0/8"), cityRecord("US", "CA", "San Francisco")},
		{mustPrefix("1.2.3.0/24"), countryRecord("DE")},
		{mustPrefix("2001:db8::/32"), map[string]any{"n": []any{u16(1), i32(-1), 2.5, float32(1), true, []byte{1}, bigOnes(100), u64(1 << 40)}}},
	})
}

// exercise runs everything a caller might do with b, which must never
// panic. It returns the Reader (nil when FromBytes refused b) and the error
// of FromBytes or Verify.
func exercise(b []byte) (*Reader, error) {
	r, err := FromBytes(b)
	if err != nil {
		return nil, err
	}
	r.Metadata()
	verr := r.Verify()
	for _, ip := range fuzzAddrs {
		r.Lookup(ip)
		r.Country(ip)
		r.CountryAndSubdivision(ip)
		r.LookupString(ip, "country", "iso_code")
		r.LookupString(ip, "subdivisions", "-1", "names", "en")
		r.LookupPath(ip, "city")
		if _, off, ok, err := r.LookupNetwork(ip); ok && err == nil {
			r.Decode(off)
			r.CodesAt(off)
		}
	}
	// Bounded, since a valid tree of a small file can still hold many
	// networks.
	n := 0
	r.Networks(func(_ netip.Prefix, off Offset) bool {
		r.StringAt(off, "country", "iso_code")
		n++
		return n < 1000
	})
	n = 0
	r.CountryNetworks(func(netip.Prefix, string, string) bool { n++; return n < 1000 })
	return r, verr
}

func TestTruncated(t *testing.T) {
	db := smallDB(t)
	for n := range len(db) {
		_, err := FromBytes(db[:n])
		if !errors.Is(err, ErrInvalidDatabase) {
			t.Fatalf("truncated to %d of %d bytes: %v", n, len(db), err)
		}
	}
}

// TestTruncatedData cuts the tree and data section at every length but
// keeps the metadata, as a download that lost a chunk in the middle would:
// FromBytes or else Verify must notice.
func TestTruncatedData(t *testing.T) {
	db := smallDB(t)
	at := bytes.LastIndex(db, []byte(metadataMarker))
	for n := range at {
		b := append(db[:n:n], db[at:]...)
		if _, err := exercise(b); !errors.Is(err, ErrInvalidDatabase) {
			t.Fatalf("data cut to %d of %d bytes: %v", n, at, err)
		}
	}
}

// TestCorruptEveryByte flips each byte of a small database in turn: whatever
// happens must be an error or a success, never a panic or a hang.
func TestCorruptEveryByte(t *testing.T) {
	db := smallDB(t)
	start := time.Now()
	for i := range db {
		for _, x := range []byte{0xff, 0x01, 0x80} {
			b := bytes.Clone(db)
			b[i] ^= x
			exercise(b)
		}
	}
	t.Logf("%d variants in %v", 3*len(db), time.Since(start))
}

func wantInvalid(t *testing.T, what string, err error, text string) {
	t.Helper()
	if !errors.Is(err, ErrInvalidDatabase) || !strings.Contains(err.Error(), text) {
		t.Errorf("%s: error %v, want one containing %q", what, err, text)
	} else {
		t.Logf("%s: %v", what, err)
	}
}

func TestBadMetadata(t *testing.T) {
	nets := testNetworks(false)
	build := func(edit func(map[string]any)) []byte {
		return buildDB(t, writerOptions{ipVersion: 4, recordSize: 24, meta: edit}, nets)
	}
	cases := []struct {
		name string
		edit func(map[string]any)
		text string
	}{
		{"record size 0", func(m map[string]any) { m["record_size"] = u16(0) }, "record_size 0"},
		{"record size 17", func(m map[string]any) { m["record_size"] = u16(17) }, "record_size 17"},
		{"record size 128", func(m map[string]any) { m["record_size"] = u16(128) }, "record_size 128"},
		{"node count beyond the file", func(m map[string]any) { m["node_count"] = u32(1 << 20) }, "only"},
		{"node count beyond the records", func(m map[string]any) { m["node_count"] = u32(1 << 24) }, "does not fit"},
		{"node count 2^32-1", func(m map[string]any) { m["node_count"] = u32(1<<32 - 1) }, "does not fit"},
		{"node count too wide", func(m map[string]any) { m["node_count"] = u64(1 << 32) }, "exceeds"},
		{"node count 0", func(m map[string]any) { m["node_count"] = u32(0) }, "node_count is 0"},
		{"node count missing", func(m map[string]any) { delete(m, "node_count") }, "node_count is missing"},
		{"node count string", func(m map[string]any) { m["node_count"] = "12" }, "not an unsigned integer"},
		{"node count signed", func(m map[string]any) { m["node_count"] = i32(12) }, "not an unsigned integer"},
		{"ip version 5", func(m map[string]any) { m["ip_version"] = u16(5) }, "ip_version 5"},
		{"major version 3", func(m map[string]any) { m["binary_format_major_version"] = u16(3) }, "version 3.0"},
		{"no build epoch", func(m map[string]any) { delete(m, "build_epoch") }, "build_epoch"},
		{"no database type", func(m map[string]any) { delete(m, "database_type") }, "database_type"},
		{"languages not an array", func(m map[string]any) { m["languages"] = "en" }, "languages is a string"},
		{"language not a string", func(m map[string]any) { m["languages"] = []any{"en", u16(1)} }, "languages holds a uint64"},
		{"description not a map", func(m map[string]any) { m["description"] = []any{} }, "description is a []interface {}"},
		{"description value", func(m map[string]any) { m["description"] = map[string]any{"en": true} }, `description["en"]`},
	}
	for _, c := range cases {
		_, err := FromBytes(build(c.edit))
		wantInvalid(t, c.name, err, c.text)
	}

	db := build(nil)
	i := bytes.LastIndex(db, []byte(metadataMarker))
	noMarker := bytes.Clone(db)
	noMarker[i+5] = 'X'
	_, err := FromBytes(noMarker)
	wantInvalid(t, "marker missing", err, "marker not found")

	notMap := append(db[:i+len(metadataMarker):i+len(metadataMarker)], appendHeader(nil, kindString, 1)...)
	_, err = FromBytes(append(notMap, 'x'))
	wantInvalid(t, "metadata not a map", err, "not a map")

	_, err = FromBytes(nil)
	wantInvalid(t, "empty", err, "marker not found")
	_, err = FromBytes([]byte(metadataMarker))
	wantInvalid(t, "only a marker", err, "metadata")

	// The marker counts only in the last 128 KiB: pad after the metadata.
	padded := append(bytes.Clone(db), make([]byte, maxMetadataSize)...)
	_, err = FromBytes(padded)
	wantInvalid(t, "marker too far from the end", err, "marker not found")

	// An earlier copy of the marker, inside the data section, is ignored.
	if _, err := FromBytes(buildDB(t, writerOptions{ipVersion: 4, recordSize: 24}, []network{{mustPrefix("1.0.0.0/8"), metadataMarker}})); err != nil {
		t.Errorf("marker in the data section: %v", err)
	}
}

// lookupErr returns the error of a Lookup of addr.
func lookupErr(r *Reader, addr string) error {
	_, err := r.Lookup(mustAddr(addr))
	return err
}

func TestPointerCycles(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		text string
	}{
		{"pointer to itself", []byte{0x20, 0x00}, "pointer to another pointer"},
		{"mutual pointers", []byte{0x20, 0x02, 0x20, 0x00}, "pointer to another pointer"},
		// {"a": → the map itself}
		{"map containing itself", []byte{0xe1, 0x41, 'a', 0x20, 0x00}, "nested more than 32"},
		// [→ itself, → itself]: 2^32 paths without the limits
		{"array containing itself twice", []byte{0x02, 0x04, 0x20, 0x00, 0x20, 0x00}, "nested more than 32"},
		// {"country": → itself}
		{"country is the record", []byte{0xe1, 0x47, 'c', 'o', 'u', 'n', 't', 'r', 'y', 0x20, 0x00}, "nested more than 32"},
	}
	for _, c := range cases {
		r, err := FromBytes(tinyDB(t, c.data))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		start := time.Now()
		wantInvalid(t, c.name+": Lookup", lookupErr(r, "1.2.3.4"), c.text)
		wantInvalid(t, c.name+": Verify", r.Verify(), c.text)
		r.Country(mustAddr("1.2.3.4"))
		r.CountryAndSubdivision(mustAddr("1.2.3.4"))
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s took %v", c.name, d)
		}
	}

	// A key that is a pointer to a pointer.
	r, err := FromBytes(tinyDB(t, []byte{0xe1, 0x20, 0x03, 0x20, 0x03, 0x41, 'x'}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Country(mustAddr("1.2.3.4"))
	wantInvalid(t, "key pointer to pointer: Country", err, "pointer to another pointer")
}

// TestExpansionBudget builds records that are small on disk but expand
// through shared pointers: ten levels of [→ next, → next] over a 100 KB
// string, and an array of 2^17 small values reached twice per level.
func TestExpansionBudget(t *testing.T) {
	var data []byte
	str := strings.Repeat("z", 100_000)
	data = append(appendHeader(nil, kindString, len(str)), str...)
	prev := 0
	for range 10 {
		at := len(data)
		data = appendHeader(data, kindArray, 2)
		data = appendPointer(appendPointer(data, prev), prev)
		prev = at
	}
	rec := len(data)
	data = appendPointer(data, prev) // the record: a pointer to the top level
	r, err := FromBytes(rawDB(t, []uint32{1 + 16 + uint32(rec), 1 + 16 + uint32(rec)}, data, nil))
	if err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, "text bomb: Lookup", lookupErr(r, "1.2.3.4"), "bytes of text")
	wantInvalid(t, "text bomb: Verify", r.Verify(), "bytes of text")

	data = appendHeader(nil, kindArray, 1<<17)
	for range 1 << 17 {
		data = append(data, 0xa0) // uint16 0
	}
	r, err = FromBytes(tinyDB(t, data))
	if err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, "value bomb: Lookup", lookupErr(r, "1.2.3.4"), "more than 65536 values")
	wantInvalid(t, "value bomb: Verify", r.Verify(), "more than 65536 values")
	// The path walk has the same budget when it skips a value.
	data = append([]byte{0xe2, 0x41, 'a'}, data...)
	data = append(data, 0x47)
	data = append(data, "country"...)
	data = append(data, 0xe0)
	r, err = FromBytes(tinyDB(t, data))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Country(mustAddr("1.2.3.4"))
	wantInvalid(t, "value bomb: Country", err, "more than 65536 values")
}

// TestHugeSizes checks fields that claim far more than the file holds: none
// of them may allocate or read before the claim is checked.
func TestHugeSizes(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		text string
	}{
		{"pointer to 4 GiB", []byte{0x38, 0xff, 0xff, 0xff, 0xff}, "pointer to 4294967295 is outside"},
		{"string of 16 MiB", []byte{0x5f, 0xff, 0xff, 0xff, 'a'}, "16843036-byte string runs past"},
		{"bytes of 65 KiB", []byte{0x9e, 0xff, 0xff}, "runs past"},
		{"map of 16M pairs", []byte{0xff, 0xff, 0xff, 0xff, 0x41, 'a', 0x41, 'b'}, "map claims 16843036 pairs"},
		{"array of 16M values", []byte{0x1f, 0x04, 0xff, 0xff, 0xff, 0xa0}, "array claims 16843036 values"},
		{"size bytes missing", []byte{0x5f, 0xff}, "size bytes run past"},
		{"extended type missing", []byte{0x01}, "extended type byte is missing"},
		{"pointer bytes missing", []byte{0x38, 0xff}, "pointer runs past"},
		{"unknown extended type", []byte{0x00, 0x09}, "unknown extended type 16"},
		{"extended type 7", []byte{0x00, 0x00}, "unknown extended type 7"},
		{"end marker", []byte{0x00, 0x06}, "unexpected end marker"},
		{"data cache container", []byte{0x00, 0x05}, "unexpected data cache container"},
		{"uint16 of 3 bytes", []byte{0xa3, 1, 2, 3}, "uint16 with a 3-byte payload"},
		{"uint128 of 17 bytes", append([]byte{0x11, 0x03}, make([]byte, 17)...), "uint128 with a 17-byte payload"},
		{"double of 4 bytes", []byte{0x64, 0, 0, 0, 0}, "double with a 4-byte payload"},
		{"float of 8 bytes", []byte{0x08, 0x08, 0, 0, 0, 0, 0, 0, 0, 0}, "float with a 8-byte payload"},
		{"boolean 2", []byte{0x02, 0x07}, "boolean with value 2"},
		{"invalid UTF-8", []byte{0x42, 0xff, 0xfe}, "not valid UTF-8"},
		{"map key not a string", []byte{0xe1, 0xa1, 1, 0xa1, 1}, "map key is a uint16"},
		{"invalid UTF-8 key", []byte{0xe1, 0x41, 0xff, 0xa1, 1}, "map key is not valid UTF-8"},
	}
	for _, c := range cases {
		r, err := FromBytes(tinyDB(t, c.data))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wantInvalid(t, c.name+": Lookup", lookupErr(r, "1.2.3.4"), c.text)
		wantInvalid(t, c.name+": Verify", r.Verify(), c.text)
		r.Country(mustAddr("1.2.3.4"))
	}
}

func TestDeepNesting(t *testing.T) {
	for _, depth := range []int{31, 32, 33, 40} {
		r, err := FromBytes(buildDB(t, writerOptions{ipVersion: 4, recordSize: 24, dedup: true}, []network{{mustPrefix("1.0.0.0/8"), nested(depth)}}))
		if err != nil {
			t.Fatal(err)
		}
		_, lerr := r.Lookup(mustAddr("1.2.3.4"))
		verr := r.Verify()
		if depth <= 32 {
			if lerr != nil || verr != nil {
				t.Errorf("depth %d: %v, %v", depth, lerr, verr)
			}
			continue
		}
		wantInvalid(t, "deep Lookup", lerr, "nested more than 32 deep")
		wantInvalid(t, "deep Verify", verr, "nested more than 32 deep")
		// The path walk skips without recursion, so depth does not hurt it.
		if cc, err := r.Country(mustAddr("1.2.3.4")); cc != "" || err != nil {
			t.Errorf("Country: %q, %v", cc, err)
		}
	}
}

func TestBadTree(t *testing.T) {
	data := append(appendHeader(nil, kindString, 2), "ok"...)
	cases := []struct {
		name    string
		records []uint32
		lookup  string // error of a Lookup of 0.0.0.0, or "" when it succeeds
		verify  string
	}{
		// Node 0 sends 0.0.0.0/1 to node 1, whose records follow.
		{"record past the data section", []uint32{1, 2, 2, 2 + 16 + 5}, "", "points 5 bytes into a 3-byte data section"},
		{"record far past the data section", []uint32{1<<24 - 1, 2, 2, 2}, "points 16777197 bytes", "points 16777197 bytes"},
		{"record in the separator", []uint32{2 + 5, 2, 2, 2}, "into the separator", "into the separator"},
		{"cycle", []uint32{1, 2, 0, 2}, "deeper than the address", "cycle through node 0"},
		{"self loop", []uint32{0, 1}, "deeper than the address", "cycle through node 0"},
	}
	for _, c := range cases {
		r, err := FromBytes(rawDB(t, c.records, data, nil))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		err = lookupErr(r, "0.0.0.0")
		if c.lookup == "" {
			if err != nil {
				t.Errorf("%s: Lookup: %v", c.name, err)
			}
		} else {
			wantInvalid(t, c.name+": Lookup", err, c.lookup)
		}
		wantInvalid(t, c.name+": Verify", r.Verify(), c.verify)
	}

	// A chain of 33 nodes along 0.0.0.0 is one bit too deep for IPv4;
	// 32 nodes is exactly right.
	for _, n := range []uint32{32, 33} {
		var recs []uint32
		for i := uint32(0); i < n; i++ {
			recs = append(recs, i+1, n+16)
		}
		r, err := FromBytes(rawDB(t, recs, data, nil))
		if err != nil {
			t.Fatal(err)
		}
		lerr := lookupErr(r, "0.0.0.0")
		verr := r.Verify()
		if n == 32 {
			if lerr != nil || verr != nil {
				t.Errorf("32-bit chain: %v, %v", lerr, verr)
			}
			continue
		}
		wantInvalid(t, "33-bit chain: Lookup", lerr, "deeper than the address")
		wantInvalid(t, "33-bit chain: Verify", verr, "deeper than 32 bits")
	}

	// A subtree first finished at depth 1 and met again at depth 31 makes
	// the second path too long: 0 → 1 → … → 30 → 31 → 32 takes 33 bits.
	const n = 33
	recs := []uint32{31, 1} // node 0: left to the shared node 31
	for i := uint32(1); i <= 30; i++ {
		recs = append(recs, i+1, n+16)
	}
	recs = append(recs, 32, n+16, n+16, n+16) // nodes 31 and 32
	r, err := FromBytes(rawDB(t, recs, data, nil))
	if err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, "shared deep subtree: Verify", r.Verify(), "deeper than 32 bits through node 31")

	// A non-zero separator passes FromBytes but not Verify.
	db := buildDB(t, writerOptions{ipVersion: 4, recordSize: 24}, testNetworks(false))
	if r, err = FromBytes(db); err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	db[len(r.tree)+3] = 1
	wantInvalid(t, "separator", r.Verify(), "not all zero")
}
