package agent

import (
	"runtime/debug"
	"runtime/metrics"
	"time"

	"openflare/internal/linux"
)

// releaseMemory hands the heap a piece of work grew to back to the system
// at once, when that work allocated much (an apply of a thousand routes, a
// group of 100 000 entries: tens of MiB briefly). A node at rest needs a
// few MiB, and the runtime's scavenger would take minutes to return the
// rest: on a 128 MiB router that is memory nginx could use. Work that
// allocated little (most beats queue a no-op apply check) leaves it alone:
// a forced collection each time would be most of the agent's idle CPU.
// since is allocated() before the work.
func releaseMemory(since uint64) {
	if allocated()-since > releaseAbove {
		releaseAll()
	}
}

// shedEvery is how often the agent at rest looks whether the binary's
// pages in its resident set grew (shedder).
const shedEvery = 30 * time.Second

// shedAbove is how far the binary's resident pages must grow past where
// they settled for the shedder to take them out again.
const shedAbove = 1 << 20

// shedder takes the binary's pages out of the resident set again once
// code run seldom (an update check, a GeoIP refresh, an HTTP beat after a
// dropped WebSocket) has grown them by shedAbove. Not on every tick: the
// kernel faults code back in 64 KiB around each page touched, so within
// a beat the periodic work has most of what a shed dropped back (5.4 of
// 6 MiB), and shedding every 30 s cost 11 ms of CPU a minute in faults
// for no lower resident set.
type shedder struct {
	// settled is the lowest file-backed resident size seen since the last
	// shed (0: none seen yet): the periodic work's own pages.
	settled int64
}

func (s *shedder) tick() {
	n, err := linux.FileResident()
	switch {
	case err != nil:
	case s.settled == 0 || n < s.settled:
		s.settled = n
	case n-s.settled > shedAbove:
		shedPages()
		s.settled = 0
	}
}

// shedPages takes the binary's code and constants out of the resident set
// (linux.DropExecutablePages); they stay in the page cache. Best effort:
// a kernel that refuses leaves them resident, as they always were.
func shedPages() { linux.DropExecutablePages() }

// releaseAll returns the free heap, and takes the binary's code and
// constants out of the resident set (linux.DropExecutablePages): most of
// them run once (start-up, rendering, landing), and at rest the agent runs
// a few hundred KiB of its 7 MiB, which fault back in from the page cache.
func releaseAll() {
	debug.FreeOSMemory()
	shedPages()
}

// allocated is the bytes allocated on the heap since the process began.
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// releaseAbove is how much a piece of work must have allocated for its
// memory to be handed back at once.
const releaseAbove = 4 << 20
