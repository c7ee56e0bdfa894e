// Package command holds the one-shot commands of the binary: check,
// status and render, which read local files (and, for check, run the
// nginx binary's -V and -t) and change nothing on the node, and join,
// which writes a packaged node's first agent.json.
package command

// ExitUsage is the exit status of a usage error: EX_USAGE from sysexits.h.
// Not 2, which the flag package suggests: Go exits 2 on a panic too, and
// the systemd unit must restart a panic (a self-updated binary rolls back
// at its third start) but not a wrong command line
// (RestartPreventExitStatus=64).
const ExitUsage = 64
