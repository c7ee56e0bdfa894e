package benchkit

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
)

// ProgramTB lets a measurement program use the test helpers of
// testing/nginxtest: a failure ends the program (Fatal), temp dirs and
// cleanups are kept until Close. The helpers call only the methods
// defined here.
type ProgramTB struct {
	testing.TB
	prefix   string
	dirs     []string
	cleanups []func()
}

// NewProgramTB names its temp dirs prefix-*.
func NewProgramTB(prefix string) *ProgramTB { return &ProgramTB{prefix: prefix} }

func (p *ProgramTB) Helper()                   {}
func (p *ProgramTB) Fatal(args ...any)         { Fatal(errors.New(fmt.Sprint(args...))) }
func (p *ProgramTB) Fatalf(f string, a ...any) { Fatal(fmt.Errorf(f, a...)) }
func (p *ProgramTB) Skip(args ...any)          { p.Fatal(args...) }
func (p *ProgramTB) Skipf(f string, a ...any)  { p.Fatalf(f, a...) }
func (p *ProgramTB) Cleanup(f func())          { p.cleanups = append(p.cleanups, f) }

func (p *ProgramTB) TempDir() string {
	dir, err := os.MkdirTemp("", p.prefix+"-")
	if err != nil {
		Fatal(err)
	}
	// nginx workers run as another user when this runs as root.
	os.Chmod(dir, 0o755)
	p.dirs = append(p.dirs, dir)
	return dir
}

// Close runs the cleanups, last first, and removes the temp dirs.
func (p *ProgramTB) Close() {
	for _, f := range slices.Backward(p.cleanups) {
		f()
	}
	for _, d := range p.dirs {
		os.RemoveAll(d)
	}
}
