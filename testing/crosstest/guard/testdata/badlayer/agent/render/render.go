// Package render breaks the layering on purpose: a renderer that runs a
// process, reads the clock and opens a socket (layers_test.go).
package render

import (
	"net"
	"os/exec"
	"time"
)

func Bad() {
	exec.Command("true").Run()
	_ = time.Now()
	net.Dial("tcp", "127.0.0.1:9")
}
