package selftest

import (
	"path/filepath"
	"strings"
	"testing"
)

// A block before its stamp names no target; stamped, it names its socket
// (within the socket-path limit below a deep data_dir) and generation,
// and Find reads back exactly what Stamp wrote.
func TestStampAndFind(t *testing.T) {
	dir := "/var/lib/openflare/var/run/selftest"
	text := "http {\n" + Block(dir, "") + "}\n"
	if _, ok := Find(text); ok {
		t.Fatal("an unstamped block names a target")
	}
	stamped := Stamp(text, "0123456789abcdef")
	got, ok := Find(stamped)
	if !ok || got.Generation != "0123456789abcdef" || got.Socket != filepath.Join(dir, "01234567") {
		t.Fatalf("found %+v %v in\n%s", got, ok, stamped)
	}
	if strings.Contains(stamped, slot) {
		t.Fatalf("slot left:\n%s", stamped)
	}
	if Stamp("no block", "0123") != "no block" {
		t.Fatal("text without a block changed")
	}
	if _, ok := Find("server_name openflare-agent-probe;\nlisten 127.79.1.1:18081;\n"); ok {
		t.Fatal("an older release's TCP block names a socket")
	}
}
