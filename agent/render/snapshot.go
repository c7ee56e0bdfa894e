package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// snapshot is source_config_json (PROTOCOL 4.2). Only the keys the renderer
// reads are declared, so informational keys (tunnel_*, legacy pow_*) can never
// fail a render through an unexpected type. Routes are rendered as listed:
// the server publishes enabled routes only, so `enabled` is not consulted.
type snapshot struct {
	Routes []route     `json:"routes"`
	Config restyConfig `json:"openresty_config"`
	WAF    wafDocument `json:"waf"`
}

type route struct {
	ID                 uint64           `json:"id"`
	SiteName           string           `json:"site_name"`
	Domains            []string         `json:"domains"`
	OriginURL          string           `json:"origin_url"`
	OriginHost         string           `json:"origin_host"`
	Upstreams          []string         `json:"upstreams"`
	EnableHTTPS        bool             `json:"enable_https"`
	DomainCertIDs      []uint64         `json:"domain_cert_ids"`
	RedirectHTTP       bool             `json:"redirect_http"`
	LimitConnPerServer int64            `json:"limit_conn_per_server"`
	LimitConnPerIP     int64            `json:"limit_conn_per_ip"`
	LimitRate          string           `json:"limit_rate"`
	LimitReqPerIP      string           `json:"limit_req_per_ip"`
	CacheEnabled       bool             `json:"cache_enabled"`
	CachePolicy        string           `json:"cache_policy"`
	CacheRules         []string         `json:"cache_rules"`
	CustomHeaders      []customHeader   `json:"custom_headers"`
	BasicAuthEnabled   bool             `json:"basic_auth_enabled"`
	BasicAuthUsername  string           `json:"basic_auth_username"`
	BasicAuthPassword  string           `json:"basic_auth_password"`
	UpstreamType       string           `json:"upstream_type"`
	PagesProjectID     uint64           `json:"pages_project_id"`
	PagesDeployment    *pagesDeployment `json:"pages_deployment"`
}

type customHeader struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type pagesDeployment struct {
	ProjectID          uint64 `json:"project_id"`
	EntryFile          string `json:"entry_file"`
	SPAFallbackEnabled bool   `json:"spa_fallback_enabled"`
	SPAFallbackPath    string `json:"spa_fallback_path"`
	APIProxyEnabled    bool   `json:"api_proxy_enabled"`
	APIProxyPath       string `json:"api_proxy_path"`
	APIProxyPass       string `json:"api_proxy_pass"`
	APIProxyRewrite    string `json:"api_proxy_rewrite"`
	LocalRoot          string `json:"local_root"`
}

// restyConfig is openresty_config. Values are rendered as given: the server
// always sends every key filled in, so the renderer only falls back where the
// contract names a fallback (template, default server status, cache path,
// error page codes).
type restyConfig struct {
	DefaultServerReturnStatus int64    `json:"default_server_return_status"`
	WorkerProcesses           string   `json:"worker_processes"`
	WorkerConnections         int64    `json:"worker_connections"`
	WorkerRlimitNofile        int64    `json:"worker_rlimit_nofile"`
	EventsUse                 string   `json:"events_use"`
	EventsMultiAcceptEnabled  bool     `json:"events_multi_accept_enabled"`
	KeepaliveTimeout          int64    `json:"keepalive_timeout"`
	KeepaliveRequests         int64    `json:"keepalive_requests"`
	ClientHeaderTimeout       int64    `json:"client_header_timeout"`
	ClientBodyTimeout         int64    `json:"client_body_timeout"`
	ClientMaxBodySize         string   `json:"client_max_body_size"`
	LargeClientHeaderBuffers  string   `json:"large_client_header_buffers"`
	SendTimeout               int64    `json:"send_timeout"`
	ProxyConnectTimeout       int64    `json:"proxy_connect_timeout"`
	ProxySendTimeout          int64    `json:"proxy_send_timeout"`
	ProxyReadTimeout          int64    `json:"proxy_read_timeout"`
	WebsocketEnabled          bool     `json:"websocket_enabled"`
	HTTP3Enabled              bool     `json:"http3_enabled"`
	ProxyRequestBuffering     bool     `json:"proxy_request_buffering"`
	ProxyBufferingEnabled     bool     `json:"proxy_buffering_enabled"`
	ProxyBuffers              string   `json:"proxy_buffers"`
	ProxyBufferSize           string   `json:"proxy_buffer_size"`
	ProxyBusyBuffersSize      string   `json:"proxy_busy_buffers_size"`
	GzipEnabled               bool     `json:"gzip_enabled"`
	GzipMinLength             int64    `json:"gzip_min_length"`
	GzipCompLevel             int64    `json:"gzip_comp_level"`
	Resolvers                 string   `json:"resolvers"`
	CacheEnabled              bool     `json:"cache_enabled"`
	CachePath                 string   `json:"cache_path"`
	CacheLevels               string   `json:"cache_levels"`
	CacheInactive             string   `json:"cache_inactive"`
	CacheMaxSize              string   `json:"cache_max_size"`
	CacheKeyTemplate          string   `json:"cache_key_template"`
	CacheLockEnabled          bool     `json:"cache_lock_enabled"`
	CacheLockTimeout          string   `json:"cache_lock_timeout"`
	CacheUseStale             string   `json:"cache_use_stale"`
	MainConfigTemplate        string   `json:"main_config_template"`
	DefaultLimitConnPerServer int64    `json:"default_limit_conn_per_server"`
	DefaultLimitConnPerIP     int64    `json:"default_limit_conn_per_ip"`
	DefaultLimitRate          string   `json:"default_limit_rate"`
	DefaultLimitReqPerIP      string   `json:"default_limit_req_per_ip"`
	OriginErrorPageEnabled    bool     `json:"origin_error_page_enabled"`
	OriginErrorPageCodes      []string `json:"origin_error_page_status_codes"`
	OriginErrorPageHTML       string   `json:"origin_error_page_html"`
	OriginErrorPageGetOnly    bool     `json:"origin_error_page_get_only"`
	SWOfflineEnabled          bool     `json:"sw_offline_enabled"`
	SWOfflineHTML             string   `json:"sw_offline_html"`
	SWOfflineDomains          []string `json:"sw_offline_domains"`
}

// errLegacyRouteArray reports the pre-snapshot format (a bare route array),
// which the current server never sends and the renderer cannot place a WAF or
// openresty_config for.
var errLegacyRouteArray = errors.New("source config is a legacy bare route array; expected {\"routes\":…,\"openresty_config\":…,\"waf\":…}")

// decodeSnapshot parses source_config_json.
func decodeSnapshot(sourceConfigJSON string) (*snapshot, error) {
	data := bytes.TrimLeft([]byte(sourceConfigJSON), " \t\r\n")
	if len(data) == 0 {
		return nil, errors.New("source config is empty")
	}
	if data[0] == '[' {
		return nil, errLegacyRouteArray
	}
	if data[0] != '{' {
		return nil, errors.New("source config is not a JSON object")
	}
	s := snapshot{Config: configDefaults()}
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decode source config: %w", err)
	}
	return &s, nil
}

// displayName is how errors and the WAF site name refer to a route: its site
// name, else its first domain. Errors fall back to the id so they still say
// which route failed when both are blank.
func (r *route) displayName() string {
	if r.SiteName != "" {
		return r.SiteName
	}
	if len(r.Domains) > 0 {
		return r.Domains[0]
	}
	return "#" + strconv.FormatUint(uint64(r.ID), 10)
}

// wafSite is the value of $openflare_waf_site: the site name, else the first
// domain (never the id fallback of displayName).
func (r *route) wafSite() string {
	if r.SiteName != "" {
		return r.SiteName
	}
	if len(r.Domains) > 0 {
		return r.Domains[0]
	}
	return ""
}

func (r *route) isPages() bool { return r.UpstreamType == "pages" }
