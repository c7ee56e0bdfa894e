package controlplane

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// StockMainTemplate is the server's built-in main_config_template, byte for
// byte (shared/fixtures/stock_main_template.conf).
//
//go:embed stock_main_template.conf
var StockMainTemplate string

// proxyCachePathPlaceholder is what the server stores as cache_path when the
// cache is on and the path is empty or under /var/ (PROTOCOL 4.2).
const proxyCachePathPlaceholder = "__OPENFLARE_PROXY_CACHE_PATH__"

// Source builds a source_config_json document the way the server publishes
// it: {"routes","openresty_config","waf"} with the server's key order,
// omitempty rules and fresh-install defaults.
type Source struct {
	Routes []Route
	// OpenResty overrides openresty_config keys (PROTOCOL 4.2 names). A nil
	// value removes a key; keys the server does not know are appended in
	// sorted order.
	OpenResty map[string]any
	// WAF is the waf document; nil means the server's default: the global
	// start→allow group and one binding per route.
	WAF *WAF
}

// Route is one published route (PROTOCOL 4.2). Published routes are always
// enabled, so "enabled" is always true. Source.JSON fills what the server
// fills: upstreams [origin_url], domain_cert_ids of zeros, upstream_type
// "direct".
type Route struct {
	ID                 uint64
	SiteName           string
	Domains            []string
	OriginURL          string
	OriginHost         string
	Upstreams          []string
	EnableHTTPS        bool
	DomainCertIDs      []uint64 // parallel to Domains; 0 = no certificate
	RedirectHTTP       bool
	LimitConnPerServer int    // -1 disables, 0 uses the default
	LimitConnPerIP     int    // -1 disables, 0 uses the default
	LimitRate          string // "512k"; "-1" disables
	LimitReqPerIP      string // "10r/s"; "-1" disables
	CacheEnabled       bool
	CachePolicy        string
	CacheRules         []string
	CustomHeaders      []Header
	BasicAuthEnabled   bool
	BasicAuthUsername  string
	BasicAuthPassword  string
	UpstreamType       string
	// Pages makes this a Pages route (upstream_type "pages") serving the
	// project's current release.
	Pages *PagesDeployment
}

// PagesDeployment is a Pages route's deployment block (PROTOCOL 5.2).
type PagesDeployment struct {
	ProjectID          uint64 `json:"project_id"`
	DeploymentID       uint64 `json:"deployment_id,omitempty"`
	EntryFile          string `json:"entry_file,omitempty"`
	SPAFallbackEnabled bool   `json:"spa_fallback_enabled"`
	SPAFallbackPath    string `json:"spa_fallback_path,omitempty"`
	// LocalRoot defaults to the project's current release.
	LocalRoot string `json:"local_root"`
}

// Header is one custom proxy header of a route.
type Header struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// WAF is the waf document (PROTOCOL 4.2).
type WAF struct {
	// RuleGroups nil means []RuleGroup{DefaultRuleGroup()}.
	RuleGroups []RuleGroup `json:"rule_groups"`
	// IPGroups are the publish-time copies; omitted when empty.
	IPGroups []SnapshotIPGroup `json:"ip_groups,omitempty"`
	// Bindings nil means one binding per route, bound to every enabled
	// non-global rule group, sorted by site name like the server.
	Bindings []Binding `json:"bindings"`
}

// RuleGroup is one WAF rule group.
type RuleGroup struct {
	ID       uint64 `json:"id"`
	Name     string `json:"name"`
	Enabled  bool   `json:"enabled"`
	IsGlobal bool   `json:"is_global"`
	Graph    Graph  `json:"graph"`
}

// Graph is a rule group's node graph; nodes are keyed by node id.
type Graph struct {
	Entry string               `json:"entry"`
	Nodes map[string]GraphNode `json:"nodes"`
}

// GraphNode is one graph node. Config is raw JSON kept in its key order
// (nil is written as {}); Next maps an outcome ("next", "true", "false") to
// a node id.
type GraphNode struct {
	Type   string            `json:"type"`
	Config json.RawMessage   `json:"config"`
	Next   map[string]string `json:"next,omitempty"`
}

// MarshalJSON writes {"type","config","next"?}.
func (n GraphNode) MarshalJSON() ([]byte, error) {
	cfg := n.Config
	if len(cfg) == 0 {
		cfg = json.RawMessage("{}")
	}
	return object{
		{"type", n.Type, false},
		{"config", cfg, false},
		{"next", n.Next, true},
	}.MarshalJSON()
}

// SnapshotIPGroup is the publish-time copy of an IP group inside waf.
type SnapshotIPGroup struct {
	ID      uint64   `json:"id"`
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Enabled bool     `json:"enabled"`
	IPList  []string `json:"ip_list,omitempty"`
}

// Binding binds rule groups to a route's site; RuleGroupIDs is never null.
type Binding struct {
	RouteID      uint64   `json:"route_id"`
	SiteName     string   `json:"site_name"`
	RuleGroupIDs []uint64 `json:"rule_group_ids"`
}

// DefaultRuleGroup is the server's fresh-install global rule group:
// start → allow.
func DefaultRuleGroup() RuleGroup {
	return RuleGroup{
		ID: 1, Name: "全局规则组", Enabled: true, IsGlobal: true,
		Graph: Graph{Entry: "start", Nodes: map[string]GraphNode{
			"start": {Type: "start", Next: map[string]string{"next": "allow"}},
			"allow": {Type: "allow"},
		}},
	}
}

// IPMatchRuleGroup is a non-global rule group that blocks (403) clients in
// the given IP groups: start → ip_match{ip_group_ids} → block | allow.
func IPMatchRuleGroup(id uint64, name string, ipGroupIDs ...uint64) RuleGroup {
	ids := ipGroupIDs
	if ids == nil {
		ids = []uint64{}
	}
	cfg, _ := json.Marshal(map[string][]uint64{"ip_group_ids": ids}) // a map of uint64 slices always encodes
	return RuleGroup{
		ID: id, Name: name, Enabled: true,
		Graph: Graph{Entry: "start", Nodes: map[string]GraphNode{
			"start": {Type: "start", Next: map[string]string{"next": "ipm"}},
			"ipm":   {Type: "ip_match", Config: cfg, Next: map[string]string{"true": "block", "false": "allow"}},
			"block": {Type: "block", Config: json.RawMessage(`{"status_code":403}`)},
			"allow": {Type: "allow"},
		}},
	}
}

// JSON returns the document as the server stores it in source_config_json.
// It panics when an OpenResty override cannot be encoded as JSON.
func (s Source) JSON() string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("controlplane: source JSON: %v", err))
	}
	return string(b)
}

// MarshalJSON writes the document (see JSON).
func (s Source) MarshalJSON() ([]byte, error) {
	routes := make([]Route, len(s.Routes))
	for i, r := range s.Routes {
		routes[i] = r.withServerDefaults()
	}
	return object{
		{"routes", routes, false},
		{"openresty_config", openRestyConfig(s.OpenResty), false},
		{"waf", s.WAF.document(routes), false},
	}.MarshalJSON()
}

func (r Route) withServerDefaults() Route {
	if r.Pages != nil {
		d := *r.Pages
		if d.LocalRoot == "" {
			d.LocalRoot = fmt.Sprintf("__OPENFLARE_PAGES_DIR__/projects/%d/current", d.ProjectID)
		}
		r.Pages = &d
		r.UpstreamType = "pages"
		if r.OriginURL == "" {
			r.OriginURL = fmt.Sprintf("openflare-pages://project/%d", d.ProjectID)
		}
	}
	if len(r.Upstreams) == 0 && r.OriginURL != "" {
		r.Upstreams = []string{r.OriginURL}
	}
	if r.DomainCertIDs == nil && len(r.Domains) > 0 {
		r.DomainCertIDs = make([]uint64, len(r.Domains))
	}
	if r.UpstreamType == "" {
		r.UpstreamType = "direct"
	}
	return r
}

// MarshalJSON writes the route in the server's key order and omitempty
// rules, as it is, without Source.JSON's defaults.
func (r Route) MarshalJSON() ([]byte, error) {
	return object{
		{"id", r.ID, true},
		{"site_name", r.SiteName, true},
		{"domains", r.Domains, true},
		{"origin_url", r.OriginURL, false},
		{"origin_host", r.OriginHost, true},
		{"upstreams", r.Upstreams, true},
		{"enabled", true, false},
		{"enable_https", r.EnableHTTPS, false},
		{"domain_cert_ids", r.DomainCertIDs, true},
		{"redirect_http", r.RedirectHTTP, false},
		{"limit_conn_per_server", r.LimitConnPerServer, true},
		{"limit_conn_per_ip", r.LimitConnPerIP, true},
		{"limit_rate", r.LimitRate, true},
		{"limit_req_per_ip", r.LimitReqPerIP, true},
		{"cache_enabled", r.CacheEnabled, false},
		{"cache_policy", r.CachePolicy, true},
		{"cache_rules", r.CacheRules, true},
		{"custom_headers", r.CustomHeaders, true},
		{"basic_auth_enabled", r.BasicAuthEnabled, true},
		{"basic_auth_username", r.BasicAuthUsername, true},
		{"basic_auth_password", r.BasicAuthPassword, true},
		{"upstream_type", r.UpstreamType, true},
		{"pages_project_id", r.pagesProjectID(), true},
		{"pages_deployment", r.Pages, true},
	}.MarshalJSON()
}

func (r Route) pagesProjectID() uint64 {
	if r.Pages == nil {
		return 0
	}
	return r.Pages.ProjectID
}

// openRestyDefaults are the fresh-install openresty_config values in the
// server's key order; omitEmpty marks the keys the server omits when empty.
func openRestyDefaults() object {
	return object{
		{"default_server_return_status", 421, false},
		{"worker_processes", "auto", false},
		{"worker_connections", 4096, false},
		{"worker_rlimit_nofile", 65535, false},
		{"events_use", "epoll", true},
		{"events_multi_accept_enabled", true, false},
		{"keepalive_timeout", 20, false},
		{"keepalive_requests", 1000, false},
		{"client_header_timeout", 15, false},
		{"client_body_timeout", 15, false},
		{"client_max_body_size", "64m", false},
		{"large_client_header_buffers", "4 16k", false},
		{"send_timeout", 30, false},
		{"proxy_connect_timeout", 3, false},
		{"proxy_send_timeout", 60, false},
		{"proxy_read_timeout", 60, false},
		{"websocket_enabled", true, false},
		{"http3_enabled", true, false},
		{"proxy_request_buffering", false, false},
		{"proxy_buffering_enabled", true, false},
		{"proxy_buffers", "16 16k", false},
		{"proxy_buffer_size", "8k", false},
		{"proxy_busy_buffers_size", "64k", false},
		{"gzip_enabled", true, false},
		{"gzip_min_length", 1024, false},
		{"gzip_comp_level", 5, false},
		{"resolvers", "", true},
		{"cache_enabled", false, false},
		{"cache_path", "", true},
		{"cache_levels", "1:2", false},
		{"cache_inactive", "30m", false},
		{"cache_max_size", "1g", false},
		{"cache_key_template", "$scheme$host$request_uri", false},
		{"cache_lock_enabled", true, false},
		{"cache_lock_timeout", "5s", false},
		{"cache_use_stale", "error timeout updating http_500 http_502 http_503 http_504", false},
		{"main_config_template", StockMainTemplate, true},
		{"default_limit_conn_per_server", 0, true},
		{"default_limit_conn_per_ip", 0, true},
		{"default_limit_rate", "", true},
		{"default_limit_req_per_ip", "", true},
		{"origin_error_page_enabled", true, false},
		{"origin_error_page_status_codes", []string{"500-599"}, true},
		{"origin_error_page_html", "", true},
		{"origin_error_page_get_only", false, true},
		{"sw_offline_enabled", false, true},
		{"sw_offline_html", "", true},
		{"sw_offline_domains", []string(nil), true},
	}
}

// openRestyConfig applies overrides to the defaults, then the server's
// cache_path rewrite.
func openRestyConfig(overrides map[string]any) object {
	cfg := openRestyDefaults()
	known := map[string]bool{}
	for i := range cfg {
		known[cfg[i].key] = true
		if v, ok := overrides[cfg[i].key]; ok {
			cfg[i].val = v
		}
	}
	var extra []string
	for k := range overrides {
		if !known[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		cfg = append(cfg, member{k, overrides[k], false})
	}
	cfg = slices.DeleteFunc(cfg, func(m member) bool { return m.val == nil })
	if on, _ := cfg.get("cache_enabled").(bool); on {
		if p, _ := cfg.get("cache_path").(string); p == "" || strings.HasPrefix(p, "/var/") {
			cfg.set("cache_path", proxyCachePathPlaceholder)
		}
	}
	return cfg
}

// document is the waf object, with the server's defaults for a nil WAF,
// nil rule groups and nil bindings.
func (w *WAF) document(routes []Route) object {
	var doc WAF
	if w != nil {
		doc = *w
	}
	if doc.RuleGroups == nil {
		doc.RuleGroups = []RuleGroup{DefaultRuleGroup()}
	}
	if doc.Bindings == nil {
		doc.Bindings = defaultBindings(routes, doc.RuleGroups)
	}
	bindings := make([]Binding, len(doc.Bindings))
	for i, b := range doc.Bindings {
		if b.RuleGroupIDs == nil {
			b.RuleGroupIDs = []uint64{}
		}
		bindings[i] = b
	}
	return object{
		{"rule_groups", doc.RuleGroups, false},
		{"ip_groups", doc.IPGroups, true},
		{"bindings", bindings, false},
	}
}

func defaultBindings(routes []Route, groups []RuleGroup) []Binding {
	ids := []uint64{}
	for _, g := range groups {
		if g.Enabled && !g.IsGlobal {
			ids = append(ids, g.ID)
		}
	}
	out := make([]Binding, len(routes))
	for i, r := range routes {
		out[i] = Binding{RouteID: r.ID, SiteName: r.SiteName, RuleGroupIDs: ids}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].SiteName < out[j].SiteName })
	return out
}

// member is one key of an ordered JSON object.
type member struct {
	key       string
	val       any
	omitEmpty bool
}

// object is a JSON object written in member order, Go-encoded values,
// omitting empty values of omitEmpty members like encoding/json's omitempty.
type object []member

func (o object) get(key string) any {
	for _, m := range o {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

func (o object) set(key string, val any) {
	for i := range o {
		if o[i].key == key {
			o[i].val = val
		}
	}
}

// MarshalJSON writes the members in order.
func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for _, m := range o {
		if m.omitEmpty && isEmpty(m.val) {
			continue
		}
		v, err := json.Marshal(m.val)
		if err != nil {
			return nil, fmt.Errorf("encode %q: %w", m.key, err)
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key) // a string always encodes
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func isEmpty(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Map, reflect.String, reflect.Array:
		return rv.Len() == 0
	}
	return rv.IsZero()
}
