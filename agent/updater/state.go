package updater

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"openflare/internal/atomicfile"
)

// fileState is <exe>.update.json: what survives the exec into a new binary and
// a crash of it.
type fileState struct {
	// Pending is set from just before the swap until the new version's
	// first successful heartbeat, or its rollback.
	Pending *Pending `json:"pending,omitempty"`
	// Failed lists versions that failed their trial or were rolled back:
	// never tried again, except once a version rolled back only for want
	// of a heartbeat (Failure.Unconfirmed). The newest last, at most
	// maxFailed.
	Failed []Failure `json:"failed,omitempty"`
	// LastAutoCheckUnix spaces auto_update's release lookups an hour apart
	// across restarts too.
	LastAutoCheckUnix int64 `json:"last_auto_check_unix,omitempty"`
}

// Pending is a swapped-in version not yet confirmed by a heartbeat.
type Pending struct {
	Version  string `json:"version"`
	Previous string `json:"previous"`
	// Boots counts the new binary's starts: the third start means it
	// crashed twice before confirming, and rolls back.
	Boots int `json:"boots"`
}

// Failure is one version that did not survive: failed its trial run,
// could not be executed, or was rolled back.
type Failure struct {
	Version string `json:"version"`
	From    string `json:"from"` // the version that stayed, or came back
	Reason  string `json:"reason"`
	AtUnix  int64  `json:"at_unix"`
	// Unconfirmed: rolled back only because no heartbeat succeeded in
	// time, which a server outage alone causes too. Once the restored
	// version has reached the server (Reached), the server was up and
	// the version gets one more try; a second such rollback is final.
	Unconfirmed bool `json:"unconfirmed,omitempty"`
	Reached     bool `json:"reached,omitempty"`
}

// maxFailed bounds the list: a version string each, kept for good.
const maxFailed = 32

func loadState(path string) (fileState, error) {
	var st fileState
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read update state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return fileState{}, fmt.Errorf("read update state %s: %w", path, err)
	}
	return st, nil
}

func saveState(path string, st fileState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("save update state: %w", err)
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("save update state: %w", err)
	}
	return nil
}
