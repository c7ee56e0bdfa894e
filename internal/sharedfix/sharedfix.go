// Package sharedfix finds the project's shared fixtures (../shared next to the
// repository). They are read in place, never copied into the repository, and a
// test that needs them is skipped, saying why, when they are absent.
package sharedfix

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns ../shared/<sub> relative to the repository root, or skips t.
func Dir(t testing.TB, sub string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Skipf("shared fixtures: %v", err)
	}
	dir := filepath.Join(filepath.Dir(root), "shared", sub)
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("shared fixtures absent (%s): %v", dir, err)
	}
	return dir
}

// repoRoot walks up from the working directory to the directory holding go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
