package controlplane

import (
	"encoding/json"
	"net/http"
	"testing"

	"openflare/agent/protocol"
)

func TestAdminRequiresItsToken(t *testing.T) {
	s := startServer(t)
	for _, tok := range []string{"", "wrong", s.DiscoveryToken()} {
		wantError(t, call(t, s, http.MethodGet, AdminPathState, "", nil, AdminHeader, tok), http.StatusUnauthorized, "admin token invalid")
	}
	s.SetAdminToken("")
	wantError(t, call(t, s, http.MethodGet, AdminPathState, "", nil, AdminHeader, ""), http.StatusUnauthorized, "admin token invalid")
}

func TestAdminAPI(t *testing.T) {
	s := startServer(t)
	admin := func(method, path string, body any, out any) {
		t.Helper()
		wantOK(t, call(t, s, method, path, "", body, AdminHeader, s.AdminToken()), out)
	}
	var node AdminNodeReply
	admin(http.MethodPost, AdminPathNodes, map[string]string{"name": "edge"}, &node)

	var pub AdminPublishReply
	admin(http.MethodPost, AdminPathPublish, AdminPublishRequest{SourceJSON: vectorBSource, Checksum: "fixed"}, &pub)
	if pub.Checksum != "fixed" || pub.RenderError != "" {
		t.Fatalf("publish with checksum %+v", pub)
	}
	var failed AdminPublishReply
	admin(http.MethodPost, AdminPathPublish, AdminPublishRequest{SourceJSON: `{"routes":[{"id":1,"site_name":"x","origin_url":"http://127.0.0.1:1"}]}`}, &failed)
	if failed.RenderError == "" || failed.Checksum == "" {
		t.Fatalf("publish of an unrenderable source %+v: want a render error and the placeholder", failed)
	}
	admin(http.MethodPost, AdminPathActivate, protocol.ConfigRef{Version: pub.Version}, nil)
	wantError(t, call(t, s, http.MethodPost, AdminPathActivate, "", protocol.ConfigRef{Version: "nope"}, AdminHeader, s.AdminToken()),
		http.StatusBadRequest, `controlplane: activate: unknown version "nope"`)

	admin(http.MethodPost, AdminPathIPGroups, protocol.WAFIPGroup{ID: 3, Enabled: true, IPList: []string{"192.0.2.1"}}, nil)
	admin(http.MethodPost, AdminPathSettings, AdminSettingsRequest{NodeID: node.NodeID, Settings: json.RawMessage(`{"update_tag":"v2"}`)}, nil)
	wantError(t, call(t, s, http.MethodPost, AdminPathSettings, "", AdminSettingsRequest{NodeID: "node-x", Settings: json.RawMessage(`{}`)}, AdminHeader, s.AdminToken()),
		http.StatusBadRequest, `controlplane: settings: unknown node "node-x"`)
	admin(http.MethodPost, AdminPathFault, AdminFaultRequest{Path: protocol.PathHeartbeat, Status: 500}, nil)
	wantError(t, call(t, s, http.MethodPost, AdminPathForceSync, "", map[string]string{"node_id": node.NodeID}, AdminHeader, s.AdminToken()),
		http.StatusBadRequest, `controlplane: node "`+node.NodeID+`" has no websocket`)

	wantError(t, call(t, s, http.MethodPost, protocol.PathHeartbeat, node.Token, payload("v1")), http.StatusInternalServerError, msgInternal)
	hb, _ := heartbeat(t, s, node.Token, payload("v1"))
	if hb.AgentSettings.UpdateTag != "v2" || hb.ActiveConfig == nil || hb.ActiveConfig.Version != pub.Version {
		t.Fatalf("heartbeat %+v", hb)
	}

	var st AdminState
	admin(http.MethodGet, AdminPathState, nil, &st)
	if len(st.Nodes) != 1 || st.Nodes[0].Token != node.Token || len(st.Versions) != 2 || !st.Versions[0].Active ||
		len(st.IPGroups) != 1 || len(st.Heartbeats) != 1 || st.DiscoveryToken != s.DiscoveryToken() {
		t.Fatalf("state %+v", st)
	}
}
