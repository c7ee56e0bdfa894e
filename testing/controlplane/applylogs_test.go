package controlplane

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"openflare/agent/protocol"
)

func applyLog(version, result, checksum string) protocol.ApplyLog {
	return protocol.ApplyLog{NodeID: "ignored", Version: version, Result: result, Message: "msg " + result,
		Checksum: checksum, MainConfigChecksum: "m", RouteConfigChecksum: "r", SupportFileCount: 3}
}

func TestApplyLogValidation(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	wantError(t, call(t, s, http.MethodPost, protocol.PathApplyLogs, tok, applyLog("v1", "error", "c")), http.StatusBadRequest, msgBadResult)
	wantError(t, call(t, s, http.MethodPost, protocol.PathApplyLogs, tok, applyLog("v1", "", "c")), http.StatusBadRequest, msgBadResult)
	wantError(t, call(t, s, http.MethodPost, protocol.PathApplyLogs, tok, applyLog(" ", "success", "c")), http.StatusBadRequest, msgVersionRequired)
	wantError(t, call(t, s, http.MethodPost, protocol.PathApplyLogs, tok, `{"version":"v1","result":"success","support_file_count":"4"}`), http.StatusBadRequest, msgBind)
	wantError(t, call(t, s, http.MethodPost, protocol.PathApplyLogs, "bad", applyLog("v1", "success", "c")), http.StatusUnauthorized, msgBadAgentToken)
	if logs := s.ApplyLogs(); len(logs) != 0 {
		t.Fatalf("rejected logs stored: %+v", logs)
	}
}

func TestApplyLogSuccessDedupeAndNodeEffects(t *testing.T) {
	s := startServer(t)
	id, tok := s.AddNode("n")
	post := func(l protocol.ApplyLog) protocol.ApplyLogRecord {
		t.Helper()
		var rec protocol.ApplyLogRecord
		wantOK(t, call(t, s, http.MethodPost, protocol.PathApplyLogs, tok, l), &rec)
		return rec
	}
	first := post(applyLog("20260101-001", " SUCCESS ", "c1"))
	if first.ID == 0 || first.NodeID != id || first.Result != protocol.ResultSuccess || first.SupportFileCount != 3 {
		t.Fatalf("first record %+v", first)
	}
	if _, err := time.Parse(time.RFC3339Nano, first.CreatedAt); err != nil {
		t.Fatalf("created_at %q: %v", first.CreatedAt, err)
	}
	if again := post(applyLog("20260101-001", "success", "c1")); again != first {
		t.Fatalf("repeated success %+v, want the earlier row %+v", again, first)
	}
	if n := s.Nodes()[0]; n.CurrentVersion != "20260101-001" || n.LastError != "" {
		t.Fatalf("node after success %+v", n)
	}
	warn := post(applyLog("20260101-002", "warning", "c2"))
	if warn.ID == first.ID || s.Nodes()[0].LastError != "msg warning" || s.Nodes()[0].CurrentVersion != "20260101-001" {
		t.Fatalf("warning %+v, node %+v", warn, s.Nodes()[0])
	}
	// The latest row is a warning now, so the same success is stored again.
	if third := post(applyLog("20260101-001", "success", "c1")); third.ID == first.ID {
		t.Fatalf("success after a warning was deduplicated: %+v", third)
	}
	post(applyLog("20260101-003", "failed", "c3"))
	if logs := s.ApplyLogs(); len(logs) != 4 {
		t.Fatalf("%d logs, want 4", len(logs))
	}
}

func TestWaitApplyLog(t *testing.T) {
	s := startServer(t)
	_, tok := s.AddNode("n")
	done := make(chan protocol.ApplyLogRecord)
	go func() {
		rec, err := s.WaitApplyLog(testContext(t), func(r protocol.ApplyLogRecord) bool { return r.Result == protocol.ResultFailed })
		if err != nil {
			t.Error(err)
		}
		done <- rec
	}()
	call(t, s, http.MethodPost, protocol.PathApplyLogs, tok, applyLog("v1", "success", "c"))
	call(t, s, http.MethodPost, protocol.PathApplyLogs, tok, applyLog("v2", "failed", "c"))
	if rec := <-done; rec.Version != "v2" {
		t.Fatalf("waited for %+v, want v2", rec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.WaitApplyLog(ctx, func(protocol.ApplyLogRecord) bool { return false }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want deadline exceeded", err)
	}
}
