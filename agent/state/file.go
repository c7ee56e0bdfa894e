// Package state persists the agent's local state, agent-state.json, as a
// small JSON file that survives a crash at any instant (atomicfile.SaveJSON).
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"openflare/internal/atomicfile"
)

// Modes for state files and the directories holding them: the agent's
// own, never read by nginx workers.
const (
	FileMode fs.FileMode = atomicfile.PrivateFile
	DirMode  fs.FileMode = atomicfile.PrivateDir
)

// ReadJSON decodes path into v and never changes the file: for read-only
// tools such as `openflare-agent status`. A missing file is not an error.
func ReadJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
