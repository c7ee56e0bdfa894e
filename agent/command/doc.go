// Package command holds the one-shot commands of the binary: check,
// status and render. Each reads local files (and, for check, runs the
// nginx binary's -V and -t) and changes nothing on the node.
package command

// ExitUsage is the exit status of a usage error: EX_USAGE from sysexits.h.
// Not 2, which the flag package suggests: Go exits 2 on a panic too, and
// the systemd unit must restart a panic (a self-updated binary rolls back
// at its third start) but not a wrong command line
// (RestartPreventExitStatus=64).
const ExitUsage = 64
