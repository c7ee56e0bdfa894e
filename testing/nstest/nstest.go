// Package nstest runs a test binary inside private user, network, PID and mount
// namespaces, so tests can bind ports 80/443, start a real nginx and talk to it
// over loopback without root, without touching the host's ports and without
// clashing with test packages running in parallel.
//
// A package opts in from TestMain:
//
//	func TestMain(m *testing.M) { nstest.Main(m) }
//
// MainRoot is the production-like mode: when the test runs as real root
// (as CI does), no user namespace is made, so nginx's master is root and
// its workers switch to an unprivileged user, as on a VPS. Non-root
// developers, or OPENFLARE_NSTEST_MODE=userns, get the user namespace.
//
// The binary re-executes itself twice: a first copy becomes PID 1 of the new
// PID namespace and only reaps orphans (nginx daemonises, so its master is
// re-parented there); a second copy runs the tests. When the tests end, PID 1
// exits and the kernel kills whatever is left in the namespace, so a crashed
// or timed-out test never leaves an nginx behind.
package nstest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	roleEnv  = "OPENFLARE_NSTEST_ROLE"
	roleInit = "init"
	roleRun  = "run"
	// ModeEnv set to "userns" keeps MainRoot in a user namespace even as
	// root; "root" is what MainRoot uses as root otherwise.
	ModeEnv = "OPENFLARE_NSTEST_MODE"
	// hostMountNSEnv names the mount namespace the test binary started
	// in, for PrivateMount to compare with.
	hostMountNSEnv = "OPENFLARE_NSTEST_HOST_MNTNS"
)

// Inside reports whether this process runs inside the test namespaces.
func Inside() bool { return os.Getenv(roleEnv) == roleRun }

// RealRoot reports whether the tests run as real root (no user namespace):
// nginx workers then run as another user, as in production.
func RealRoot() bool { return Inside() && os.Getenv(ModeEnv) == "root" }

// Main runs m inside the namespaces and exits with its code.
func Main(m *testing.M) { os.Exit(Run(m.Run, nil)) }

// MainRoot is Main without the user namespace when the caller is root and
// OPENFLARE_NSTEST_MODE is not "userns".
func MainRoot(m *testing.M) {
	if os.Getenv(roleEnv) != "" {
		os.Exit(Run(m.Run, nil))
	}
	mode := "userns"
	if os.Geteuid() == 0 && os.Getenv(ModeEnv) != "userns" {
		mode = "root"
	}
	os.Setenv(ModeEnv, mode)
	cleanup := func() {}
	if mode == "root" {
		var err error
		if cleanup, err = traversableTempRoot(); err != nil {
			fmt.Fprintf(os.Stderr, "nstest: %v\n", err)
			os.Exit(2)
		}
	}
	code := Run(m.Run, nil)
	cleanup()
	os.Exit(code)
}

// traversableTempRoot makes sure the tests' temp root is one nginx workers
// (another user) can pass through: when $TMPDIR (or /tmp) is closed to
// other users, the tests get a private 0711 directory under the first
// open one of /var/tmp and /run instead.
func traversableTempRoot() (func(), error) {
	if fi, err := os.Stat(os.TempDir()); err == nil && fi.Mode().Perm()&0o001 != 0 {
		return func() {}, nil
	}
	for _, base := range []string{"/var/tmp", "/run"} {
		fi, err := os.Stat(base)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			continue
		}
		dir, err := os.MkdirTemp(base, "openflare-tests-")
		if err != nil {
			continue
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			os.RemoveAll(dir)
			continue
		}
		os.Setenv("TMPDIR", dir)
		return func() { os.RemoveAll(dir) }, nil
	}
	return nil, fmt.Errorf("%s is closed to other users and neither /var/tmp nor /run is open: nginx workers could not reach the tests' files", os.TempDir())
}

// Run executes run inside the namespaces and returns its exit code. The
// current binary re-executes itself (with the same arguments) to get there,
// so everything before Run must be repeatable. Files in extra are passed to
// the process that calls run, as fds 3, 4, ... (listeners opened on the host
// side, for example).
func Run(run func() int, extra []*os.File) int {
	switch os.Getenv(roleEnv) {
	case roleRun:
		return run()
	case roleInit:
		return initMain(len(extra))
	default:
		return spawnInit(extra)
	}
}

// spawnInit starts PID 1 of fresh user/net/pid/mount namespaces, mapping the
// caller's uid and gid to root inside.
func spawnInit(extra []*os.File) int {
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = extra
	cmd.Env = append(os.Environ(), roleEnv+"="+roleInit)
	if ns, err := os.Readlink("/proc/self/ns/mnt"); err == nil {
		cmd.Env = append(cmd.Env, hostMountNSEnv+"="+ns)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if os.Getenv(ModeEnv) == "root" {
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
			Pdeathsig:  syscall.SIGKILL,
		}
	}
	// go test's timeout signals the process group; pass interrupts on so the
	// namespace winds down instead of being orphaned.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "nstest: cannot create user/network namespaces (unprivileged user namespaces must be enabled): %v\n", err)
		return 2
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "nstest: %v\n", err)
		return 2
	}
	return 0
}

// initMain is PID 1: it prepares the namespaces, starts the test runner and
// reaps every child until the runner exits.
func initMain(extra int) int {
	if err := setupNamespaces(); err != nil {
		fmt.Fprintf(os.Stderr, "nstest: %v\n", err)
		return 2
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	for i := 0; i < extra; i++ {
		cmd.ExtraFiles = append(cmd.ExtraFiles, os.NewFile(uintptr(3+i), "inherited"))
	}
	cmd.Env = append(os.Environ(), roleEnv+"="+roleRun)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "nstest: start runner: %v\n", err)
		return 2
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	runner := cmd.Process.Pid
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "nstest: wait: %v\n", err)
			return 2
		}
		if pid != runner {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}

// setupNamespaces brings loopback up and mounts a /proc that shows this PID
// namespace, so pid files and /proc/<pid> agree for the agent and nginx.
func setupNamespaces() error {
	if err := linkUp("lo"); err != nil {
		return fmt.Errorf("bring loopback up: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc for the PID namespace: %w", err)
	}
	return nil
}

func linkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// TraversableTempDir is t.TempDir made traversable (not listable) by other
// users, up to the temp root, as an operator's data_dir parent is: Go makes
// a test's temp dirs 0700, which nginx workers running as another user
// cannot pass.
func TraversableTempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for p := dir; p != filepath.Clean(os.TempDir()) && p != filepath.Dir(p); p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, fi.Mode().Perm()|0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// PrivateMount returns nil when a mount made now on path stays in the
// tests' namespaces: this process is in another mount namespace than the
// one the test binary started in, and the mount holding path is not
// shared, so the new mount propagates to no peer (the host's included). It
// goes when the namespace does, or at its unmount.
func PrivateMount(path string) error {
	host := os.Getenv(hostMountNSEnv)
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("read this process's mount namespace: %w", err)
	}
	if !Inside() || host == "" || self == host {
		return fmt.Errorf("not in a mount namespace of the tests' own (this one is %s, the test binary started in %q)", self, host)
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read the mount table: %w", err)
	}
	// The mount holding path: the last one listed on the longest mount
	// point above it (a later mount on the same point hides the earlier).
	var point, tags string
	for _, line := range strings.Split(string(info), "\n") {
		pre, _, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if !ok || len(f) < 6 {
			continue
		}
		mp := f[4]
		if (mp == "/" || path == mp || strings.HasPrefix(path, mp+"/")) && len(mp) >= len(point) {
			point, tags = mp, strings.Join(f[6:], " ")
		}
	}
	if point == "" {
		return fmt.Errorf("no mount holds %s", path)
	}
	if strings.Contains(tags, "shared:") {
		return fmt.Errorf("the mount on %s, which holds %s, is shared (%s): a mount below it would propagate", point, path, tags)
	}
	return nil
}
