package hostexec

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestOutput(t *testing.T) {
	mk := func() *exec.Cmd { return exec.Command("sh", "-c", "echo out; echo err >&2") }
	if out, err := Output(t, mk); err != nil || string(out) != "out\n" {
		t.Fatalf("Output = %q, %v", out, err)
	}
	if out, err := CombinedOutput(t, mk); err != nil || string(out) != "out\nerr\n" {
		t.Fatalf("CombinedOutput = %q, %v", out, err)
	}
	if _, err := Output(t, func() *exec.Cmd { return exec.Command("sh", "-c", "exit 3") }); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("a failing command: err = %v", err)
	}
}

// A command that dies of SIGKILL by itself ran: its failure is the
// caller's, never a reason to run it twice.
func TestKilledCommandRunsOnce(t *testing.T) {
	f := filepath.Join(t.TempDir(), "runs")
	err := Run(t, func() *exec.Cmd { return exec.Command("sh", "-c", `echo run >> "$1"; kill -9 $$`, "sh", f) })
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("err = %v, want killed by SIGKILL", err)
	}
	if b, _ := os.ReadFile(f); string(b) != "run\n" {
		t.Fatalf("ran %q, want once", b)
	}
}

// named copies the sleep program to a file called name, so that a child
// can look like the emulator to killEmulatorChildren.
func named(t *testing.T, name string) string {
	t.Helper()
	src, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep program")
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// Only children whose executable is named qemu-* are killed, and each is
// reported once.
func TestKillEmulatorChildren(t *testing.T) {
	stuck := exec.Command(named(t, "qemu-arm-static"), "60")
	other := exec.Command(named(t, "sleep"), "60")
	for _, c := range []*exec.Cmd{stuck, other} {
		if err := start(c); err != nil {
			t.Fatal(err)
		}
	}
	defer other.Process.Kill()
	pids := killEmulatorChildren()
	if len(pids) != 1 || pids[0] != stuck.Process.Pid {
		t.Fatalf("killed %v, want only %d", pids, stuck.Process.Pid)
	}
	if err := stuck.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the emulator child: %v, want killed", err)
	}
	if !takeKilled(stuck.Process.Pid) || takeKilled(stuck.Process.Pid) {
		t.Fatal("the kill is not reported exactly once")
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the other child: %v, want it running", err)
	}
}

// A start whose child the watchdog killed is started again from a new
// command, and Run returns what that one did.
func TestRunStartsAgainAfterAKill(t *testing.T) {
	stuck := named(t, "qemu-arm-static")
	var made int
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if len(killEmulatorChildren()) > 0 {
				return
			}
		}
	}()
	out, err := Output(t, func() *exec.Cmd {
		made++
		if made == 1 {
			return exec.Command(stuck, "60")
		}
		return exec.Command("echo", "second")
	})
	if err != nil || string(out) != "second\n" || made != 2 {
		t.Fatalf("Output = %q, %v after %d commands, want the second's answer", out, err, made)
	}
}
