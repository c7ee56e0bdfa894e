// Package config loads agent.json (PROTOCOL 1.1): the file, then OPENFLARE_*
// environment overrides, then defaults relative to data_dir, then validation.
package config

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config is the resolved agent configuration.
type Config struct {
	// Path is the agent.json this configuration came from; it may not exist
	// when the agent runs from environment variables alone.
	Path string

	ServerURL      string
	AgentToken     string
	DiscoveryToken string
	NodeName       string
	// NodeIP is empty when it is to be detected (PROTOCOL 12.4).
	NodeIP        string
	OpenRestyPath string
	// OpenRestyResolvers is read and kept for compatibility; the resolvers
	// that count come from the server's openresty_config.
	OpenRestyResolvers []string

	DataDir             string
	MainConfigPath      string
	RouteConfigPath     string
	AccessLogPath       string
	CertDir             string
	OpenRestyCertDir    string
	LuaDir              string
	OpenRestyLuaDir     string
	RuntimeConfigDir    string
	PagesDir            string
	MMDBPath            string
	CityMMDBPath        string
	MMDBUpdateInterval  time.Duration
	MMDBDownloadURL     string
	CityMMDBDownloadURL string

	ObservabilityPort          int
	ObservabilityBufferPath    string
	ObservabilityReplayMinutes int
	StatePath                  string
	HeartbeatInterval          time.Duration
	RequestTimeout             time.Duration

	// MemoryLimit is the Go runtime's soft memory limit in bytes (not an
	// upstream key): the garbage collector works harder as the heap nears
	// it, which keeps the agent small on a 128 MiB router. A GOMEMLIMIT
	// environment variable takes precedence.
	MemoryLimit int64
	// LogMaxBytes is the size past which nginx's access and error logs
	// are rotated, and LogKeep how many rotated files of each are kept (0:
	// an error log is emptied in place instead). Not upstream keys: a
	// client that makes nginx log (long URIs to a failing origin) must not
	// fill the disk, and on a router /var is RAM.
	LogMaxBytes int64
	LogKeep     int
	// NginxUser is who the nginx workers run as when the agent is root
	// ("user", "user:group"; not an upstream key). Empty: the template's
	// user if it exists and is not root, else a system fallback.
	NginxUser string
	// TemplatePolicy is "strict" (the default: server configs may not run
	// code or name paths outside the agent's tree) or "trusted" (upstream's
	// behaviour). AllowedPaths are directories the owner lets configs name
	// besides the agent's tree. Neither is an upstream key.
	TemplatePolicy string
	AllowedPaths   []string
	// AllowLinkLocalOrigins lets a strict policy pass origins on
	// link-local and cloud metadata addresses (169.254.0.0/16, fe80::/10,
	// fd00:ec2::254), refused by default: a server that routed a public
	// domain there would read the instance's cloud credentials. Not an
	// upstream key.
	AllowLinkLocalOrigins bool

	// Self-update (PROTOCOL 10; none of these are upstream keys).
	// UpdateRepo is the only GitHub owner/name releases come from, whatever
	// the server's update_repo says; "off" turns self-update off.
	// UpdateAPIURL is the GitHub API base (tests point it at a local
	// server). UpdatePublicKey, when set, is the Ed25519 key every release
	// binary must carry a valid signature of (agent.json: 32 bytes in
	// base64 or hex). UpdateConfirmTimeout is how long a new binary has
	// to reach a successful heartbeat before the previous one comes back.
	UpdateRepo           string
	UpdateAPIURL         string
	UpdatePublicKey      ed25519.PublicKey
	UpdateConfirmTimeout time.Duration
}

// Defaults that do not depend on data_dir.
const (
	DefaultOpenRestyPath      = "openresty"
	DefaultObservabilityPort  = 18081
	DefaultReplayMinutes      = 60
	DefaultHeartbeatInterval  = 3 * time.Second
	DefaultRequestTimeout     = 10 * time.Second
	DefaultMMDBUpdateInterval = 24 * time.Hour
	// DefaultMemoryLimit suits a 128 MiB router: the steady state needs a
	// few MiB; IP-group snapshots (≤ 20 MiB) briefly need more, and the
	// limit is soft, so they still land.
	DefaultMemoryLimit         = 32 << 20
	DefaultMMDBDownloadURL     = "https://github.com/FyraLabs/geolite2/releases/latest/download/GeoLite2-Country.mmdb"
	DefaultCityMMDBDownloadURL = "https://github.com/FyraLabs/geolite2/releases/latest/download/GeoLite2-City.mmdb"
	DefaultUpdateRepo          = "openflare/openflare-agent"
	DefaultUpdateAPIURL        = "https://api.github.com"
	// DefaultUpdateConfirmTimeout leaves a new binary time to start nginx
	// and get through a slow uplink, and bounds how long a broken one runs.
	DefaultUpdateConfirmTimeout = 10 * time.Minute
)

// DefaultLogMaxBytes and DefaultLogKeep suit a 128 MiB router whose /var is
// a RAM disk: an error log and its copies take at most 12 MiB, the access
// log 24 MiB while the control plane is behind (it may grow to twice the
// size before it is moved away unread), and the access lines have reached
// the control plane long before they are dropped.
const (
	DefaultLogMaxBytes = 4 << 20
	DefaultLogKeep     = 2
)

// file mirrors agent.json. Pointers tell "absent" from "zero"; durations are
// raw so both forms (integer ms, Go duration string) can be read.
type file struct {
	ServerURL                  *string         `json:"server_url"`
	AgentToken                 *string         `json:"agent_token"`
	DiscoveryToken             *string         `json:"discovery_token"`
	NodeName                   *string         `json:"node_name"`
	NodeIP                     *string         `json:"node_ip"`
	OpenRestyPath              *string         `json:"openresty_path"`
	OpenRestyResolvers         json.RawMessage `json:"openresty_resolvers"`
	DataDir                    *string         `json:"data_dir"`
	MainConfigPath             *string         `json:"main_config_path"`
	RouteConfigPath            *string         `json:"route_config_path"`
	AccessLogPath              *string         `json:"access_log_path"`
	CertDir                    *string         `json:"cert_dir"`
	OpenRestyCertDir           *string         `json:"openresty_cert_dir"`
	LuaDir                     *string         `json:"lua_dir"`
	OpenRestyLuaDir            *string         `json:"openresty_lua_dir"`
	RuntimeConfigDir           *string         `json:"runtime_config_dir"`
	PagesDir                   *string         `json:"pages_dir"`
	MMDBPath                   *string         `json:"mmdb_path"`
	CityMMDBPath               *string         `json:"city_mmdb_path"`
	MMDBUpdateInterval         json.RawMessage `json:"mmdb_update_interval"`
	MMDBDownloadURL            *string         `json:"mmdb_download_url"`
	CityMMDBDownloadURL        *string         `json:"city_mmdb_download_url"`
	ObservabilityPort          json.RawMessage `json:"openresty_observability_port"`
	ObservabilityBufferPath    *string         `json:"observability_buffer_path"`
	ObservabilityReplayMinutes json.RawMessage `json:"observability_replay_minutes"`
	StatePath                  *string         `json:"state_path"`
	HeartbeatInterval          json.RawMessage `json:"heartbeat_interval"`
	RequestTimeout             json.RawMessage `json:"request_timeout"`
	MemoryLimit                json.RawMessage `json:"memory_limit"`
	LogMaxBytes                json.RawMessage `json:"log_max_bytes"`
	LogKeep                    json.RawMessage `json:"log_keep"`
	NginxUser                  *string         `json:"nginx_user"`
	TemplatePolicy             *string         `json:"template_policy"`
	AllowedPaths               []string        `json:"allowed_paths"`
	AllowLinkLocalOrigins      *bool           `json:"allow_link_local_origins"`
	UpdateRepo                 *string         `json:"update_repo"`
	UpdateAPIURL               *string         `json:"update_api_url"`
	UpdatePublicKey            *string         `json:"update_public_key"`
	UpdateConfirmTimeout       json.RawMessage `json:"update_confirm_timeout"`
}

// Env lists every environment override, in PROTOCOL 1.1 order.
var Env = []string{
	"OPENFLARE_SERVER_URL",
	"OPENFLARE_AGENT_TOKEN",
	"OPENFLARE_DISCOVERY_TOKEN",
	"OPENFLARE_NODE_NAME",
	"OPENFLARE_NODE_IP",
	"OPENFLARE_OPENRESTY_PATH",
	"OPENFLARE_DATA_DIR",
	"OPENFLARE_PAGES_DIR",
	"OPENFLARE_MMDB_PATH",
	"OPENFLARE_CITY_MMDB_PATH",
	"OPENFLARE_MMDB_UPDATE_INTERVAL",
	"OPENFLARE_MMDB_DOWNLOAD_URL",
	"OPENFLARE_CITY_MMDB_DOWNLOAD_URL",
	"OPENFLARE_OPENRESTY_OBSERVABILITY_PORT",
	"OPENFLARE_HEARTBEAT_INTERVAL",
	"OPENFLARE_REQUEST_TIMEOUT",
}

// Load reads path, applies the environment (getenv, usually os.Getenv),
// fills defaults and validates. Warnings (e.g. unknown keys) do not fail the
// load. Errors name the key and the bad value, never a token.
func Load(path string, getenv func(string) string) (*Config, []string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var f file
	var warnings []string
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !anyEnv(getenv) {
			return nil, nil, fmt.Errorf("config %s: file not found and no OPENFLARE_* environment variable set", path)
		}
	case err != nil:
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	default:
		if err := decodeStrict(data, &f); err != nil {
			return nil, nil, fmt.Errorf("config %s: %w", path, err)
		}
		unknown, err := unknownKeys(data)
		if err != nil {
			return nil, nil, fmt.Errorf("config %s: %w", path, err)
		}
		for _, k := range unknown {
			warnings = append(warnings, fmt.Sprintf("config %s: unknown key %q ignored", path, k))
		}
	}
	c, err := resolve(path, &f, getenv)
	if err != nil {
		return nil, warnings, fmt.Errorf("config %s: %w", path, err)
	}
	return c, warnings, nil
}

func anyEnv(getenv func(string) string) bool {
	for _, k := range Env {
		if strings.TrimSpace(getenv(k)) != "" {
			return true
		}
	}
	return false
}

// decodeStrict decodes agent.json, turning type errors into messages that
// name the key. Token values never appear: type errors carry no value.
func decodeStrict(data []byte, f *file) error {
	if err := json.Unmarshal(data, f); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("key %q: expected %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, se)
		}
		return fmt.Errorf("invalid JSON: %v", err)
	}
	return nil
}

func unknownKeys(data []byte) ([]string, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	known := map[string]bool{}
	for _, k := range jsonKeys() {
		known[k] = true
	}
	var out []string
	for k := range raw {
		if !known[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out, nil
}

func resolve(path string, f *file, getenv func(string) string) (*Config, error) {
	env := func(k string) (string, bool) {
		v := strings.TrimSpace(getenv(k))
		return v, v != ""
	}
	str := func(p *string, envKey string) string {
		var v string
		if p != nil {
			v = strings.TrimSpace(*p)
		}
		if envKey != "" {
			if e, ok := env(envKey); ok {
				v = e
			}
		}
		return v
	}
	c := &Config{Path: path}
	c.ServerURL = strings.TrimRight(str(f.ServerURL, "OPENFLARE_SERVER_URL"), "/")
	c.AgentToken = str(f.AgentToken, "OPENFLARE_AGENT_TOKEN")
	c.DiscoveryToken = str(f.DiscoveryToken, "OPENFLARE_DISCOVERY_TOKEN")
	c.NodeName = str(f.NodeName, "OPENFLARE_NODE_NAME")
	c.NodeIP = str(f.NodeIP, "OPENFLARE_NODE_IP")
	c.OpenRestyPath = str(f.OpenRestyPath, "OPENFLARE_OPENRESTY_PATH")
	if c.OpenRestyPath == "" {
		c.OpenRestyPath = DefaultOpenRestyPath
	}
	resolvers, err := parseResolvers(f.OpenRestyResolvers)
	if err != nil {
		return nil, err
	}
	c.OpenRestyResolvers = resolvers
	if c.NodeName == "" {
		h, _ := os.Hostname()
		c.NodeName = strings.TrimSpace(h)
	}

	c.DataDir = str(f.DataDir, "OPENFLARE_DATA_DIR")
	if c.DataDir == "" {
		c.DataDir = filepath.Join(filepath.Dir(path), "data")
	}
	dd := func(p *string, envKey, def string) string {
		if v := str(p, envKey); v != "" {
			return v
		}
		return filepath.Join(c.DataDir, def)
	}
	c.MainConfigPath = dd(f.MainConfigPath, "", "etc/nginx/nginx.conf")
	c.RouteConfigPath = dd(f.RouteConfigPath, "", "etc/nginx/conf.d/openflare_routes.conf")
	c.AccessLogPath = dd(f.AccessLogPath, "", "var/log/openflare/access.log")
	c.CertDir = dd(f.CertDir, "", "etc/nginx/certs")
	c.OpenRestyCertDir = str(f.OpenRestyCertDir, "")
	if c.OpenRestyCertDir == "" {
		c.OpenRestyCertDir = c.CertDir
	}
	c.LuaDir = dd(f.LuaDir, "", "etc/nginx/lua")
	c.OpenRestyLuaDir = str(f.OpenRestyLuaDir, "")
	if c.OpenRestyLuaDir == "" {
		c.OpenRestyLuaDir = c.LuaDir
	}
	c.RuntimeConfigDir = dd(f.RuntimeConfigDir, "", "etc/openflare")
	c.PagesDir = dd(f.PagesDir, "OPENFLARE_PAGES_DIR", "var/lib/openflare/pages")
	c.MMDBPath = dd(f.MMDBPath, "OPENFLARE_MMDB_PATH", "etc/openflare/GeoLite2-Country.mmdb")
	c.CityMMDBPath = dd(f.CityMMDBPath, "OPENFLARE_CITY_MMDB_PATH", "etc/openflare/GeoLite2-City.mmdb")
	c.MMDBDownloadURL = str(f.MMDBDownloadURL, "OPENFLARE_MMDB_DOWNLOAD_URL")
	if c.MMDBDownloadURL == "" {
		c.MMDBDownloadURL = DefaultMMDBDownloadURL
	}
	c.CityMMDBDownloadURL = str(f.CityMMDBDownloadURL, "OPENFLARE_CITY_MMDB_DOWNLOAD_URL")
	if c.CityMMDBDownloadURL == "" {
		c.CityMMDBDownloadURL = DefaultCityMMDBDownloadURL
	}
	c.ObservabilityBufferPath = dd(f.ObservabilityBufferPath, "", "var/lib/openflare/observability-buffer.json")
	c.StatePath = dd(f.StatePath, "", "var/lib/openflare/agent-state.json")

	durations := []struct {
		key, envKey string
		raw         json.RawMessage
		dst         *time.Duration
		def         time.Duration
	}{
		{"mmdb_update_interval", "OPENFLARE_MMDB_UPDATE_INTERVAL", f.MMDBUpdateInterval, &c.MMDBUpdateInterval, DefaultMMDBUpdateInterval},
		{"heartbeat_interval", "OPENFLARE_HEARTBEAT_INTERVAL", f.HeartbeatInterval, &c.HeartbeatInterval, DefaultHeartbeatInterval},
		{"request_timeout", "OPENFLARE_REQUEST_TIMEOUT", f.RequestTimeout, &c.RequestTimeout, DefaultRequestTimeout},
		{"update_confirm_timeout", "", f.UpdateConfirmTimeout, &c.UpdateConfirmTimeout, DefaultUpdateConfirmTimeout},
	}
	for _, d := range durations {
		v, set, err := durationValue(d.raw, d.envKey, env)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", d.key, err)
		}
		if !set {
			v = d.def
		}
		if v <= 0 {
			return nil, fmt.Errorf("key %q: must be positive, got %s", d.key, v)
		}
		*d.dst = v
	}

	port, set, err := intValue(f.ObservabilityPort, "OPENFLARE_OPENRESTY_OBSERVABILITY_PORT", env)
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", "openresty_observability_port", err)
	}
	if !set {
		port = DefaultObservabilityPort
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("key %q: must be 1-65535, got %d", "openresty_observability_port", port)
	}
	c.ObservabilityPort = int(port)
	minutes, set, err := intValue(f.ObservabilityReplayMinutes, "", env)
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", "observability_replay_minutes", err)
	}
	if !set {
		minutes = DefaultReplayMinutes
	}
	if minutes <= 0 {
		return nil, fmt.Errorf("key %q: must be positive, got %d", "observability_replay_minutes", minutes)
	}
	c.ObservabilityReplayMinutes = int(minutes)

	limit, err := sizeValue(f.MemoryLimit, DefaultMemoryLimit, 4<<20)
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", "memory_limit", err)
	}
	c.MemoryLimit = limit
	// No environment overrides: like memory_limit, the node's own limits.
	// Below 64 KiB a log would turn over every second under any traffic.
	if c.LogMaxBytes, err = sizeValue(f.LogMaxBytes, DefaultLogMaxBytes, 64<<10); err != nil {
		return nil, fmt.Errorf("key %q: %w", "log_max_bytes", err)
	}
	keep, set, err := intValue(f.LogKeep, "", env)
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", "log_keep", err)
	}
	if !set {
		keep = DefaultLogKeep
	}
	// Every rotated file is looked at on every check.
	if keep < 0 || keep > 100 {
		return nil, fmt.Errorf("key %q: must be 0-100, got %d", "log_keep", keep)
	}
	c.LogKeep = int(keep)
	c.TemplatePolicy = str(f.TemplatePolicy, "")
	switch c.TemplatePolicy {
	case "":
		c.TemplatePolicy = "strict"
	case "strict", "trusted":
	default:
		return nil, fmt.Errorf("key %q: %q is neither \"strict\" nor \"trusted\"", "template_policy", c.TemplatePolicy)
	}
	for _, p := range f.AllowedPaths {
		if !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
			return nil, fmt.Errorf("key %q: %q is not an absolute directory below /", "allowed_paths", p)
		}
		c.AllowedPaths = append(c.AllowedPaths, filepath.Clean(p))
	}
	// No environment override, as for the other policy keys: what a
	// server config may do is for the node's own agent.json.
	c.AllowLinkLocalOrigins = f.AllowLinkLocalOrigins != nil && *f.AllowLinkLocalOrigins
	c.NginxUser = str(f.NginxUser, "")
	if strings.ContainsAny(c.NginxUser, ";{}#\"'\n\\") {
		return nil, fmt.Errorf("key %q: %q is not a user name or user:group", "nginx_user", c.NginxUser)
	}
	if err := c.resolveUpdate(f, str); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// resolveUpdate reads the self-update keys. They have no environment
// overrides: which binaries a node accepts is for its own agent.json.
func (c *Config) resolveUpdate(f *file, str func(*string, string) string) error {
	c.UpdateRepo = str(f.UpdateRepo, "")
	switch {
	case c.UpdateRepo == "":
		c.UpdateRepo = DefaultUpdateRepo
	case c.UpdateRepo != "off" && !validRepo(c.UpdateRepo):
		return fmt.Errorf("key %q: %q is not a GitHub owner/name or \"off\"", "update_repo", c.UpdateRepo)
	}
	c.UpdateAPIURL = strings.TrimRight(str(f.UpdateAPIURL, ""), "/")
	if c.UpdateAPIURL == "" {
		c.UpdateAPIURL = DefaultUpdateAPIURL
	}
	if err := checkServerURL(c.UpdateAPIURL); err != nil {
		return fmt.Errorf("key %q: %w", "update_api_url", err)
	}
	if k := str(f.UpdatePublicKey, ""); k != "" {
		key, err := parsePublicKey(k)
		if err != nil {
			return fmt.Errorf("key %q: %w", "update_public_key", err)
		}
		c.UpdatePublicKey = key
	}
	return nil
}

// validRepo accepts GitHub's owner/name characters.
func validRepo(s string) bool {
	owner, name, ok := strings.Cut(s, "/")
	ok = ok && owner != "" && name != "" && name != "." && name != ".."
	for _, r := range owner + name {
		ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}
	return ok
}

// parsePublicKey reads a raw 32-byte Ed25519 public key in hex (64
// digits) or standard base64 (44 characters with padding).
func parsePublicKey(s string) (ed25519.PublicKey, error) {
	if b, err := hex.DecodeString(s); err == nil && len(b) == ed25519.PublicKeySize {
		return b, nil
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) == ed25519.PublicKeySize {
		return b, nil
	}
	return nil, fmt.Errorf("not a 32-byte Ed25519 public key in hex or base64")
}

func (c *Config) validate() error {
	if c.ServerURL == "" {
		return fmt.Errorf("key %q: required", "server_url")
	}
	if err := checkServerURL(c.ServerURL); err != nil {
		return fmt.Errorf("key %q: %w", "server_url", err)
	}
	if c.AgentToken == "" && c.DiscoveryToken == "" {
		return fmt.Errorf("keys %q and %q: at least one token is required", "agent_token", "discovery_token")
	}
	if c.NodeName == "" {
		return fmt.Errorf("key %q: empty and the hostname is unknown", "node_name")
	}
	if c.NodeIP != "" && !validIP(c.NodeIP) {
		return fmt.Errorf("key %q: %q is not an IP address", "node_ip", c.NodeIP)
	}
	return nil
}

// checkServerURL refuses anything but a plain http(s) base URL: the token
// travels in a header, so credentials in the URL would be a second secret in
// a place that gets logged.
func checkServerURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		// The value may carry credentials: name it only when it cannot.
		if strings.Contains(raw, "@") {
			return errors.New("not a URL (value withheld: it may carry credentials)")
		}
		return fmt.Errorf("%q is not a URL: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme of %q must be http or https", redactURL(u))
	}
	if u.User != nil {
		return fmt.Errorf("%q must not carry credentials", redactURL(u))
	}
	if u.Host == "" {
		return fmt.Errorf("%q has no host", redactURL(u))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q must not carry a query or fragment", redactURL(u))
	}
	return nil
}

func redactURL(u *url.URL) string {
	c := *u
	if c.User != nil {
		c.User = url.User("xxxxx")
	}
	c.RawQuery = ""
	return c.String()
}

// durationValue reads an integer number of milliseconds or a Go duration
// string from the environment (which wins) or the file.
func durationValue(raw json.RawMessage, envKey string, env func(string) (string, bool)) (time.Duration, bool, error) {
	if envKey != "" {
		if v, ok := env(envKey); ok {
			d, err := parseDuration(v)
			if err != nil {
				return 0, false, fmt.Errorf("environment %s: %w", envKey, err)
			}
			return d, true, nil
		}
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, false, err
		}
		d, err := parseDuration(s)
		return d, true, err
	}
	d, err := parseDuration(string(raw))
	return d, true, err
}

func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms > int64(365*24*time.Hour/time.Millisecond) || ms < 0 {
			return 0, fmt.Errorf("%s ms is out of range", s)
		}
		return time.Duration(ms) * time.Millisecond, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither milliseconds nor a duration like \"30s\"", s)
	}
	return d, nil
}

func intValue(raw json.RawMessage, envKey string, env func(string) (string, bool)) (int64, bool, error) {
	if envKey != "" {
		if v, ok := env(envKey); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, false, fmt.Errorf("environment %s: %q is not an integer", envKey, v)
			}
			return n, true, nil
		}
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s is not an integer", raw)
	}
	return n, true, nil
}

// sizeValue reads a byte count of at least min: a JSON integer, or a
// string with an optional KiB/MiB/GiB (or K/M/G) suffix. Absent means def.
func sizeValue(raw json.RawMessage, def, min int64) (int64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	s := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
	}
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size like 33554432 or \"32MiB\"", s)
	}
	if n*mult < min {
		return 0, fmt.Errorf("%s is below the %s minimum", s, sizeText(min))
	}
	return n * mult, nil
}

// sizeText writes a byte count the way agent.json may give it: in MiB or
// KiB when it is a whole number of them.
func sizeText(n int64) string {
	switch {
	case n != 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n != 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// parseResolvers accepts a list or a whitespace/comma separated string and
// de-duplicates it, as upstream does.
func parseResolvers(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var items []string
	var one string
	if err := json.Unmarshal(raw, &items); err != nil {
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, fmt.Errorf("key %q: expected a list of strings or a string", "openresty_resolvers")
		}
		items = []string{one}
	}
	var out []string
	seen := map[string]bool{}
	for _, it := range items {
		for _, f := range strings.FieldsFunc(it, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out, nil
}
