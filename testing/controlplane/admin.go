package controlplane

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"openflare/agent/protocol"
)

// AdminHeader carries the admin token on every admin API call.
const AdminHeader = "X-Admin-Token"

// Admin API paths (replies use the agent API's envelope).
const (
	AdminPathPublish   = "/_admin/publish"
	AdminPathActivate  = "/_admin/activate"
	AdminPathIPGroups  = "/_admin/ip-groups"
	AdminPathSettings  = "/_admin/settings"
	AdminPathFault     = "/_admin/fault"
	AdminPathNodes     = "/_admin/nodes"
	AdminPathForceSync = "/_admin/force-sync"
	AdminPathState     = "/_admin/state"
)

// AdminPublishRequest is the body of POST /_admin/publish. A non-empty
// Checksum publishes without rendering (PublishWithChecksum).
type AdminPublishRequest struct {
	SourceJSON   string                 `json:"source_json"`
	SupportFiles []protocol.SupportFile `json:"support_files"`
	Checksum     string                 `json:"checksum,omitempty"`
}

// AdminPublishReply is the data of POST /_admin/publish.
type AdminPublishReply struct {
	protocol.ConfigRef
	RenderError string `json:"render_error,omitempty"`
}

// AdminSettingsRequest is the body of POST /_admin/settings: the settings
// keys to change (protocol.AgentSettings JSON names) for one node, or for
// every node when NodeID is "".
type AdminSettingsRequest struct {
	NodeID   string          `json:"node_id"`
	Settings json.RawMessage `json:"settings"`
}

// AdminFaultRequest is the body of POST /_admin/fault (Fault in JSON, with
// the delay as a Go duration string such as "2s").
type AdminFaultRequest struct {
	Path     string `json:"path"`
	Times    int    `json:"times"`
	Status   int    `json:"status"`
	Delay    string `json:"delay"`
	Truncate bool   `json:"truncate"`
	Oversize int64  `json:"oversize"`
	Drop     bool   `json:"drop"`
	Garbage  bool   `json:"garbage"`
}

// AdminNodeReply is the data of POST /_admin/nodes ({"name": "..."}).
type AdminNodeReply struct {
	NodeID string `json:"node_id"`
	Token  string `json:"token"`
}

// AdminState is the data of GET /_admin/state.
type AdminState struct {
	DiscoveryToken string                    `json:"discovery_token"`
	Nodes          []Node                    `json:"nodes"`
	Versions       []AdminVersion            `json:"versions"`
	Active         *protocol.ConfigRef       `json:"active"`
	ApplyLogs      []protocol.ApplyLogRecord `json:"apply_logs"`
	IPGroups       []protocol.WAFIPGroup     `json:"ip_groups"`
	WebSockets     []string                  `json:"websockets"`
	// Heartbeats are the latest ones (at most adminBeats).
	Heartbeats []Beat `json:"heartbeats"`
}

// AdminVersion describes one published version.
type AdminVersion struct {
	protocol.ConfigRef
	CreatedAt    string   `json:"created_at"`
	Active       bool     `json:"active"`
	SupportFiles []string `json:"support_files"`
}

const adminBeats = 20

func (s *Server) adminRoutes() map[string]route {
	return map[string]route{
		AdminPathPublish:   {http.MethodPost, s.adminPublish},
		AdminPathActivate:  {http.MethodPost, s.adminActivate},
		AdminPathIPGroups:  {http.MethodPost, s.adminIPGroup},
		AdminPathSettings:  {http.MethodPost, s.adminSettings},
		AdminPathFault:     {http.MethodPost, s.adminFault},
		AdminPathNodes:     {http.MethodPost, s.adminAddNode},
		AdminPathForceSync: {http.MethodPost, s.adminForceSync},
		AdminPathState:     {http.MethodGet, s.adminState},
	}
}

func (s *Server) requireAdmin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		want := s.AdminToken()
		got := r.Header.Get(AdminHeader)
		if want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			writeError(w, http.StatusUnauthorized, "admin token invalid")
			return
		}
		h(w, r)
	}
}

func (s *Server) adminPublish(w http.ResponseWriter, r *http.Request) {
	var req AdminPublishRequest
	if !bindJSON(w, r, &req) {
		return
	}
	if req.Checksum != "" {
		writeOK(w, AdminPublishReply{ConfigRef: s.PublishWithChecksum(req.SourceJSON, req.SupportFiles, req.Checksum)})
		return
	}
	ref, err := s.Publish(req.SourceJSON, req.SupportFiles)
	reply := AdminPublishReply{ConfigRef: ref}
	if err != nil {
		reply.RenderError = err.Error()
	}
	writeOK(w, reply)
}

func (s *Server) adminActivate(w http.ResponseWriter, r *http.Request) {
	var req protocol.ConfigRef
	if !bindJSON(w, r, &req) {
		return
	}
	if err := s.Activate(req.Version); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeOK(w, s.Active())
}

func (s *Server) adminIPGroup(w http.ResponseWriter, r *http.Request) {
	var g protocol.WAFIPGroup
	if !bindJSON(w, r, &g) {
		return
	}
	writeOK(w, s.SetIPGroup(g))
}

func (s *Server) adminSettings(w http.ResponseWriter, r *http.Request) {
	var req AdminSettingsRequest
	if !bindJSON(w, r, &req) {
		return
	}
	var probe protocol.AgentSettings
	if err := json.Unmarshal(req.Settings, &probe); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("settings: %v", err))
		return
	}
	err := s.updateSettings(req.NodeID, func(st *protocol.AgentSettings) {
		// Decoding was probed above, so it succeeds here too.
		_ = json.Unmarshal(req.Settings, st)
	})
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeOK(w, nil)
}

func (s *Server) adminFault(w http.ResponseWriter, r *http.Request) {
	var req AdminFaultRequest
	if !bindJSON(w, r, &req) {
		return
	}
	f := Fault{Path: req.Path, Times: req.Times, Status: req.Status, Truncate: req.Truncate,
		Oversize: req.Oversize, Drop: req.Drop, Garbage: req.Garbage}
	if req.Delay != "" {
		d, err := time.ParseDuration(req.Delay)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("delay: %v", err))
			return
		}
		f.Delay = d
	}
	s.Inject(f)
	writeOK(w, nil)
}

func (s *Server) adminAddNode(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"name"`
	}
	if !bindJSON(w, r, &req) {
		return
	}
	id, tok := s.AddNode(req.Name)
	writeOK(w, AdminNodeReply{NodeID: id, Token: tok})
}

func (s *Server) adminForceSync(w http.ResponseWriter, r *http.Request) {
	var req struct {
		NodeID string `json:"node_id"`
	}
	if !bindJSON(w, r, &req) {
		return
	}
	if err := s.ForceSync(req.NodeID); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeOK(w, nil)
}

func (s *Server) adminState(w http.ResponseWriter, r *http.Request) {
	st := AdminState{
		Nodes:     s.Nodes(),
		ApplyLogs: s.ApplyLogs(),
		IPGroups:  s.IPGroups(),
	}
	s.mu.Lock()
	st.DiscoveryToken = s.discoveryToken
	st.Active = s.activeRefLocked()
	for _, v := range s.versions {
		av := AdminVersion{ConfigRef: v.ref, CreatedAt: v.created.Format(time.RFC3339Nano), Active: v == s.active}
		for _, f := range v.files {
			av.SupportFiles = append(av.SupportFiles, f.Path)
		}
		st.Versions = append(st.Versions, av)
	}
	for id := range s.ws {
		st.WebSockets = append(st.WebSockets, id)
	}
	slices.Sort(st.WebSockets)
	st.Heartbeats = append([]Beat(nil), s.beats[max(0, len(s.beats)-adminBeats):]...)
	s.mu.Unlock()
	writeOK(w, st)
}
