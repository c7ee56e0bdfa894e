package systemdtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"unsafe"
)

// innerEnv marks the copy of the test binary that runs in the namespaces.
const innerEnv = "OPENFLARE_SYSTEMDTEST_INNER"

// skipReason, when set, is why no container can be booted here.
var skipReason string

// TestMain runs the tests in a mount and network namespace of their own
// (no PID namespace: on a host run by systemd, systemd-nspawn asks it for
// a scope and names the container's process by its PID, which must be the
// host's).
func TestMain(m *testing.M) {
	if os.Getenv(innerEnv) == "1" {
		if err := enterNamespaces(); err != nil {
			fmt.Fprintf(os.Stderr, "systemdtest: %v\n", err)
			os.Exit(2)
		}
		os.Exit(m.Run())
	}
	if skipReason = prerequisites(); skipReason != "" {
		os.Exit(m.Run())
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), innerEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		skipReason = fmt.Sprintf("cannot create a mount and network namespace here (%v): the container is not booted", err)
		os.Exit(m.Run())
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.ExitCode())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "systemdtest: %v\n", err)
		os.Exit(2)
	}
	os.Exit(0)
}

// prerequisites says why the container cannot boot here, or "".
func prerequisites() string {
	if os.Geteuid() != 0 {
		return "needs root: systemd-nspawn boots a container with this machine's systemd (CI's make test runs as root)"
	}
	for _, tool := range []struct{ name, pkg string }{
		{"systemd-nspawn", "systemd-container"},
		{"nsenter", "util-linux"},
		{"dpkg-deb", "dpkg"},
		{"nginx", "nginx"},
	} {
		if _, err := exec.LookPath(tool.name); err != nil {
			return fmt.Sprintf("%s not found (Debian package %s; make deps installs it)", tool.name, tool.pkg)
		}
	}
	for _, p := range []string{"/lib/systemd/systemd", "/usr/lib/systemd/systemd"} {
		if _, err := os.Stat(p); err == nil {
			return ""
		}
	}
	return "systemd is not installed: the container has no init to boot"
}

// enterNamespaces makes every mount private to this namespace (the
// overlay and tmpfs mounted later never reach the host) and brings its
// loopback up.
func enterNamespaces() error {
	if err := syscall.Mount("none", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var ifr struct {
		name  [syscall.IFNAMSIZ]byte
		flags uint16
		_     [24]byte
	}
	copy(ifr.name[:], "lo")
	for _, req := range []uintptr{syscall.SIOCGIFFLAGS, syscall.SIOCSIFFLAGS} {
		if req == syscall.SIOCSIFFLAGS {
			ifr.flags |= syscall.IFF_UP
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
			return fmt.Errorf("bring loopback up: %w", errno)
		}
	}
	return nil
}

// needContainer skips t where no container can boot.
func needContainer(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
