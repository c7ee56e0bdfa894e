//go:build !testhooks

package testhook

import (
	"testing"
	"time"
)

// A release build ignores the test environment: it never kills itself at
// a crash point, its clock is the wall clock, and the template policy's
// reader misses nothing.
func TestReleaseBuildIgnoresTheHooks(t *testing.T) {
	t.Setenv(CrashEnv, "start-test")
	t.Setenv(SkewEnv, "1h")
	t.Setenv(PolicyBlindEnv, "proxy_pass")
	Crash("start-test")
	before := time.Now()
	now := Now()
	if now.Before(before) || now.After(time.Now()) {
		t.Errorf("Now() = %v, not the wall clock (%v)", now, before)
	}
	if b := PolicyBlind(); b != "" {
		t.Errorf("PolicyBlind() = %q in a release build", b)
	}
}
