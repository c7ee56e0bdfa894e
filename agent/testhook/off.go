//go:build !testhooks

// Package testhook is what end-to-end tests compile into the agent with
// -tags testhooks: crash points, to prove a crash at a named step of an
// apply loses nothing, and a skewed clock, to put a minute boundary where
// a test needs it. Release builds compile both to nothing.
package testhook

import "time"

// Crash is a no-op in release builds.
func Crash(string) {}

// Now is the wall clock in release builds.
func Now() time.Time { return time.Now() }

// PolicyBlind is "" in release builds: the template policy reads every
// directive.
func PolicyBlind() string { return "" }
