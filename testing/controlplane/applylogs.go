package controlplane

import (
	"context"
	"net/http"
	"strings"
	"time"

	"openflare/agent/protocol"
)

// ApplyLogs returns every stored apply log, oldest first.
func (s *Server) ApplyLogs() []protocol.ApplyLogRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]protocol.ApplyLogRecord(nil), s.logs...)
}

// WaitApplyLog returns the first stored apply log, already there or still to
// come, for which match returns true; or ctx's error. A deduplicated success
// report stores no new row, so it matches nothing new.
func (s *Server) WaitApplyLog(ctx context.Context, match func(protocol.ApplyLogRecord) bool) (protocol.ApplyLogRecord, error) {
	return waitScan(ctx, s, func() []protocol.ApplyLogRecord { return s.logs }, match)
}

// handleApplyLog is E5 (PROTOCOL 8.3).
func (s *Server) handleApplyLog(w http.ResponseWriter, r *http.Request) {
	nodeID := s.nodeIDForToken(w, r)
	if nodeID == "" {
		return
	}
	var in protocol.ApplyLog
	if !bindJSON(w, r, &in) {
		return
	}
	in.NodeID = nodeID
	in.Version = strings.TrimSpace(in.Version)
	in.Result = strings.ToLower(strings.TrimSpace(in.Result))
	in.Message = cutRunes(in.Message, maxTextRunes)
	if in.Version == "" {
		writeError(w, http.StatusBadRequest, msgVersionRequired)
		return
	}
	switch in.Result {
	case protocol.ResultSuccess, protocol.ResultWarning, protocol.ResultFailed:
	default:
		writeError(w, http.StatusBadRequest, msgBadResult)
		return
	}

	writeOK(w, s.storeApplyLog(in))
}

// storeApplyLog applies a validated report to its node and stores it,
// unless it repeats the node's latest success; it returns the row.
func (s *Server) storeApplyLog(in protocol.ApplyLog) protocol.ApplyLogRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.byNodeID[in.NodeID]
	now := time.Now()
	n.LastSeen = now
	if in.Result == protocol.ResultSuccess {
		n.CurrentVersion = in.Version
		n.LastError = ""
	} else {
		n.LastError = in.Message
	}
	s.notifyLocked()
	if last := s.lastLogLocked(in.NodeID); last != nil && in.Result == protocol.ResultSuccess &&
		last.Result == protocol.ResultSuccess && last.Version == in.Version && last.Checksum == in.Checksum {
		return *last
	}
	s.nextLogID++
	rec := protocol.ApplyLogRecord{ID: s.nextLogID, ApplyLog: in, CreatedAt: now.Format(time.RFC3339Nano)}
	s.logs = append(s.logs, rec)
	return rec
}

func (s *Server) lastLogLocked(nodeID string) *protocol.ApplyLogRecord {
	for i := len(s.logs) - 1; i >= 0; i-- {
		if s.logs[i].NodeID == nodeID {
			return &s.logs[i]
		}
	}
	return nil
}
