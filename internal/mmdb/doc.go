// Package mmdb reads MaxMind DB (.mmdb) files, such as the GeoLite2 Country
// and City databases behind the WAF's geo rules, and checks a freshly
// downloaded database before it replaces the one on disk.
//
// It is written from the public MaxMind DB File Format Specification (v2.0)
// instead of importing a general reader, for two reasons.
//
// Binary size: the agent runs on routers and single-board computers and only
// needs a country or subdivision code per client address. That does not
// justify reflection-based unmarshalling or another dependency, and it lets
// the common lookup walk straight to country.iso_code without decoding the
// rest of the record (no allocation for an ordinary two-letter code).
//
// Hostile input: databases are downloaded from the internet, so the file is
// treated as untrusted.
//
//   - Every offset, size and pointer read from the file is checked against the
//     bytes that are actually there before it is used, with arithmetic that
//     cannot overflow on 32-bit MIPS and ARM (values from the file stay uint32
//     or uint64 until they are known to fit).
//   - Nothing is allocated from a size in the file before that size has been
//     checked against the bytes that remain; containers are never
//     preallocated beyond a small fixed capacity.
//   - A pointer may not point at another pointer (the specification forbids
//     it), maps and arrays may nest at most 32 deep, and every decode has a
//     budget of values and bytes. Pointer cycles and records that expand
//     through shared pointers therefore end in an error, not in an endless
//     loop or a huge allocation.
//   - A search-tree walk never takes more steps than the address has bits.
//
// A malformed file yields an error wrapping ErrInvalidDatabase that names the
// problem and where it is; no input makes the package panic.
//
// Open maps the file read-only (golang.org/x/sys/unix) instead of reading it
// into the heap: a City database is 60-70 MiB and a router may have 128 MiB in
// all, so the agent's heap stays the same whatever the database size, and
// the pages are shared with the page cache. Close unmaps. Open refuses files
// larger than MaxFileSize, which bounds the address space a mapping takes on
// a 32-bit router. A mapped file must
// never be truncated or rewritten in place (a read of a vanished page is a
// SIGBUS): a new database is written beside the old one and renamed over it,
// which leaves the old inode, and every mapping of it, intact. Strings
// returned by the Reader never point into the mapping, so they outlive Close.
//
// Addresses: IPv4 addresses are looked up in ::/96 of an IPv6 tree, from a
// start node found once by Open. An IPv4-mapped IPv6 address
// (::ffff:a.b.c.d) is looked up as the IPv4 address it stands for, whether or
// not the database aliases ::ffff:0:0/96 (libmaxminddb looks it up as IPv6,
// so it finds nothing in a database without that alias).
//
// The API has three levels:
//
//   - Country and CountryAndSubdivision, the WAF's lookups: a tree walk and
//     the decoding of one path, with no allocation. Two kinds of small
//     lock-free caches (direct-mapped tables of atomic words, 128 KiB per
//     Reader) serve repeated clients: the tree node that the first 16 bits
//     of an IPv4 address, or the first 32 of an IPv6 one, lead to, which
//     saves the first steps of the walk, and the country and subdivision
//     codes of recently used records, which saves decoding them.
//   - LookupString, LookupPath and LookupNetwork, for any path into a
//     record ("country", "iso_code"; "subdivisions", "0", "iso_code"),
//     decoding only the value named; short strings are interned.
//   - Networks and CountryNetworks, a walk of the whole tree that yields every
//     network with the offset of its record (or its codes), for compiling
//     the data plane's geo snapshot; Decode, DecodePath, StringAt and CodesAt
//     read a record by offset.
package mmdb
