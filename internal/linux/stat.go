package linux

import (
	"errors"
	"fmt"
)

// CPUStat is the aggregate "cpu" line of /proc/stat, in USER_HZ ticks since
// boot. Fields a kernel does not print (steal before 2.6.11, guest before
// 2.6.24, guest_nice before 2.6.33) are zero, as is any field that is not a
// valid unsigned decimal.
type CPUStat struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal, Guest, GuestNice uint64
}

var errNoCPULine = errors.New(`no aggregate "cpu" line`)

// parseStat finds the aggregate "cpu" line. Per-CPU lines ("cpu0") and the
// rest of the file are ignored.
func parseStat(b []byte) (CPUStat, error) {
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		name, rest := nextField(line)
		if string(name) != "cpu" {
			continue
		}
		var v [10]uint64
		for i := range v {
			var f []byte
			f, rest = nextField(rest)
			if len(f) == 0 {
				break
			}
			v[i], _ = parseUint(f)
		}
		return CPUStat{
			User: v[0], Nice: v[1], System: v[2], Idle: v[3], IOWait: v[4],
			IRQ: v[5], SoftIRQ: v[6], Steal: v[7], Guest: v[8], GuestNice: v[9],
		}, nil
	}
	return CPUStat{}, errNoCPULine
}

// busy is the non-idle time. Guest and GuestNice are left out because the
// kernel already counts guest time inside User and Nice; adding them again
// (as upstream did by summing every column) overstates load on KVM hosts.
func (s CPUStat) busy() uint64 {
	t := addSat(s.User, s.Nice)
	t = addSat(t, s.System)
	t = addSat(t, s.IRQ)
	t = addSat(t, s.SoftIRQ)
	return addSat(t, s.Steal)
}

// idle counts iowait as idle: the CPU was free to run something else.
func (s CPUStat) idle() uint64 {
	return addSat(s.Idle, s.IOWait)
}

// CPUPercent returns the share of CPU time spent busy between two samples,
// in [0, 100]. A counter that went backwards (CPU hotplug, the NO_HZ iowait
// accounting quirk, a reboot between samples) contributes nothing rather than
// a negative delta, and an interval with no ticks yields 0, never NaN.
// Passing the zero CPUStat as prev gives the average since boot; a caller
// that wants 0 on its first sample must check for that itself.
func CPUPercent(prev, cur CPUStat) float64 {
	busy := float64(subFloor(cur.busy(), prev.busy()))
	total := busy + float64(subFloor(cur.idle(), prev.idle()))
	if total == 0 {
		return 0
	}
	// Dividing first keeps the result within 100: 100*busy can round up
	// past 100*total for large tick counts.
	return 100 * (busy / total)
}

// CPUStat reads the aggregate CPU line of <proc>/stat.
func (r *Reader) CPUStat() (CPUStat, error) {
	b, err := r.read(r.statPath)
	if err != nil {
		return CPUStat{}, err
	}
	s, err := parseStat(b)
	if err != nil {
		return s, fmt.Errorf("%s: %w", r.statPath, err)
	}
	return s, nil
}
