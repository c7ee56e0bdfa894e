// Package crosstest guards what ships to edge hardware.
//
// Always run (go test ./...): the dependency guard on the agent's import
// graph, the linux/arm64 size budget, the installer (cross/install.sh) in a
// fake root, and the target table against cross/targets.
//
// Run only with OPENFLARE_CROSS_TEST=1 (make cross-test, after make cross):
// every release binary in dist/ under qemu-user on its oldest supported CPU
// (-version, check, rendering integers wider than 32 bits), and a short
// end-to-end run of the arm64, armv7 and mips binaries against the test
// control plane.
package crosstest

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openflare/openflare-agent/testing/testsupport"
)

// target is one release binary, openflare-agent-linux-<name>.
type target struct {
	name    string
	goarch  string
	variant string // GOARM or GOMIPS, as in cross/targets; "-" for none
	// qemu runs the binary; "" means it runs natively (amd64 hosts).
	qemu string
	// cpu is the oldest CPU the build must run on (qemu -cpu), so an
	// instruction the target lacks fails the test with SIGILL instead of
	// passing on qemu's default, newest CPU.
	cpu string
}

var targets = []target{
	{name: "amd64", goarch: "amd64", variant: "-"},
	// Cortex-A53: Raspberry Pi 3 and Zero 2 in 64-bit mode, most arm64 boards.
	{name: "arm64", goarch: "arm64", variant: "-", qemu: "qemu-aarch64-static", cpu: "cortex-a53"},
	// Cortex-A7: Raspberry Pi 2, ipq40xx and many ARMv7 routers.
	{name: "armv7", goarch: "arm", variant: "7", qemu: "qemu-arm-static", cpu: "cortex-a7"},
	// ARM1176: Raspberry Pi 1 and Zero (ARMv6 with VFPv2).
	{name: "armv6", goarch: "arm", variant: "6", qemu: "qemu-arm-static", cpu: "arm1176"},
	// 24Kc: MIPS32r2 without an FPU, as in ath79 (big endian) and ramips
	// MT7621/MT76x8 (little endian) routers; hence GOMIPS=softfloat.
	{name: "mips", goarch: "mips", variant: "softfloat", qemu: "qemu-mips-static", cpu: "24Kc"},
	{name: "mipsle", goarch: "mipsle", variant: "softfloat", qemu: "qemu-mipsel-static", cpu: "24Kc"},
	{name: "riscv64", goarch: "riscv64", variant: "-", qemu: "qemu-riscv64-static"},
}

func (tg target) binaryName() string { return "openflare-agent-linux-" + tg.name }

// command is the argv that runs the binary at path with args.
func (tg target) command(path string, args ...string) []string {
	var argv []string
	if tg.qemu != "" {
		argv = append(argv, tg.qemu)
		if tg.cpu != "" {
			argv = append(argv, "-cpu", tg.cpu)
		}
	}
	return append(append(argv, path), args...)
}

func targetByName(t *testing.T, name string) target {
	t.Helper()
	for _, tg := range targets {
		if tg.name == name {
			return tg
		}
	}
	t.Fatalf("no target %q", name)
	return target{}
}

// The table above and cross/targets, which the build reads, list the same
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
	for _, tg := range targets {
		want = append(want, tg.name+" "+tg.goarch+" "+tg.variant)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("cross/targets lists\n%s\nthe test table\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
