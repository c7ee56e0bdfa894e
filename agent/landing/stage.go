package landing

import (
	"fmt"
	"io"
	"os"

	"openflare/agent/protocol"
	"openflare/internal/atomicfile"
)

// Bounds on what one version's support files may put on disk while they
// wait in a Stage. A certificate chain and its key are a few KiB, an error
// page tens; the decoder already bounds one file by the memory limit
// (controlplane.Budgets.Active, 8 MiB at 32 MiB), so the per-file bound is
// that budget's ceiling. 256 MiB is 10 000 large chains, and what a node's
// storage holds twice over (staged, then landed) without filling a small
// router's flash by surprise.
const (
	MaxSupportFileBytes = 64 << 20
	MaxSupportBytes     = 256 << 20
)

// Stage holds one fetched version's shipped support files on disk, as the
// E4 reply is decoded, until the version is rendered and landed: memory
// holds their paths and where each lies in the stage. They lie end to end
// in one file, unlinked as soon as created, so the stage costs one file
// however many certificates there are, no path of the server's ever names
// anything on disk (landing.Place judges paths later, as for any support
// file), and a crash leaves nothing staged behind.
type Stage struct {
	dir   string
	file  *os.File
	files []protocol.SupportFile
	size  int64
}

// NewStage empties dir (what an older release left) and makes it the
// agent's own (0700), keys passing through it.
func NewStage(dir string) (*Stage, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("clear support-file stage: %w", err)
	}
	if err := atomicfile.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("support-file stage: %w", err)
	}
	f, err := os.CreateTemp(dir, "support-files-")
	if err != nil {
		return nil, fmt.Errorf("support-file stage: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("support-file stage: %w", err)
	}
	return &Stage{dir: dir, file: f}, nil
}

// Add appends f's content to the stage.
func (s *Stage) Add(f protocol.SupportFile) error {
	size := int64(len(f.Content))
	switch {
	case size > MaxSupportFileBytes:
		return fmt.Errorf("support file %q holds %d bytes, over the %d MiB one support file may hold", protocol.Bound(f.Path, 128), size, MaxSupportFileBytes>>20)
	case len(s.files) >= MaxSupportFiles:
		return fmt.Errorf("more than %d support files", MaxSupportFiles)
	case s.size+size > MaxSupportBytes:
		return fmt.Errorf("support files over %d MiB", MaxSupportBytes>>20)
	}
	// WriteString hands the string's bytes over without a copy.
	if _, err := s.file.WriteString(f.Content); err != nil {
		return fmt.Errorf("stage support file %q: %w", protocol.Bound(f.Path, 128), err)
	}
	s.files = append(s.files, protocol.SupportFile{Path: f.Path, Staged: io.NewSectionReader(s.file, s.size, size)})
	s.size += size
	return nil
}

// Files are the staged files in the order they came, a path shipped twice
// twice (the renderer keeps the last); their content is read from Staged.
func (s *Stage) Files() []protocol.SupportFile { return s.files }

// Remove deletes the stage; its files cannot be read any more.
func (s *Stage) Remove() error {
	s.file.Close()
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("remove support-file stage: %w", err)
	}
	return nil
}
