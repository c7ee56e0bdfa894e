package command

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"openflare/agent/config"
	"openflare/agent/ipgroups"
	"openflare/agent/nginx"
	"openflare/agent/state"
)

// Status prints the node's state from local files only.
func Status(configPath string, args []string, stdout, stderr io.Writer) int {
	cfg, _, code := loadConfig("status", configPath, args, stderr, false)
	if cfg == nil {
		return code
	}
	fmt.Fprint(stdout, describe(cfg, time.Now()))
	return 0
}

// describe tells the node's state from local files only, so it works with
// the server down and while another agent process runs. It changes nothing.
func describe(cfg *config.Config, now time.Time) string {
	var b strings.Builder
	row := func(k, format string, args ...any) {
		fmt.Fprintf(&b, "%-18s %s\n", k+":", fmt.Sprintf(format, args...))
	}
	row("config", "%s", cfg.Path)
	files := cfg.Layout()
	var st state.State
	if err := state.ReadJSON(files.State, &st); err != nil {
		row("state", "unreadable: %v", err)
	}
	if st.Current.Version == "" {
		row("applied version", "none")
	} else {
		row("applied version", "%s (checksum %s)", st.Current.Version, st.Current.Checksum)
	}
	if st.Blocked.Version == "" {
		row("blocked version", "none")
	} else {
		row("blocked version", "%s (checksum %s): %s", st.Blocked.Version, st.Blocked.Checksum, st.BlockedReason)
	}
	row("last error", "%s", orNone(st.LastError))

	ctl := &nginx.Ctl{PIDFile: files.PID}
	health := orNone(st.OpenRestyStatus)
	if st.OpenRestyMessage != "" {
		health += ": " + st.OpenRestyMessage
	}
	if pid := ctl.MasterPID(); pid != 0 {
		row("nginx", "running, master pid %d, %d workers (last health %s)", pid, len(nginx.WorkerPIDs(pid)), health)
	} else {
		row("nginx", "not running (pid file %s; last health %s)", files.PID, health)
	}
	row("nginx workers", "%s", orNone(st.Workers))
	if st.SelfTestError != "" {
		row("self-test", "FAILED: %s", st.SelfTestError)
	} else {
		row("self-test", "passed (or not run yet)")
	}

	if st.LastHeartbeatUnix == 0 {
		row("last heartbeat", "never")
	} else {
		at := time.Unix(st.LastHeartbeatUnix, 0)
		row("last heartbeat", "%s (%s ago) over %s", at.UTC().Format(time.RFC3339), now.Sub(at).Round(time.Second), channelName(st.Channel))
	}

	sums, err := ipgroups.ReadChecksums(files.RuntimeConfigDir)
	switch {
	case err != nil:
		row("ip groups", "unreadable: %v", err)
	case len(sums) == 0:
		row("ip groups", "none")
	default:
		ids := slices.Sorted(func(yield func(string) bool) {
			for id := range sums {
				if !yield(id) {
					return
				}
			}
		})
		for i, id := range ids {
			k := ""
			if i == 0 {
				k = "ip groups"
			}
			fmt.Fprintf(&b, "%-18s group %s: %s\n", k+strings.Repeat(":", min(len(k), 1)), id, sums[id])
		}
	}
	releases := pagesReleases(files.PagesDir)
	if len(releases) == 0 {
		row("pages releases", "none")
	}
	for i, r := range releases {
		k := ""
		if i == 0 {
			k = "pages releases"
		}
		fmt.Fprintf(&b, "%-18s %s\n", k+strings.Repeat(":", min(len(k), 1)), r)
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func channelName(c string) string {
	if c == "websocket" {
		return "WebSocket"
	}
	return "HTTP"
}

// pagesReleases lists each Pages project's current release.
func pagesReleases(dir string) []string {
	projects, _ := filepath.Glob(filepath.Join(dir, "projects", "*", "current"))
	var out []string
	for _, cur := range projects {
		target, err := os.Readlink(cur)
		if err != nil {
			target = "(copied release)"
		}
		out = append(out, fmt.Sprintf("project %s: %s", filepath.Base(filepath.Dir(cur)), filepath.Base(target)))
	}
	return out
}
