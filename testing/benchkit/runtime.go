package benchkit

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// RunTime is the CPU time pids have run, from /proc/<pid>/schedstat, which
// counts nanoseconds where utime and stime count 10 ms ticks. A worker
// that is gone crashed, which the figures must not hide.
func RunTime(pids []int) (time.Duration, error) {
	sum, _, err := runTime(pids)
	return sum, err
}

// SettledRunTime is RunTime once every one of pids sleeps (in its event
// loop: an nginx worker done with a request's tail, its log phase and
// keep-alive handling), or after a second: a running task's count lags
// until it is scheduled out, so what a request cost would show in the
// next reading.
func SettledRunTime(pids []int) (time.Duration, error) {
	deadline := time.Now().Add(time.Second)
	for {
		sum, idle, err := runTime(pids)
		if err != nil || idle || time.Now().After(deadline) {
			return sum, err
		}
		time.Sleep(20 * time.Microsecond)
	}
}

func runTime(pids []int) (sum time.Duration, idle bool, err error) {
	idle = true
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, false, fmt.Errorf("nginx worker %d: %w", pid, err)
		}
		if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) {
			return 0, false, fmt.Errorf("nginx worker %d: /proc/%d/stat has no state", pid, pid)
		} else {
			idle = idle && stat[i+2] == 'S'
		}
		sched, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			return 0, false, fmt.Errorf("nginx worker %d: %w", pid, err)
		}
		f := strings.Fields(string(sched))
		if len(f) == 0 {
			return 0, false, fmt.Errorf("nginx worker %d: empty schedstat", pid)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("nginx worker %d: schedstat: %w", pid, err)
		}
		sum += time.Duration(ns)
	}
	return sum, idle, nil
}
