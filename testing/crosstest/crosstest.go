// Package crosstest guards what ships to edge hardware. Its packages:
//
//   - guard: always run (go test ./...): the dependency guard on the
//     agent's import graph, the layering rules of docs/ARCHITECTURE.md and
//     the linux/arm64 size budget.
//   - install: always run: the installer (cross/install.sh) in a fake root
//     and the .deb and .ipk packages (cross/package.sh) built from a
//     stand-in binary.
//   - qemu: only with OPENFLARE_CROSS_TEST=1 (make cross-test, after make
//     cross): every release binary in dist/ under qemu-user on its oldest
//     supported CPU (-version, check, rendering integers wider than 32
//     bits), and a short end-to-end run of the arm64, armv7 and mips
//     binaries against the test control plane.
//
// This package holds what they share: the release targets (checked
// against cross/targets here) and where the release binaries are.
package crosstest

import (
	"os"
	"path/filepath"
	"testing"

	"openflare/testing/testsupport"
)

// Target is one release binary, openflare-agent-linux-<Name>.
type Target struct {
	Name    string
	GOARCH  string
	Variant string // GOARM or GOMIPS, as in cross/targets; "-" for none
	// Qemu runs the binary; "" means it runs natively (amd64 hosts).
	Qemu string
	// CPU is the oldest CPU the build must run on (qemu -cpu), so an
	// instruction the target lacks fails the test with SIGILL instead of
	// passing on qemu's default, newest CPU.
	CPU string
}

// Targets are the release binaries, in cross/targets' order.
var Targets = []Target{
	{Name: "amd64", GOARCH: "amd64", Variant: "-"},
	// Cortex-A53: Raspberry Pi 3 and Zero 2 in 64-bit mode, most arm64 boards.
	{Name: "arm64", GOARCH: "arm64", Variant: "-", Qemu: "qemu-aarch64-static", CPU: "cortex-a53"},
	// Cortex-A7: Raspberry Pi 2, ipq40xx and many ARMv7 routers.
	{Name: "armv7", GOARCH: "arm", Variant: "7", Qemu: "qemu-arm-static", CPU: "cortex-a7"},
	// ARM1176: Raspberry Pi 1 and Zero (ARMv6 with VFPv2).
	{Name: "armv6", GOARCH: "arm", Variant: "6", Qemu: "qemu-arm-static", CPU: "arm1176"},
	// 24Kc: MIPS32r2 without an FPU, as in ath79 (big endian) and ramips
	// MT7621/MT76x8 (little endian) routers; hence GOMIPS=softfloat.
	{Name: "mips", GOARCH: "mips", Variant: "softfloat", Qemu: "qemu-mips-static", CPU: "24Kc"},
	{Name: "mipsle", GOARCH: "mipsle", Variant: "softfloat", Qemu: "qemu-mipsel-static", CPU: "24Kc"},
	{Name: "riscv64", GOARCH: "riscv64", Variant: "-", Qemu: "qemu-riscv64-static"},
}

// BinaryName is the release binary's file name in dist/.
func (tg Target) BinaryName() string { return "openflare-agent-linux-" + tg.Name }

// Command is the argv that runs the binary at path with args.
func (tg Target) Command(path string, args ...string) []string {
	var argv []string
	if tg.Qemu != "" {
		argv = append(argv, tg.Qemu)
		if tg.CPU != "" {
			argv = append(argv, "-cpu", tg.CPU)
		}
	}
	return append(append(argv, path), args...)
}

// TargetByName is the target called name.
func TargetByName(t testing.TB, name string) Target {
	t.Helper()
	for _, tg := range Targets {
		if tg.Name == name {
			return tg
		}
	}
	t.Fatalf("no target %q", name)
	return Target{}
}

// Dist skips unless the cross test was asked for, and returns the
// directory holding the release binaries (make cross).
func Dist(t testing.TB) string {
	t.Helper()
	if os.Getenv("OPENFLARE_CROSS_TEST") != "1" {
		t.Skip("runs the release binaries under qemu-user: set OPENFLARE_CROSS_TEST=1 (make cross-test)")
	}
	if dist := os.Getenv("OPENFLARE_CROSS_DIST"); dist != "" {
		return dist
	}
	return filepath.Join(testsupport.ModuleRoot(t), "dist")
}
