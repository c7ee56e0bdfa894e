// Package command holds the one-shot commands of the binary: check,
// status and render. Each reads local files (and, for check, runs the
// nginx binary's -V and -t) and changes nothing on the node.
package command
