// Package state is an agent package for the leaf below to import.
package state

// X is imported by internal/leaf.
const X = 1
