//go:build testhooks

package testhook

import (
	"os"
	"syscall"
	"time"
)

var (
	target  = os.Getenv(CrashEnv)
	blind   = os.Getenv(PolicyBlindEnv)
	skew, _ = time.ParseDuration(os.Getenv(SkewEnv))
)

// Crash SIGKILLs the process when name is the configured step: no deferred
// function, no flush, exactly like a power cut at that point.
func Crash(name string) {
	if target != "" && name == target {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// Now is the wall clock plus the configured skew.
func Now() time.Time { return time.Now().Add(skew) }

// PolicyBlind is the directive name the template policy's reader is made
// to miss (PolicyBlindEnv), so a test proves the nginx probe catches it.
func PolicyBlind() string { return blind }
