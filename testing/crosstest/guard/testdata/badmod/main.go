// Command badmod is the dependency guard's negative fixture: it links one
// forbidden standard-library package (text/template) and one x/net package
// outside the allowlist (html/atom), next to allowed ones.
package main

import (
	"fmt"
	"os"
	"text/template"

	"golang.org/x/net/html/atom"
	"golang.org/x/sys/unix"
	"openflare/agent/backoff"
)

func main() {
	b := &backoff.Backoff{}
	fmt.Println(b.Next(), atom.Lookup([]byte("div")), unix.Getpid())
	template.Must(template.New("x").Parse("{{.}}")).Execute(os.Stdout, 1)
}
