// Package linux reads the host facts the agent reports on every heartbeat
// (CPU time, memory, storage, block I/O, uptime, cgroup memory) and the
// slower-changing profile facts (CPU model, OS release, kernel release) from
// /proc, /sys and /etc.
//
// The parsers are hand-written byte scanners rather than a general procfs
// library, for two reasons that matter on the smallest targets (OpenWrt
// routers with 64 MiB of RAM and a few MiB of flash): the binary stays small,
// and a heartbeat does not allocate per line or per field. A Reader keeps one
// scratch buffer that every per-beat file is read into, so a full Sample costs
// a handful of allocations (one per opened path, where golang.org/x/sys/unix
// copies it to a NUL-terminated string) however many disks or CPUs the host
// has.
//
// Only facts are produced: cumulative counters and instant readings. The one
// derived number, CPUPercent, is a pure function of two samples the caller
// keeps.
//
// Every numeric field is parsed on its own: a garbage, negative or overflowing
// token makes that one field zero (or skipped) and leaves its neighbours
// intact, because a single odd counter on one exotic kernel must not blank out
// a whole heartbeat. No input makes a parser panic, and no file is read past
// maxFileSize.
package linux
