// Package hostexec runs the host programs that tests compare the project's
// readers against (tar, xz, 7zz, mmdblookup, perl), so that the comparison
// holds also when the test binary is 32-bit ARM under qemu-user (make
// cross-test).
//
// qemu-user (7.2, Debian 12) emulates os/exec's vfork with fork, and now
// and then the forked emulator deadlocks before it reaches execve: the
// child sleeps on a futex for ever and (*exec.Cmd).Start blocks on the
// pipe that reports the exec. CI saw this in TestGNUTar and in
// TestInteropMaxMind; a loop of GNU tar runs under qemu-arm shows it about
// once in 7,000 forks. A Start that takes longer than stuckAfter has the
// children of this process that are still the emulator (their executable
// is named qemu-*) killed, and the command is started again. Run natively,
// no child is ever the emulator, so nothing is killed.
package hostexec

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"openflare/internal/linux"
)

// A healthy fork and exec takes milliseconds, also under qemu on a loaded
// machine.
const stuckAfter = 10 * time.Second

// tries bounds the starts of one command: one deadlock in 7,000 forks
// makes a second in a row already unlikely.
const tries = 3

var (
	mu     sync.Mutex
	killed = map[int]bool{} // children the watchdog killed, until Run sees them
)

// Run runs the command mk makes and waits for it, like (*exec.Cmd).Run.
// mk is called again for every start after a stuck one, so it must make a
// new command each time, with a new Stdin. Stdout and Stderr writers may
// be shared between the tries: a child killed before execve writes
// nothing.
func Run(t testing.TB, mk func() *exec.Cmd) error {
	t.Helper()
	var (
		cmd *exec.Cmd
		err error
	)
	for try := 1; try <= tries; try++ {
		cmd = mk()
		if err = start(cmd); err != nil {
			return err
		}
		err = cmd.Wait()
		if !takeKilled(cmd.Process.Pid) {
			return err
		}
		t.Logf("hostexec: %s: killed as a qemu-user fork stuck before execve (a start lasting over %v sets the watchdog off); starting it again (start %d of %d)", cmd.Path, stuckAfter, try, tries)
	}
	return fmt.Errorf("%s: stuck before execve in all %d starts: %w", cmd.Path, tries, err)
}

// Output runs the command mk makes and returns its standard output, like
// (*exec.Cmd).Output, except that the error never carries the standard
// error: callers that want it set cmd.Stderr.
func Output(t testing.TB, mk func() *exec.Cmd) ([]byte, error) {
	t.Helper()
	var out bytes.Buffer
	err := Run(t, func() *exec.Cmd {
		cmd := mk()
		cmd.Stdout = &out
		return cmd
	})
	return out.Bytes(), err
}

// CombinedOutput runs the command mk makes and returns its standard output
// and standard error together, like (*exec.Cmd).CombinedOutput.
func CombinedOutput(t testing.TB, mk func() *exec.Cmd) ([]byte, error) {
	t.Helper()
	var out bytes.Buffer
	err := Run(t, func() *exec.Cmd {
		cmd := mk()
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd
	})
	return out.Bytes(), err
}

// start is cmd.Start with a watchdog that kills stuck emulator children
// while it lasts.
func start(cmd *exec.Cmd) error {
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTimer(stuckAfter)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			killEmulatorChildren()
			tick.Reset(time.Second)
		}
	}()
	return cmd.Start()
}

func takeKilled(pid int) bool {
	mu.Lock()
	defer mu.Unlock()
	k := killed[pid]
	delete(killed, pid)
	return k
}

// killEmulatorChildren kills the children of this process whose executable
// is qemu-user's, and returns their pids. Under qemu-user the guest's
// getpid is the emulator's pid, and /proc of another pid is the real one.
// /proc is scanned whole: a Go process forks from any of its threads, and
// a thread's children file lists only its own.
func killEmulatorChildren() []int {
	self := os.Getpid()
	proc := linux.Default()
	all, _ := proc.PIDs()
	var pids []int
	for _, pid := range all {
		p, err := proc.Process(pid)
		if err != nil || p.PPID != self || p.Zombie() {
			continue
		}
		exe, err := os.Readlink(filepath.Join(proc.Proc, strconv.Itoa(pid), "exe"))
		if err != nil || !strings.HasPrefix(filepath.Base(exe), "qemu-") {
			continue
		}
		// Recorded before the kill: the child may exec and its Start
		// return in between, and its Run must still know to start again.
		mu.Lock()
		killed[pid] = true
		mu.Unlock()
		if syscall.Kill(pid, syscall.SIGKILL) != nil {
			takeKilled(pid)
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}
