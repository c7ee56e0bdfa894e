// Package protocol holds the wire types of the OpenFlare agent API (PROTOCOL.md).
// It has no behaviour: the agent and the test control plane share it so both
// speak exactly the same JSON.
package protocol

import (
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"
)

// APIPrefix is the fixed path every agent call lives under (PROTOCOL 0).
const APIPrefix = "/api/v1/agent"

// TokenHeader carries the node or discovery token on every request.
const TokenHeader = "X-Agent-Token"

// Endpoint paths, relative to the server base URL.
const (
	PathRegister    = APIPrefix + "/nodes/register"
	PathHeartbeat   = APIPrefix + "/nodes/heartbeat"
	PathWebSocket   = APIPrefix + "/ws"
	PathActive      = APIPrefix + "/config-versions/active"
	PathApplyLogs   = APIPrefix + "/apply-logs"
	PathIPGroupSync = APIPrefix + "/waf/ip-groups/sync"
	// PathPagesPrefix is followed by "<project_id>/latest/hash" or ".../package".
	PathPagesPrefix = APIPrefix + "/pages/projects/"
)

// Envelope is the JSON wrapper of every reply.
type Envelope struct {
	ErrorMsg string          `json:"error_msg"`
	Data     json.RawMessage `json:"data"`
}

// SchemaVersion is sent as NodePayload.SchemaVersion.
const SchemaVersion = 2

// NodePayload is the body of register and heartbeat, and the WS status payload (PROTOCOL 2.1).
type NodePayload struct {
	SchemaVersion       int               `json:"schema_version,omitempty"`
	NodeID              string            `json:"node_id"`
	Name                string            `json:"name"`
	IP                  string            `json:"ip"`
	Version             string            `json:"version"`
	ExtVersion          string            `json:"ext_version"`
	CurrentVersion      string            `json:"current_version"`
	LastError           string            `json:"last_error"`
	OpenRestyStatus     string            `json:"openresty_status"`
	OpenRestyMessage    string            `json:"openresty_message"`
	Profile             *Profile          `json:"profile,omitempty"`
	HostMetrics         *HostMetrics      `json:"host_metrics,omitempty"`
	EdgeHealth          *EdgeHealth       `json:"edge_health,omitempty"`
	AccessLogs          []AccessLog       `json:"access_logs,omitempty"`
	Buffered            []BufferedWindow  `json:"buffered,omitempty"`
	HealthEvents        []HealthEvent     `json:"health_events"`
	WAFIPGroupChecksums map[string]string `json:"waf_ip_group_checksums,omitempty"`
}

// OpenResty status values understood by the server.
const (
	StatusHealthy   = "healthy"
	StatusUnhealthy = "unhealthy"
	StatusUnknown   = "unknown"
)

// Profile describes the host; sent only when its fingerprint changes.
type Profile struct {
	Hostname         string `json:"hostname"`
	OSName           string `json:"os_name"`
	OSVersion        string `json:"os_version"`
	KernelVersion    string `json:"kernel_version"`
	Architecture     string `json:"architecture"`
	CPUModel         string `json:"cpu_model"`
	CPUCores         int    `json:"cpu_cores"`
	TotalMemoryBytes int64  `json:"total_memory_bytes"`
	TotalDiskBytes   int64  `json:"total_disk_bytes"`
	UptimeSeconds    int64  `json:"uptime_seconds"`
	ReportedAtUnix   int64  `json:"reported_at_unix"`
}

// HostMetrics are instant readings and counters of the host.
type HostMetrics struct {
	CapturedAtUnix    int64   `json:"captured_at_unix"`
	CPUUsagePercent   float64 `json:"cpu_usage_percent"`
	MemoryUsedBytes   int64   `json:"memory_used_bytes"`
	MemoryTotalBytes  int64   `json:"memory_total_bytes"`
	StorageUsedBytes  int64   `json:"storage_used_bytes"`
	StorageTotalBytes int64   `json:"storage_total_bytes"`
	DiskReadBytes     int64   `json:"disk_read_bytes"`
	DiskWriteBytes    int64   `json:"disk_write_bytes"`
}

// EdgeHealth is the OpenResty health reading.
type EdgeHealth struct {
	CapturedAtUnix int64  `json:"captured_at_unix"`
	Status         string `json:"status"`
	Message        string `json:"message"`
	Connections    int64  `json:"connections"`
}

// AccessLog is one access-log line.
type AccessLog struct {
	LoggedAtUnix  int64  `json:"logged_at_unix"`
	RemoteAddr    string `json:"remote_addr"`
	Host          string `json:"host"`
	Path          string `json:"path"`
	UserAgent     string `json:"user_agent,omitempty"`
	CacheStatus   string `json:"cache_status,omitempty"`
	StatusCode    int    `json:"status_code"`
	BytesSent     int64  `json:"bytes_sent"`
	RequestLength int64  `json:"request_length"`
	RequestTimeMs int64  `json:"request_time_ms"`
}

// BufferedWindow is an earlier, unacknowledged observability window.
type BufferedWindow struct {
	CapturedAtUnix int64        `json:"captured_at_unix,omitempty"`
	HostMetrics    *HostMetrics `json:"host_metrics,omitempty"`
	EdgeHealth     *EdgeHealth  `json:"edge_health,omitempty"`
	AccessLogs     []AccessLog  `json:"access_logs,omitempty"`
}

// HealthEvent is one open health condition; an empty list resolves all of them.
type HealthEvent struct {
	EventType       string            `json:"event_type"`
	Severity        string            `json:"severity"`
	Message         string            `json:"message"`
	TriggeredAtUnix int64             `json:"triggered_at_unix"`
	Metadata        map[string]string `json:"metadata,omitempty"`
}

// Health event types (PROTOCOL 2.4). The server keeps one active event per
// type: a type missing from a beat's list is resolved.
const (
	EventOpenRestyUnhealthy   = "openresty_unhealthy"
	EventSyncError            = "sync_error"
	EventIPGroupSyncError     = "ip_group_sync_error"
	EventGeoIPUnavailable     = "geoip_unavailable"
	EventPagesSyncError       = "pages_sync_error"
	EventAgentUpdateFailed    = "agent_update_failed"
	EventAgentUpdateRepo      = "agent_update_repo_ignored"
	EventAccessLogLost        = "access_log_lost"
	EventObservabilityTrimmed = "observability_buffer_trimmed"
)

// Severities the server knows; it reads any other as warning.
const (
	SeverityCritical = "critical"
	SeverityWarning  = "warning"
	SeverityInfo     = "info"
)

// MaxText bounds the free text a beat carries (last_error,
// openresty_message, an event's message): the server keeps an event's
// message to 4096 characters and last_error to 16 000, and cuts without
// saying so.
const MaxText = 4000

// Bound cuts s to at most max bytes, on a rune boundary, and says how much
// went: text that is stored, logged or echoed in a beat.
func Bound(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d bytes cut)", len(s)-cut)
}

// RegisterReply is E1's data. Current servers send access_token; older ones agent_token.
type RegisterReply struct {
	NodeID      string `json:"node_id"`
	AccessToken string `json:"access_token,omitempty"`
	AgentToken  string `json:"agent_token,omitempty"`
	Name        string `json:"name,omitempty"`
}

// Token returns the node token of a register reply, whichever key carried it.
func (r RegisterReply) Token() string {
	if r.AccessToken != "" {
		return r.AccessToken
	}
	return r.AgentToken
}

// AgentSettings are the server's settings for this node (PROTOCOL 2.2).
type AgentSettings struct {
	HeartbeatInterval       int    `json:"heartbeat_interval"`
	WebsocketUpgradeEnabled bool   `json:"websocket_upgrade_enabled"`
	AutoUpdate              bool   `json:"auto_update"`
	UpdateRepo              string `json:"update_repo"`
	UpdateNow               bool   `json:"update_now"`
	UpdateChannel           string `json:"update_channel"`
	UpdateTag               string `json:"update_tag"`
	RestartOpenRestyNow     bool   `json:"restart_openresty_now"`
}

// ConfigRef names one published config version.
type ConfigRef struct {
	Version  string `json:"version"`
	Checksum string `json:"checksum"`
}

// Longest version and checksum a server may name (PROTOCOL 13: the
// server's columns hold 32 and 64 characters).
const (
	MaxVersionLen  = 32
	MaxChecksumLen = 64
)

// Check refuses a version or checksum that is empty, longer than the
// server can store, or not printable ASCII without spaces: nothing else
// is stored, logged or echoed back in a beat.
func (r ConfigRef) Check() error {
	if !Printable(r.Version, MaxVersionLen) {
		return fmt.Errorf("version of %d bytes is not 1 to %d printable ASCII bytes without spaces", len(r.Version), MaxVersionLen)
	}
	if !Printable(r.Checksum, MaxChecksumLen) {
		return fmt.Errorf("checksum of %d bytes is not 1 to %d printable ASCII bytes without spaces", len(r.Checksum), MaxChecksumLen)
	}
	return nil
}

// Printable reports whether s is 1 to max bytes of printable ASCII without
// spaces: safe to store, log, and send back in a header or a beat.
func Printable(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// HeartbeatReply is E2's data.
type HeartbeatReply struct {
	Node          json.RawMessage `json:"node,omitempty"`
	AgentSettings AgentSettings   `json:"agent_settings"`
	ActiveConfig  *ConfigRef      `json:"active_config"`
	WAFIPGroups   []WAFIPGroup    `json:"waf_ip_groups,omitempty"`
}

// SupportFile is one file shipped with a config version.
type SupportFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
	// Staged, when set, holds the content instead of Content: the agent
	// streams E4's support files to disk (landing.Stage), since hundreds
	// of certificates outgrow its memory.
	Staged *io.SectionReader `json:"-"`
}

// ActiveConfig is E4's data: the full snapshot the agent renders.
type ActiveConfig struct {
	Version          string        `json:"version"`
	Checksum         string        `json:"checksum"`
	SourceConfigJSON string        `json:"source_config_json"`
	SupportFiles     []SupportFile `json:"support_files"`
	CreatedAt        string        `json:"created_at"`
}

// Apply results the server accepts (PROTOCOL 8.3).
const (
	ResultSuccess = "success"
	ResultWarning = "warning"
	ResultFailed  = "failed"
)

// ApplyLog is E5's body.
type ApplyLog struct {
	NodeID              string `json:"node_id"`
	Version             string `json:"version"`
	Result              string `json:"result"`
	Message             string `json:"message"`
	Checksum            string `json:"checksum"`
	MainConfigChecksum  string `json:"main_config_checksum"`
	RouteConfigChecksum string `json:"route_config_checksum"`
	SupportFileCount    int    `json:"support_file_count"`
}

// ApplyLogRecord is E5's reply data: the stored row.
type ApplyLogRecord struct {
	ID int64 `json:"id"`
	ApplyLog
	CreatedAt string `json:"created_at"`
}

// WAFIPGroup is one IP group with its membership (PROTOCOL 7.1).
type WAFIPGroup struct {
	ID       uint64   `json:"id"`
	Name     string   `json:"name"`
	Type     string   `json:"type"`
	Enabled  bool     `json:"enabled"`
	IPList   []string `json:"ip_list"`
	Checksum string   `json:"checksum"`
	// Malformed says why the element did not decode (a wrong-typed field,
	// say); it is then rejected alone, not the whole reply with it.
	Malformed string `json:"-"`
}

// UnmarshalJSON decodes one group and never fails on its content: a bad
// element is marked Malformed (with the id when one can be read), so one
// wrong-typed field costs that group, not the heartbeat carrying it.
func (g *WAFIPGroup) UnmarshalJSON(b []byte) error {
	type plain WAFIPGroup
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		var id struct {
			ID uint64 `json:"id"`
		}
		json.Unmarshal(b, &id)
		msg := err.Error()
		if len(msg) > 200 {
			msg = msg[:200]
		}
		*g = WAFIPGroup{ID: id.ID, Malformed: msg}
		return nil
	}
	*g = WAFIPGroup(p)
	return nil
}

// IPGroupSyncRequest is E6's body.
type IPGroupSyncRequest struct {
	IDs       []uint64          `json:"ids"`
	Checksums map[string]string `json:"checksums"`
}

// IPGroupSyncReply is E6's data.
type IPGroupSyncReply struct {
	Groups []WAFIPGroup `json:"groups"`
}

// PagesMeta is E7's data.
type PagesMeta struct {
	ProjectID    uint64 `json:"project_id"`
	DeploymentID uint64 `json:"deployment_id"`
	Hash         string `json:"hash"`
	PackageSize  int64  `json:"package_size"`
	FileCount    int    `json:"file_count"`
	TotalSize    int64  `json:"total_size"`
}

// WebSocket message types (PROTOCOL 3.3).
const (
	WSStatus          = "status"
	WSPing            = "ping"
	WSPong            = "pong"
	WSSettings        = "settings"
	WSActiveConfig    = "active_config"
	WSForceSyncConfig = "force_sync_config"
	WSWAFIPGroups     = "waf_ip_groups"
)

// WSMessage is one WebSocket text frame.
type WSMessage struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}
