//go:build crashpoints

package crashpoint

import (
	"os"
	"syscall"
)

// Env names the step at which the process kills itself.
const Env = "OPENFLARE_CRASHPOINT"

var target = os.Getenv(Env)

// Hit SIGKILLs the process when name is the configured step: no deferred
// function, no flush, exactly like a power cut at that point.
func Hit(name string) {
	if target != "" && name == target {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
