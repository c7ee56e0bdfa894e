package controlplane

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"openflare/agent/protocol"
)

// Error texts for Pages failures (PROTOCOL 9.1: 400 in each case).
const (
	msgPagesBadID        = "无效的 ID"
	msgPagesNoDeployment = "Pages 项目没有可用的部署"
)

// pagesProject is one Pages project's active deployment as the server
// stores it, with the faults its next downloads act out.
type pagesProject struct {
	meta  protocol.PagesMeta
	pkg   []byte
	fault PagesFault
}

// PagesFault makes a project's package downloads misbehave, until cleared
// with the zero value.
type PagesFault struct {
	// WrongHash announces a hash in E7 that the package does not have.
	WrongHash bool
	// ExtraBytes sends that many bytes more than package_size (and says so
	// in Content-Length).
	ExtraBytes int
	// MissingBytes announces the full package_size but closes the
	// connection that many bytes short.
	MissingBytes int
	// NewDeploymentAfterDownload activates another deployment (same
	// content, new deployment id) right after each package download, as
	// when an admin deploys while a node downloads.
	NewDeploymentAfterDownload bool
}

// SetPagesPackage makes pkg (an archive) the active deployment of
// project, under a new deployment id, and returns the E7 metadata.
// fileCount and totalSize are what the server would have counted at
// upload.
func (s *Server) SetPagesPackage(project uint64, pkg []byte, fileCount int, totalSize int64) protocol.PagesMeta {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pages == nil {
		s.pages = map[uint64]*pagesProject{}
	}
	p := s.pages[project]
	if p == nil {
		p = &pagesProject{}
		s.pages[project] = p
	}
	sum := sha256.Sum256(pkg)
	p.pkg = pkg
	p.meta = protocol.PagesMeta{
		ProjectID: project, DeploymentID: p.meta.DeploymentID + 1, Hash: hex.EncodeToString(sum[:]),
		PackageSize: int64(len(pkg)), FileCount: fileCount, TotalSize: totalSize,
	}
	s.notifyLocked()
	return p.meta
}

// SetPagesFault sets how project's next downloads misbehave.
func (s *Server) SetPagesFault(project uint64, f PagesFault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pages[project]; p != nil {
		p.fault = f
	}
}

// handlePages serves E7 (…/<id>/latest/hash) and E8 (…/<id>/latest/package).
func (s *Server) handlePages(w http.ResponseWriter, r *http.Request) {
	if s.nodeIDForToken(w, r) == "" {
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, protocol.PathPagesPrefix)
	idText, what, _ := strings.Cut(rest, "/")
	id, err := strconv.ParseUint(idText, 10, 64)
	if err != nil || id == 0 {
		writeError(w, http.StatusBadRequest, msgPagesBadID)
		return
	}
	s.mu.Lock()
	p := s.pages[id]
	var meta protocol.PagesMeta
	var pkg []byte
	var fault PagesFault
	if p != nil {
		meta, pkg, fault = p.meta, p.pkg, p.fault
	}
	s.mu.Unlock()
	if p == nil {
		writeError(w, http.StatusBadRequest, msgPagesNoDeployment)
		return
	}
	switch what {
	case "latest/hash":
		if fault.WrongHash {
			meta.Hash = strings.Repeat("0", 64)
		}
		writeOK(w, meta)
	case "latest/package":
		body := pkg
		if fault.ExtraBytes > 0 {
			body = append(append([]byte(nil), pkg...), make([]byte, fault.ExtraBytes)...)
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=pages-deployment-%d.bin", meta.DeploymentID))
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if fault.MissingBytes > 0 {
			body = body[:max(0, len(body)-fault.MissingBytes)]
		}
		w.WriteHeader(http.StatusOK)
		w.Write(body)
		if fault.NewDeploymentAfterDownload {
			s.mu.Lock()
			p.meta.DeploymentID++
			s.notifyLocked()
			s.mu.Unlock()
		}
	default:
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, notFoundBody)
	}
}
