package testsupport

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// The project's shared fixtures and corpora (the render fixtures captured
// from the real OpenFlare server, the libinjection corpus, the stock main
// template) live in ../shared beside the repository and are read in place,
// never copied in. A plain clone has no ../shared: there the tests that
// need it are skipped, saying which path they looked for. CI has it, so
// under CI=true its absence fails those tests instead: the
// byte-compatibility tests behind the README cannot pass by being skipped.

// InCI reports whether the environment variable CI is "true" (.ci/run
// sets it).
func InCI() bool { return os.Getenv("CI") == "true" }

// SharedDir returns ../shared/<sub> beside the repository. When it is
// absent the test is skipped, naming the path, or fails under CI=true.
func SharedDir(t testing.TB, sub string) string {
	t.Helper()
	return sharedOr(t, sub, t.Skip)
}

// SharedDirIfPresent is SharedDir for a test that still has work without
// the fixtures (a fuzz target they only seed): "" when they are absent,
// logged, and the same failure under CI=true.
func SharedDirIfPresent(t testing.TB, sub string) string {
	t.Helper()
	return sharedOr(t, sub, t.Log)
}

// sharedOr is ../shared/<sub>, or, when it is absent, "" after absent has
// been told why (a skip, a log line); under CI=true absence fails.
func sharedOr(t testing.TB, sub string, absent func(...any)) string {
	t.Helper()
	dir := sharedPath(t, sub)
	switch verdict, msg := sharedVerdict(dir, InCI()); verdict {
	case sharedFail:
		t.Fatal(msg)
	case sharedSkip:
		absent(msg)
		return ""
	}
	return dir
}

// sharedPath is ../shared/<sub> beside the module root.
func sharedPath(t testing.TB, sub string) string {
	t.Helper()
	return filepath.Join(filepath.Dir(ModuleRoot(t)), "shared", filepath.FromSlash(sub))
}

type sharedOutcome int

const (
	sharedPresent sharedOutcome = iota
	sharedSkip
	sharedFail
)

// sharedVerdict decides what a test does about the fixtures at dir: use
// them when they are there; otherwise skip, or fail when ci is set. msg
// names the path and why it is wanted.
func sharedVerdict(dir string, ci bool) (sharedOutcome, string) {
	_, err := os.Stat(dir)
	if err == nil {
		return sharedPresent, ""
	}
	why := ""
	if !errors.Is(err, fs.ErrNotExist) {
		why = " (" + err.Error() + ")"
	}
	if ci {
		return sharedFail, "shared fixtures absent under CI=true: " + dir + why +
			"; CI must have ../shared beside the repository (docs/fixtures.md)"
	}
	return sharedSkip, "shared fixtures absent: " + dir + why +
		"; they live in ../shared beside the repository (docs/fixtures.md)"
}
