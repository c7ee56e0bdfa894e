package controlplane

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"time"

	"openflare/agent/protocol"
	"openflare/agent/render"
)

// runtimeFiles are stored with a version but never shipped by E4 (PROTOCOL 4).
var runtimeFiles = map[string]bool{
	"waf_config.json":       true,
	"pow_config.json":       true,
	"openresty_config.json": true,
}

// version is one published config version.
type version struct {
	ref     protocol.ConfigRef
	source  string
	files   []protocol.SupportFile // as stored; nil is shipped as null
	created time.Time
	// groupIDs are the WAF IP groups the source references; groupErr is
	// set when the source's WAF part cannot be parsed.
	groupIDs []uint64
	groupErr error
}

// Publish publishes and activates a new version like the UI does: it renders
// the source with agent/render to compute the checksum, and stores the
// renderer's files (the given support files plus the ones the renderer adds)
// as the version's support files. When rendering fails it does what the real
// server does: the version is still published and activated, with the
// placeholder checksum and support_files null (PROTOCOL 4.3 caveat 2), and
// the render error is returned next to the version.
func (s *Server) Publish(sourceJSON string, support []protocol.SupportFile) (protocol.ConfigRef, error) {
	out, err := render.Config(sourceJSON, support)
	if err != nil {
		ref := s.publish(sourceJSON, nil, placeholderChecksum(sourceJSON))
		return ref, fmt.Errorf("controlplane: publish %s: render failed, placeholder checksum stored: %w", ref.Version, err)
	}
	return s.publish(sourceJSON, out.Files, out.Checksum()), nil
}

// PublishWithChecksum publishes and activates a new version with the given
// checksum and exactly the given support files, without rendering: a fault
// when the checksum is wrong, and a way to ship any support-file list.
func (s *Server) PublishWithChecksum(sourceJSON string, support []protocol.SupportFile, checksum string) protocol.ConfigRef {
	return s.publish(sourceJSON, slices.Clone(support), checksum)
}

func (s *Server) publish(sourceJSON string, files []protocol.SupportFile, checksum string) protocol.ConfigRef {
	ids, groupErr := referencedGroupIDs(sourceJSON)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	day := now.Format("20060102")
	s.dayCounter[day]++
	v := &version{
		ref:      protocol.ConfigRef{Version: fmt.Sprintf("%s-%03d", day, s.dayCounter[day]), Checksum: checksum},
		source:   sourceJSON,
		files:    files,
		created:  now,
		groupIDs: ids,
		groupErr: groupErr,
	}
	s.versions = append(s.versions, v)
	s.byVersion[v.ref.Version] = v
	s.activateLocked(v)
	return v.ref
}

// Activate makes an existing version the active one again (a rollback).
func (s *Server) Activate(ver string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.byVersion[ver]
	if v == nil {
		return fmt.Errorf("controlplane: activate: unknown version %q", ver)
	}
	s.activateLocked(v)
	return nil
}

// activateLocked sets the active version and broadcasts it on every
// WebSocket (PROTOCOL 3.3).
func (s *Server) activateLocked(v *version) {
	s.active = v
	s.broadcastLocked(protocol.WSActiveConfig, v.ref)
	s.notifyLocked()
}

// Active is the active version, or nil.
func (s *Server) Active() *protocol.ConfigRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.activeRefLocked()
}

func (s *Server) activeRefLocked() *protocol.ConfigRef {
	if s.active == nil {
		return nil
	}
	ref := s.active.ref
	return &ref
}

// handleActive is E4 (PROTOCOL 4).
func (s *Server) handleActive(w http.ResponseWriter, r *http.Request) {
	if s.nodeIDForToken(w, r) == "" {
		return
	}
	s.mu.Lock()
	v := s.active
	s.mu.Unlock()
	if v == nil {
		writeError(w, http.StatusBadRequest, msgNoActiveVersion)
		return
	}
	writeOK(w, protocol.ActiveConfig{
		Version:          v.ref.Version,
		Checksum:         v.ref.Checksum,
		SourceConfigJSON: v.source,
		SupportFiles:     shippedFiles(v.files),
		CreatedAt:        v.created.Format(time.RFC3339Nano),
	})
}

// shippedFiles drops the runtime JSONs; a stored null stays null and a
// stored list stays a list (possibly []).
func shippedFiles(files []protocol.SupportFile) []protocol.SupportFile {
	if files == nil {
		return nil
	}
	out := make([]protocol.SupportFile, 0, len(files))
	for _, f := range files {
		if !runtimeFiles[f.Path] {
			out = append(out, f)
		}
	}
	return out
}

// placeholderChecksum is what the server stores when its render fails.
func placeholderChecksum(sourceJSON string) string {
	sum := sha256.Sum256([]byte(`{"placeholder":"main_config"}` + "\n--route-config--\n" + sourceJSON + "\n--support-files--\n"))
	return hex.EncodeToString(sum[:])
}
