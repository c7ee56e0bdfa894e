// Package xztest is what the LZMA and xz decoder tests share: the xz tool,
// which makes their reference data, and sample input that exercises every
// kind of literal and match.
package xztest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Path returns the xz tool's path, skipping the test when it is missing.
func Path(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("xz")
	if err != nil {
		t.Skip("xz tool not installed (apt-get install xz-utils): cannot make reference data")
	}
	return p
}

// Sample returns n bytes alternating between word-like text, runs and
// random stretches, so that literals, short and long matches all occur.
// The same seed gives the same bytes.
func Sample(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	words := []string{"static", "site", "openflare", "nginx", "the", "a", "<div class=\"x\">", "</div>\n", "function", "return", "0123456789", "\t", " "}
	var b bytes.Buffer
	for b.Len() < n {
		switch r.IntN(10) {
		case 0:
			k := r.IntN(4096)
			for i := 0; i < k; i++ {
				b.WriteByte(byte(r.Uint32()))
			}
		case 1:
			b.Write(bytes.Repeat([]byte{byte(r.IntN(256))}, r.IntN(600)))
		default:
			for i := r.IntN(400); i > 0; i-- {
				b.WriteString(words[r.IntN(len(words))])
				b.WriteByte(' ')
			}
		}
	}
	return b.Bytes()[:n]
}

// Within runs a decode, failing the test when it panics or hangs (a
// hostile input must end in an error, never in either), and returns its
// error.
func Within(t testing.TB, name string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("panic: %v", p)
			}
		}()
		done <- f()
	}()
	select {
	case err := <-done:
		if err != nil && strings.HasPrefix(err.Error(), "panic:") {
			t.Fatalf("%s: %v", name, err)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: decoding hangs", name)
		return nil
	}
}
