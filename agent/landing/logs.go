package landing

import (
	"fmt"

	"openflare/agent/logrotate"
	"openflare/agent/osuser"
)

// Logs are the files nginx logs to: the agent creates them, keeps them
// from other users and within log_max_bytes (agent/logrotate).
func (p Paths) Logs() []string { return []string{p.AccessLog, p.ErrorLog, p.HTTPErrorLog} }

// prepareLogs creates the logs nginx is about to open, or restricts the
// ones there: nginx would create them world-readable.
func (t Tree) prepareLogs() error {
	perm := logrotate.PermFor(osuser.DB{})
	for _, p := range t.Paths.Logs() {
		if err := perm.Ensure(p); err != nil {
			return fmt.Errorf("prepare nginx log %s: %w", p, err)
		}
	}
	return nil
}
