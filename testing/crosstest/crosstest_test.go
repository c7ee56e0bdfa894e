package crosstest

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"openflare/testing/testsupport"
)

// Targets and cross/targets, which the build reads, list the same
// binaries with the same GOARCH and GOARM/GOMIPS.
func TestTargetsMatchBuildList(t *testing.T) {
	f, err := os.Open(filepath.Join(testsupport.ModuleRoot(t), "cross", "targets"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		got = append(got, strings.Join(strings.Fields(line), " "))
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, tg := range Targets {
		want = append(want, tg.Name+" "+tg.GOARCH+" "+tg.Variant)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("cross/targets lists\n%s\nthe test table\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
