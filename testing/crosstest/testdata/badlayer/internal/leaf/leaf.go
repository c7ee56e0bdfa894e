// Package leaf is an internal library that reaches up into agent/ on
// purpose (layers_test.go).
package leaf

import "github.com/openflare/openflare-agent/testing/crosstest/testdata/badlayer/agent/state"

// Y uses agent/state.
const Y = state.X
