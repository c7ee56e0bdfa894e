package nginx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"openflare/internal/linux"
)

// Ctl runs one nginx binary against the agent's live main config. Start,
// stop-free reload and validation are the only primitives: the agent never
// runs a command the server sends.
type Ctl struct {
	Caps       *Caps
	MainConfig string // live main config path
	PIDFile    string
	ErrorLog   string // also passed as -e so -t never needs the compiled-in path
	Log        *slog.Logger
	// Settle bounds how long a reload or start may take to show new workers.
	Settle time.Duration
	// Proc is where process facts are read (zero: the real /proc).
	Proc linux.FS

	// previous is set by a reload and consumed by the Handover after it;
	// the agent drives one Ctl from one goroutine.
	previous generation0
}

func (n *Ctl) procs() procTable { return procTable{n.Proc} }

func (n *Ctl) settle() time.Duration {
	if n.Settle > 0 {
		return n.Settle
	}
	return 15 * time.Second
}

// run executes the binary and returns its combined output. nginx's daemon
// keeps stderr until it redirects it to the error log, so output is not
// waited for past the process's own exit.
func (n *Ctl) run(ctx context.Context, args ...string) (string, error) {
	return n.runLogging(ctx, n.ErrorLog, args...)
}

// runLogging is run with errorLog as nginx's start-up error log.
func (n *Ctl) runLogging(ctx context.Context, errorLog string, args ...string) (string, error) {
	if n.Caps.ErrorLogFlag && errorLog != "" {
		args = append([]string{"-e", errorLog}, args...)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.Caps.Binary, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// Test runs `-t -c conf`; the error carries nginx's own output.
func (n *Ctl) Test(ctx context.Context, conf string) error {
	out, err := n.run(ctx, "-t", "-c", conf)
	if err != nil {
		return fmt.Errorf("%s -t -c %s: %w: %s", filepath.Base(n.Caps.Binary), conf, err, out)
	}
	return nil
}

// PolicyParse runs `-t` on the template policy's copy of a main config
// (policy.ParseCopy, laid out by landing.Set.WriteParseCopy), with its
// start-up log beside it: nothing of it reaches the log the agent reads
// nginx's verdicts from.
func (n *Ctl) PolicyParse(ctx context.Context, conf string) error {
	out, err := n.runLogging(ctx, filepath.Join(filepath.Dir(conf), "error.log"), "-t", "-q", "-c", conf)
	if err != nil {
		return fmt.Errorf("%s -t of the policy parse: %w: %s", filepath.Base(n.Caps.Binary), err, out)
	}
	return nil
}

// MasterPID returns the pid of the running master, or 0 when nothing runs
// (no pid file, a stale pid, or a pid now used by another program).
func (n *Ctl) MasterPID() int {
	b, err := os.ReadFile(n.PIDFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if !n.procs().isMaster(pid) {
		return 0
	}
	return pid
}

// Running reports whether a master is running.
func (n *Ctl) Running() bool { return n.MasterPID() != 0 }

// Activate makes the live config take effect: reload a running master, or
// start one. The config must already have passed Test.
func (n *Ctl) Activate(ctx context.Context) error {
	if pid := n.MasterPID(); pid != 0 {
		return n.reload(ctx, pid)
	}
	return n.Start(ctx)
}

// reload sends SIGHUP and confirms the master re-read the configuration:
// a worker of the new generation runs. The previous workers are left to
// Handover, which hands the listeners over to the new ones once a new
// worker has answered the self-test.
//
// That the master refused the configuration is read from its process,
// never from text: nginx blocks every signal outside its sigsuspend, so a
// master whose SIGHUP is no longer pending and that waits in sigsuspend
// again has finished the reload, and without new workers it kept the old
// ones. Its reason is quoted from its own lines of the master's error log
// (its pid, at the start of a line nginx wrote); requests log elsewhere,
// so no client text is ever quoted or decides anything. Where /proc does
// not say (no /proc/<pid>/syscall), the master's own [emerg] line stands
// in for the fact.
func (n *Ctl) reload(ctx context.Context, pid int) error {
	n.clearStaleSockets()
	procs := n.procs()
	kids := procs.proc().Children(pid)
	before, children := workersOf(kids), pidsOf(kids)
	logMark := fileSize(n.ErrorLog)
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("reload: signal master %d: %w", pid, err)
	}
	sent := time.Now()
	deadline := sent.Add(n.settle())
	reason := func() string {
		if msg := distinct(n.logSince(logMark, pid, "emerg", "alert", "crit"), 4); msg != "" {
			return msg
		}
		return "nginx logged no reason"
	}
	for {
		if !procs.isMaster(pid) {
			return fmt.Errorf("reload: master %d exited: %s", pid, reason())
		}
		if hasNew(children, procs.children(pid)) {
			n.previous = generation0{master: pid, workers: before, since: sent}
			return nil
		}
		done, known := procs.reloadDone(pid)
		if !known {
			done = len(n.logSince(logMark, pid, "emerg")) > 0
			if done {
				// It may still be working through the config (a failed bind
				// is retried for about two seconds); let it finish so the
				// next reload starts clean.
				n.waitLogQuiet(ctx)
			}
		}
		// New workers start before the master waits again: look once more.
		if done && !hasNew(children, procs.children(pid)) {
			return fmt.Errorf("reload rejected by nginx (the master kept its previous workers): %s", reason())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("reload: no new worker processes after %s: %s", n.settle(), reason())
		}
		if err := sleep(ctx, reloadPoll(time.Since(sent))); err != nil {
			return err
		}
	}
}

// reloadPoll is how long a reload under way for elapsed waits before it
// looks again. The master re-parses the whole configuration first, from
// ten milliseconds for a few sites to half a second for a thousand: a
// fine poll at first keeps a small config's reload from waiting on the
// poll, and a coarser one later leaves a large config's parse the CPU,
// each poll costing a few /proc reads while seeing at most 1/16 late.
func reloadPoll(elapsed time.Duration) time.Duration {
	return min(max(elapsed/16, time.Millisecond), 5*time.Millisecond)
}

// generation0 is the previous generation's workers after a reload, until
// Handover has handed over to the new ones.
type generation0 struct {
	master  int
	workers []int
	since   time.Time
}

// handoverWait bounds how long handover waits for the previous workers to
// stop accepting.
const handoverWait = 5 * time.Second

// Handover makes the previous generation's workers stop accepting, once a
// new worker has answered the self-test, and waits until they have. nginx's
// master tells them itself, but only 100 ms after it started the new
// workers, and until then they take the new connections (they were first
// on the shared listening sockets): the new config would not yet be what
// clients get. SIGQUIT is the master's own graceful-shutdown signal: they
// close their listeners at once, finish the requests in flight, and leave;
// the master, which marks them leaving when its pause ends, does not
// replace them. Their exit, which long-lived connections may delay for
// minutes, is not waited for: it is logged at debug level.
func (n *Ctl) Handover(ctx context.Context) {
	prev := n.previous
	n.previous = generation0{}
	if len(prev.workers) == 0 {
		return
	}
	procs := n.procs()
	live := procs.workers(prev.master)
	for _, pid := range prev.workers {
		// Only a worker still of this master: a pid may be reused.
		if slices.Contains(live, pid) {
			syscall.Kill(pid, syscall.SIGQUIT)
		}
	}
	// A worker takes the signal within one event-loop pass; the deadline
	// only bounds a machine stalled far beyond that, and is logged, because
	// until the master's own signal reaches them those workers may still
	// answer with the old config.
	for deadline := time.Now().Add(handoverWait); !procs.retired(prev.workers); {
		if time.Now().After(deadline) {
			if n.Log != nil {
				n.Log.Warn("reload: previous workers still accepting", "workers", prev.workers, "after", handoverWait)
			}
			break
		}
		if sleep(ctx, time.Millisecond) != nil {
			break
		}
	}
	if n.Log != nil && n.Log.Enabled(ctx, slog.LevelDebug) {
		n.Log.Debug("reload: previous workers stopped accepting", "after", time.Since(prev.since))
		// The apply's context ends with the apply; this ends by itself.
		go n.logExit(context.WithoutCancel(ctx), prev)
	}
}

// logExit logs when the previous generation's workers have all exited, or
// that some still serve when the settle time is up.
func (n *Ctl) logExit(ctx context.Context, prev generation0) {
	deadline := prev.since.Add(n.settle())
	for n.procs().anyAlive(prev.workers) {
		if time.Now().After(deadline) || sleep(ctx, 50*time.Millisecond) != nil {
			n.Log.Debug("reload: previous workers still serving their connections", "workers", prev.workers, "after", time.Since(prev.since))
			return
		}
	}
	n.Log.Debug("reload: previous workers exited", "after", time.Since(prev.since))
}

// Reopen makes a running master reopen its log files (SIGUSR1, nginx's
// own signal for it): after the agent moved a full log aside, nginx goes
// on writing to a new file of that name instead of the one moved away. No
// master running is no error: the next start opens the logs anyway.
func (n *Ctl) Reopen() error {
	pid := n.MasterPID()
	if pid == 0 {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return fmt.Errorf("reopen logs: signal master %d: %w", pid, err)
	}
	return nil
}

// Start starts a master with the live config and waits for its workers.
func (n *Ctl) Start(ctx context.Context) error {
	// A new master has no previous generation to hand over from.
	n.previous = generation0{}
	// A stale pid file would make nginx refuse nothing, but it would make
	// our own liveness check read the wrong pid until nginx rewrites it.
	if n.MasterPID() == 0 {
		os.Remove(n.PIDFile)
	}
	n.clearStaleSockets()
	logMark := fileSize(n.ErrorLog)
	out, err := n.run(ctx, "-c", n.MainConfig)
	if err != nil {
		return fmt.Errorf("start %s -c %s: %w: %s", filepath.Base(n.Caps.Binary), n.MainConfig, err, out)
	}
	deadline := time.Now().Add(n.settle())
	for {
		if pid := n.MasterPID(); pid != 0 && len(n.procs().workers(pid)) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("start: nginx did not come up within %s: %s", n.settle(), distinct(n.logSince(logMark, 0, "emerg", "alert", "crit"), 4))
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// Restart stops the master and starts it again with the live config
// (restart_openresty_now). The config is validated first; should the new
// master still not come up, the caller starts the fallback
// (apply.Engine.Restart).
func (n *Ctl) Restart(ctx context.Context) error {
	if err := n.Test(ctx, n.MainConfig); err != nil {
		return fmt.Errorf("restart refused: %w", err)
	}
	if pid := n.MasterPID(); pid != 0 {
		// Graceful quit first; a master that will not finish in time is
		// terminated so the restart does not hang.
		syscall.Kill(pid, syscall.SIGQUIT)
		if !n.waitGone(ctx, pid, n.settle()) {
			syscall.Kill(pid, syscall.SIGTERM)
			if !n.waitGone(ctx, pid, 5*time.Second) {
				return fmt.Errorf("restart: master %d did not exit", pid)
			}
		}
	}
	return n.Start(ctx)
}

// waitLogQuiet waits until the error log has not grown for a second (at
// most ten seconds).
func (n *Ctl) waitLogQuiet(ctx context.Context) {
	size, quietSince := fileSize(n.ErrorLog), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if sleep(ctx, 100*time.Millisecond) != nil {
			return
		}
		if s := fileSize(n.ErrorLog); s != size {
			size, quietSince = s, time.Now()
		} else if time.Since(quietSince) >= time.Second {
			return
		}
	}
}

func (n *Ctl) waitGone(ctx context.Context, pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for n.procs().isMaster(pid) {
		if time.Now().After(deadline) || sleep(ctx, 20*time.Millisecond) != nil {
			return false
		}
	}
	return true
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// procTable reads nginx's processes from /proc.
type procTable struct{ fs linux.FS }

func (p procTable) proc() linux.FS {
	if p.fs.Proc == "" {
		return linux.Default()
	}
	return p.fs
}

// isMaster checks that pid is alive, not a zombie, and an nginx master.
func (p procTable) isMaster(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	pr, err := p.proc().Process(pid)
	return err == nil && !pr.Zombie() && strings.Contains(pr.Cmdline, "master process")
}

// children lists every process of a master. A new one after SIGHUP is the
// new generation: the master forks only once the configuration loaded.
// Workers cannot tell it alone: a new worker keeps its master's title
// until its modules' init is done (init_worker_by_lua, which loads the IP
// groups and geo snapshots), and the master waits in sigsuspend again
// 100 ms after forking it, so a slow init would read as a rejected reload.
// A worker respawned after a crash is new too; the self-test that follows
// tells the generations apart.
func (p procTable) children(master int) []int { return pidsOf(p.proc().Children(master)) }

// workers lists the live worker processes of a master.
func (p procTable) workers(master int) []int { return workersOf(p.proc().Children(master)) }

func pidsOf(procs []linux.Process) []int {
	var pids []int
	for _, c := range procs {
		pids = append(pids, c.PID)
	}
	return pids
}

func workersOf(procs []linux.Process) []int {
	var pids []int
	for _, c := range procs {
		if strings.Contains(c.Cmdline, "worker process") {
			pids = append(pids, c.PID)
		}
	}
	return pids
}

// WorkerPIDs lists the live worker processes of a master.
func WorkerPIDs(master int) []int { return procTable{}.workers(master) }

// retired reports whether every old worker has left or started its
// graceful exit (nginx retitles it "worker process is shutting down" as it
// closes its listening sockets), so new connections reach new workers only.
func (p procTable) retired(old []int) bool {
	for _, pid := range old {
		pr, err := p.proc().Process(pid)
		if err == nil && !pr.Zombie() && !strings.Contains(pr.Cmdline, "shutting down") {
			return false
		}
	}
	return true
}

// reloadDone reports whether the master has taken its SIGHUP and waits in
// sigsuspend again: the reload is over, with new workers or without.
// Order matters: the signal is seen taken first, so the wait seen after
// is a new one. known is false where /proc does not tell (no
// /proc/<pid>/syscall, or no right to read it).
func (p procTable) reloadDone(pid int) (done, known bool) {
	pending, err := p.proc().SignalPending(pid, int(syscall.SIGHUP))
	if err != nil {
		return false, false
	}
	if pending {
		return false, true
	}
	nr, blocked, err := p.proc().BlockedIn(pid)
	if err != nil {
		return false, false
	}
	return blocked && nr == unix.SYS_RT_SIGSUSPEND, true
}

// anyAlive reports whether any of pids still runs.
func (p procTable) anyAlive(pids []int) bool {
	for _, pid := range pids {
		if pr, err := p.proc().Process(pid); err == nil && !pr.Zombie() {
			return true
		}
	}
	return false
}

func hasNew(before, after []int) bool {
	old := make(map[int]bool, len(before))
	for _, p := range before {
		old[p] = true
	}
	for _, p := range after {
		if !old[p] {
			return true
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
