package state

import (
	"encoding/json"
	"log/slog"
	"sync"

	"openflare/agent/protocol"
	"openflare/internal/atomicfile"
)

// State is agent-state.json: what the agent knows about itself between runs
// (PROTOCOL 1.4). It has no server contract.
type State struct {
	NodeID string
	// Current is the version nginx runs (empty after the fallback took over).
	Current protocol.ConfigRef
	// Blocked is the version whose apply failed; it is not fetched again
	// until the server publishes something else (PROTOCOL 8.4).
	Blocked          protocol.ConfigRef
	BlockedReason    string
	LastError        string
	OpenRestyStatus  string
	OpenRestyMessage string
	// LastHeartbeatUnix is the time of the last beat the server accepted.
	LastHeartbeatUnix int64
	Channel           string
	// SelfTestError is why the last self-test of the data plane failed
	// (agent/selftest); empty once one passes. While set the node reports
	// unhealthy.
	SelfTestError string
	// RestartError is why the last restart the server asked for
	// (restart_openresty_now) failed; empty once one succeeds. While set
	// the node reports unhealthy: unlike LastError, no apply clears it.
	RestartError string
	// Workers is who the nginx workers run as, and why.
	Workers string
	// PagesError is why Pages projects failed to deploy, each named; empty
	// once they all deploy.
	PagesError string
	// PagesProjects lists the Pages projects of the version in force
	// ("3,7"), so a restart checks them again before any apply runs.
	PagesProjects string
}

// file is the on-disk layout, flat as upstream's agent-state.json keeps
// it, so state written by earlier releases still loads.
type file struct {
	NodeID            string `json:"node_id"`
	CurrentVersion    string `json:"current_version"`
	CurrentChecksum   string `json:"current_checksum"`
	BlockedVersion    string `json:"blocked_version"`
	BlockedChecksum   string `json:"blocked_checksum"`
	BlockedReason     string `json:"blocked_reason"`
	LastError         string `json:"last_error"`
	OpenRestyStatus   string `json:"openresty_status"`
	OpenRestyMessage  string `json:"openresty_message"`
	LastHeartbeatUnix int64  `json:"last_heartbeat_unix,omitempty"`
	Channel           string `json:"channel,omitempty"`
	SelfTestError     string `json:"probe_error,omitempty"` // the key older releases write and read
	RestartError      string `json:"restart_error,omitempty"`
	Workers           string `json:"nginx_workers,omitempty"`
	PagesError        string `json:"pages_error,omitempty"`
	PagesProjects     string `json:"pages_projects,omitempty"`
}

// MarshalJSON writes the flat layout.
func (s State) MarshalJSON() ([]byte, error) {
	return json.Marshal(file{
		NodeID: s.NodeID, CurrentVersion: s.Current.Version, CurrentChecksum: s.Current.Checksum,
		BlockedVersion: s.Blocked.Version, BlockedChecksum: s.Blocked.Checksum, BlockedReason: s.BlockedReason,
		LastError: s.LastError, OpenRestyStatus: s.OpenRestyStatus, OpenRestyMessage: s.OpenRestyMessage,
		LastHeartbeatUnix: s.LastHeartbeatUnix, Channel: s.Channel, SelfTestError: s.SelfTestError, RestartError: s.RestartError,
		Workers: s.Workers, PagesError: s.PagesError, PagesProjects: s.PagesProjects,
	})
}

// UnmarshalJSON reads the flat layout.
func (s *State) UnmarshalJSON(b []byte) error {
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*s = State{
		NodeID: f.NodeID, Current: protocol.ConfigRef{Version: f.CurrentVersion, Checksum: f.CurrentChecksum},
		Blocked: protocol.ConfigRef{Version: f.BlockedVersion, Checksum: f.BlockedChecksum}, BlockedReason: f.BlockedReason,
		LastError: f.LastError, OpenRestyStatus: f.OpenRestyStatus, OpenRestyMessage: f.OpenRestyMessage,
		LastHeartbeatUnix: f.LastHeartbeatUnix, Channel: f.Channel, SelfTestError: f.SelfTestError, RestartError: f.RestartError,
		Workers: f.Workers, PagesError: f.PagesError, PagesProjects: f.PagesProjects,
	}
	return nil
}

// Store is the agent state in memory and on disk. Updates are serialised and
// persisted before they become visible.
type Store struct {
	path string
	mu   sync.Mutex
	s    State
}

// Open loads the state file (a corrupt one is moved aside, see atomicfile.LoadJSON).
func Open(path string, log *slog.Logger) (*Store, error) {
	st := &Store{path: path}
	if err := atomicfile.LoadJSON(path, &st.s, log); err != nil {
		return nil, err
	}
	return st, nil
}

// Get returns a copy of the current state.
func (st *Store) Get() State {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.s
}

// Update applies f to a copy of the state and persists it; the in-memory
// state changes only if the write succeeded.
func (st *Store) Update(f func(*State)) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	next := st.s
	f(&next)
	if next == st.s {
		return nil
	}
	if err := atomicfile.SaveJSON(st.path, next); err != nil {
		return err
	}
	st.s = next
	return nil
}
