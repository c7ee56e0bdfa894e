//go:build !crashpoints

// Package crashpoint lets end-to-end tests kill the agent at a named step of
// an apply, to prove a crash at that instant loses nothing. Release builds
// compile Hit to nothing; tests build the agent with -tags crashpoints.
package crashpoint

// Hit is a no-op in release builds.
func Hit(string) {}
