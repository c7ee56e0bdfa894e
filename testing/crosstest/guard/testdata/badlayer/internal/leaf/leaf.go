// Package leaf is an internal library that reaches up into agent/ on
// purpose (layers_test.go).
package leaf

import "openflare/testing/crosstest/guard/testdata/badlayer/agent/state"

// Y uses agent/state.
const Y = state.X
