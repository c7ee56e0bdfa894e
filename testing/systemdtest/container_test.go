package systemdtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"openflare/testing/testsupport"
)

// nspawnDir is where systemd-nspawn keeps its runtime files; this
// machine's /run may not be a tmpfs, so a tmpfs is mounted there (in the
// test's mount namespace only) and holds the container's overlay too.
const nspawnDir = "/run/systemd/nspawn"

// containerPath is PATH inside the container.
const containerPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// container is this machine's own system booted by systemd-nspawn on an
// overlay of its root file system.
type container struct {
	t      *testing.T
	name   string
	root   string // the merged tree the container runs on, seen from here
	upper  string // what the container changed
	nspawn *exec.Cmd
	exited chan struct{}
	log    *testsupport.Buffer
	pid1   int // the container's init, as this namespace sees it
}

// bootContainer boots multi-user.target in a container with out bound at
// /out, and returns once the target is reached.
func bootContainer(t *testing.T, out string) *container {
	t.Helper()
	c := &container{t: t, name: fmt.Sprintf("systemdtest-%d", os.Getpid()), log: &testsupport.Buffer{}}
	if err := os.MkdirAll(nspawnDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", nspawnDir, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", nspawnDir, err)
	}
	t.Cleanup(func() { syscall.Unmount(nspawnDir, syscall.MNT_DETACH) })
	base := filepath.Join(nspawnDir, c.name+".overlay")
	c.upper, c.root = filepath.Join(base, "upper"), filepath.Join(base, "root")
	work := filepath.Join(base, "work")
	for _, d := range []string{c.upper, c.root, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The root mount alone: /proc, /sys, /dev, /run and /tmp are the
	// container's own, which systemd-nspawn mounts.
	opts := "lowerdir=/,upperdir=" + c.upper + ",workdir=" + work
	if err := syscall.Mount("overlay", c.root, "overlay", 0, opts); err != nil {
		t.Skipf("cannot mount an overlay of / (%v): the container is not booted", err)
	}
	t.Cleanup(func() { syscall.Unmount(c.root, syscall.MNT_DETACH) })

	// A machine id of its own: the host's would make journald refuse to
	// keep the container's journal apart.
	id := make([]byte, 16)
	rand.Read(id)
	c.writeFile("/etc/machine-id", hex.EncodeToString(id)+"\n", 0o444)
	// A Docker-built image's policy-rc.d (exit 101) stops maintainer
	// scripts from starting services; a node has none.
	if _, err := os.Lstat(c.path("/usr/sbin/policy-rc.d")); err == nil {
		if err := os.Remove(c.path("/usr/sbin/policy-rc.d")); err != nil {
			t.Fatal(err)
		}
	}
	// Marks the end of the boot (ordered after multi-user.target).
	c.writeFile("/etc/systemd/system/systemdtest-booted.service", "[Unit]\nAfter=multi-user.target\n[Service]\nType=oneshot\nExecStart=/bin/touch /out/booted\n", 0o644)

	args := []string{"-q", "-D", c.root, "--register=no", "--machine=" + c.name,
		"--bind=" + out + ":/out", "--console=pipe"}
	// Under a systemd host, systemd-nspawn gets a delegated scope from
	// it; elsewhere (this init is not systemd) it stays in the test's
	// own control group.
	if fi, err := os.Stat("/run/systemd/system"); err != nil || !fi.IsDir() {
		args = append(args, "--keep-unit")
	}
	args = append(args, "-b", "systemd.unit=multi-user.target", "systemd.wants=systemdtest-booted.service",
		// What would run apt or dpkg while the test does, or wait for a
		// cloud's metadata server that this network has not.
		"systemd.mask=apt-daily.timer", "systemd.mask=apt-daily-upgrade.timer",
		"systemd.mask=apt-daily.service", "systemd.mask=apt-daily-upgrade.service",
		"systemd.mask=unattended-upgrades.service", "systemd.mask=man-db.timer",
		"systemd.mask=cloud-init-local.service", "systemd.mask=cloud-init.service",
		"systemd.mask=cloud-config.service", "systemd.mask=cloud-final.service")
	c.nspawn = exec.Command("systemd-nspawn", args...)
	c.nspawn.Stdout, c.nspawn.Stderr = c.log, c.log
	c.nspawn.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := c.nspawn.Start(); err != nil {
		t.Fatal(err)
	}
	c.exited = make(chan struct{})
	go func() {
		c.nspawn.Wait()
		close(c.exited)
	}()
	t.Cleanup(c.stop)

	deadline := time.Now().Add(90 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(out, "booted")); err == nil {
			break
		}
		select {
		case <-c.exited:
			t.Fatalf("systemd-nspawn exited (%v) before the container booted:\n%s", c.nspawn.ProcessState, c.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.pid1 = c.init()
			jobs, _ := c.exec(nil, "systemctl", "list-jobs", "--no-pager")
			t.Fatalf("the container did not reach multi-user.target within 90 s; jobs:\n%s\n%s", jobs, c.log.String())
		}
	}
	c.pid1 = c.init()
	t.Logf("container booted in %v (init pid %d here)", time.Since(start).Round(time.Millisecond), c.pid1)
	return c
}

// init finds the container's PID 1: systemd-nspawn's one child.
func (c *container) init() int {
	c.t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", c.nspawn.Process.Pid))
	var pids []int
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(s); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) != 1 {
		c.t.Fatalf("systemd-nspawn has children %v, want the container's init alone", pids)
	}
	return pids[0]
}

// path is where the container's file p is seen from here.
func (c *container) path(p string) string { return filepath.Join(c.root, p) }

func (c *container) writeFile(p, content string, mode os.FileMode) {
	c.t.Helper()
	if err := os.MkdirAll(filepath.Dir(c.path(p)), 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(c.path(p), []byte(content), mode); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Chmod(c.path(p), mode); err != nil {
		c.t.Fatal(err)
	}
}

func (c *container) readFile(p string) string {
	b, _ := os.ReadFile(c.path(p))
	return string(b)
}

// exec runs argv in the container (every namespace of its init, a clean
// environment plus env) as root, and returns its combined output.
func (c *container) exec(env []string, argv ...string) (string, error) {
	args := append([]string{"-t", strconv.Itoa(c.pid1), "-a", "--", "env", "-i",
		"PATH=" + containerPath, "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"}, env...)
	cmd := exec.Command("nsenter", append(args, argv...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// run is exec without extra environment, failing the test on an error.
func (c *container) run(argv ...string) string {
	c.t.Helper()
	out, err := c.exec(nil, argv...)
	if err != nil {
		c.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return out
}

// sh runs a shell script in the container and returns its output,
// trimmed; a failing script fails the test.
func (c *container) sh(script string) string {
	c.t.Helper()
	return strings.TrimSpace(c.run("sh", "-c", script))
}

// show is one property of a unit (systemctl show -P).
func (c *container) show(unit, prop string) string {
	c.t.Helper()
	return c.sh("systemctl show -P " + prop + " " + unit)
}

// stop powers the container off (SIGKILL to its init when that hangs).
func (c *container) stop() {
	select {
	case <-c.exited:
		return
	default:
	}
	c.exec(nil, "systemctl", "poweroff", "--no-block")
	select {
	case <-c.exited:
		return
	case <-time.After(30 * time.Second):
	}
	c.t.Logf("the container did not power off within 30 s: killed")
	if c.pid1 != 0 {
		syscall.Kill(c.pid1, syscall.SIGKILL)
	}
	c.nspawn.Process.Kill()
	<-c.exited
}

// for t.Cleanup: what the container's journal says about the agent when
// the test failed.
func (c *container) dumpOnFailure(t *testing.T) {
	if !t.Failed() {
		return
	}
	out, _ := c.exec(nil, "journalctl", "--no-pager", "-n", "150", "-u", "openflare-agent", "-u", "systemdtest-foreign-nginx")
	t.Logf("container journal:\n%s", out)
	if s := c.log.String(); s != "" {
		t.Logf("systemd-nspawn:\n%s", s)
	}
}
