// Package testsupport holds the helpers the project's tests share: where
// the module and the shared fixtures are, a locked output buffer, waiting
// on a condition, and a readable excerpt of where two texts differ.
package testsupport

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ModuleRoot is the directory holding go.mod, found from the working
// directory (a test runs in its package's directory).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if filepath.Dir(dir) == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = filepath.Dir(dir)
	}
}

// ReadFile returns a file's content, failing t when it cannot be read.
func ReadFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Buffer collects a process's output from several goroutines.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// WaitFor polls cond every 20 ms until it holds, failing t after timeout
// with what it waited for.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// DiffExcerpt shows the first differing line of two texts with three lines
// of context either side, or "" when they are equal.
func DiffExcerpt(want, got string) string {
	if want == got {
		return ""
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	const ctx = 3
	var b strings.Builder
	fmt.Fprintf(&b, "@@ first difference at line %d (want %d lines, got %d) @@\n", i+1, len(w), len(g))
	for k := max(i-ctx, 0); k < i; k++ {
		fmt.Fprintf(&b, "  %q\n", w[k])
	}
	for k := i; k < min(i+ctx, len(w)); k++ {
		fmt.Fprintf(&b, "- %q\n", w[k])
	}
	for k := i; k < min(i+ctx, len(g)); k++ {
		fmt.Fprintf(&b, "+ %q\n", g[k])
	}
	return b.String()
}
