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
// Open reads the whole file into memory rather than mapping it. A mapping
// would save RAM on the City database, but the updater replaces files on disk
// and a file truncated underneath a mapping kills the process with SIGBUS,
// and a 32-bit router has little address space to spare; a Country database
// is a few MiB. Open refuses files larger than MaxFileSize.
package mmdb
