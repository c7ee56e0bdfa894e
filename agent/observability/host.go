package observability

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"os"
	"runtime"
	"time"

	"openflare/agent/protocol"
	"openflare/internal/linux"
)

// staticRefresh is how often the slow-changing profile facts (hostname, OS,
// kernel, CPU model) are read again. /proc/cpuinfo of a large server is
// hundreds of KiB, not worth parsing every few seconds for a value that
// changes with a reboot or an OS upgrade.
const staticRefresh = 10 * time.Minute

// hostSampler reads host metrics and the profile through internal/linux.
type hostSampler struct {
	fs      linux.FS
	reader  *linux.Reader
	dataDir string
	log     *slog.Logger

	prevCPU  linux.CPUStat
	havePrev bool
	// The last problems logged, so each is logged once, not every beat.
	sampleErr, staticErr string

	static   protocol.Profile // the fields that do not come from a Sample
	staticAt time.Time
}

func newHostSampler(fsys linux.FS, dataDir string, log *slog.Logger) *hostSampler {
	return &hostSampler{fs: fsys, reader: linux.NewReader(fsys), dataDir: dataDir, log: log}
}

// sample returns this beat's metrics and the current profile. Unreadable
// sources leave their fields zero; the beat goes out anyway.
func (h *hostSampler) sample(now time.Time) (*protocol.HostMetrics, *protocol.Profile) {
	s, err := h.reader.Sample(h.dataDir)
	note(h.log, &h.sampleErr, "host metrics incomplete", err)

	cpu := 0.0
	if h.havePrev {
		cpu = linux.CPUPercent(h.prevCPU, s.CPU)
	}
	h.prevCPU, h.havePrev = s.CPU, true

	memTotal, memUsed := s.Memory()
	hm := &protocol.HostMetrics{
		CapturedAtUnix:    now.Unix(),
		CPUUsagePercent:   cpu,
		MemoryUsedBytes:   toInt64(memUsed),
		MemoryTotalBytes:  toInt64(memTotal),
		StorageUsedBytes:  toInt64(s.Disk.Used),
		StorageTotalBytes: toInt64(s.Disk.Total),
		DiskReadBytes:     toInt64(s.IO.ReadBytes),
		DiskWriteBytes:    toInt64(s.IO.WriteBytes),
	}

	if h.staticAt.IsZero() || now.Sub(h.staticAt) >= staticRefresh || now.Before(h.staticAt) {
		h.static = h.readStatic()
		h.staticAt = now
	}
	p := h.static
	// The profile's memory is the one the metrics report against, so a
	// cgroup-limited agent does not show usage of a limit against the RAM
	// of the whole host.
	p.TotalMemoryBytes = hm.MemoryTotalBytes
	p.TotalDiskBytes = hm.StorageTotalBytes
	p.UptimeSeconds = toInt64(s.Uptime)
	p.ReportedAtUnix = now.Unix()
	return hm, &p
}

func (h *hostSampler) readStatic() protocol.Profile {
	p := protocol.Profile{Architecture: runtime.GOARCH, CPUCores: runtime.NumCPU()}
	var errs [4]error
	p.Hostname, errs[0] = os.Hostname()
	var osr linux.OSRelease
	osr, errs[1] = h.fs.OSRelease()
	p.OSName, p.OSVersion = osr.Name, osr.VersionID
	p.KernelVersion, errs[2] = h.fs.KernelRelease()
	var ci linux.CPUInfo
	ci, errs[3] = h.fs.CPUInfo()
	p.CPUModel = ci.Model
	note(h.log, &h.staticErr, "host profile incomplete", errors.Join(errs[:]...))
	return p
}

// note logs a sampling problem when it first appears or changes, not on
// every beat: a host without some /proc file stays without it.
func note(log *slog.Logger, last *string, what string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != "" && msg != *last {
		log.Warn(what, "err", err)
	}
	*last = msg
}

func toInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// fingerprint identifies a profile regardless of uptime and report time
// (PROTOCOL 2.1): the profile is sent again only when it changes.
func fingerprint(p protocol.Profile) string {
	p.UptimeSeconds, p.ReportedAtUnix = 0, 0
	data, _ := json.Marshal(p) // strings and integers always encode
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
