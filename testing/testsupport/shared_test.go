package testsupport

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The decision itself: present fixtures are used whatever CI says; absent
// ones skip a developer's run and fail CI's, naming the path either way.
func TestSharedVerdict(t *testing.T) {
	present := t.TempDir()
	missing := filepath.Join(present, "fixtures", "render")
	for _, c := range []struct {
		dir  string
		ci   bool
		want sharedOutcome
	}{
		{present, false, sharedPresent},
		{present, true, sharedPresent},
		{missing, false, sharedSkip},
		{missing, true, sharedFail},
	} {
		got, msg := sharedVerdict(c.dir, c.ci)
		if got != c.want {
			t.Errorf("%s, ci %v: outcome %d, want %d (%q)", c.dir, c.ci, got, c.want, msg)
		}
		if got != sharedPresent && !strings.Contains(msg, c.dir) {
			t.Errorf("%s, ci %v: message %q does not name the path", c.dir, c.ci, msg)
		}
		if got == sharedFail && !strings.Contains(msg, "CI=true") {
			t.Errorf("message %q does not say CI=true is why it fails", msg)
		}
	}
}

// recorder is a testing.TB that records a skip or a failure and stops
// the goroutine it is called on, as the real one does.
type recorder struct {
	testing.TB
	skipped, failed, logged string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Log(args ...any)           { r.logged = fmt.Sprint(args...) }
func (r *recorder) Skip(args ...any)          { r.skipped = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatal(args ...any)         { r.failed = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatalf(f string, a ...any) { r.Fatal(fmt.Sprintf(f, a...)) }
func (r *recorder) Skipf(f string, a ...any)  { r.Skip(fmt.Sprintf(f, a...)) }

// run calls fn on a fresh recorder in its own goroutine and returns what
// fn returned (when it did) and the recorder.
func run(t *testing.T, fn func(testing.TB) string) (string, *recorder) {
	r := &recorder{TB: t}
	var got string
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = fn(r)
	}()
	<-done
	return got, r
}

// The helpers the tests call, under each value of CI: CI is "true" or
// it is not (unset, "1", "false" all mean a developer's run).
func TestSharedDirUnderCI(t *testing.T) {
	const absent = "fixtures/no-such-fixture-for-this-test"
	want := filepath.Join(filepath.Dir(ModuleRoot(t)), "shared", "fixtures", "no-such-fixture-for-this-test")
	for _, ci := range []string{"", "1", "false", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			got, r := run(t, func(tb testing.TB) string { return SharedDir(tb, absent) })
			if ci == "true" {
				if r.failed == "" || r.skipped != "" || !strings.Contains(r.failed, want) {
					t.Fatalf("missing fixtures under CI=true: failed %q, skipped %q, want a failure naming %s", r.failed, r.skipped, want)
				}
			} else if r.skipped == "" || r.failed != "" || !strings.Contains(r.skipped, want) {
				t.Fatalf("missing fixtures with CI=%q: failed %q, skipped %q, want a skip naming %s", ci, r.failed, r.skipped, want)
			}
			if got != "" {
				t.Fatalf("SharedDir returned %q for missing fixtures", got)
			}

			got, r = run(t, func(tb testing.TB) string { return SharedDirIfPresent(tb, absent) })
			if ci == "true" {
				if r.failed == "" || !strings.Contains(r.failed, want) {
					t.Fatalf("SharedDirIfPresent under CI=true: failed %q, want a failure naming %s", r.failed, want)
				}
			} else if r.failed != "" || r.skipped != "" || got != "" || !strings.Contains(r.logged, want) {
				t.Fatalf("SharedDirIfPresent with CI=%q: got %q, failed %q, skipped %q, logged %q", ci, got, r.failed, r.skipped, r.logged)
			}
		})
	}
}

// Present fixtures come back as their path, CI or not. The module's own
// directory stands in for them: ../shared/<name of the checkout> is
// ModuleRoot itself.
func TestSharedDirPresent(t *testing.T) {
	root := ModuleRoot(t)
	rel, err := filepath.Rel(filepath.Join(filepath.Dir(root), "shared"), root)
	if err != nil {
		t.Fatal(err)
	}
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		for _, fn := range []func(testing.TB, string) string{SharedDir, SharedDirIfPresent} {
			got, r := run(t, func(tb testing.TB) string { return fn(tb, filepath.ToSlash(rel)) })
			if got != root || r.failed != "" || r.skipped != "" {
				t.Fatalf("CI=%q: got %q (failed %q, skipped %q), want %s", ci, got, r.failed, r.skipped, root)
			}
		}
	}
}
