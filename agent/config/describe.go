package config

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
)

// jsonKeys lists the agent.json keys this agent understands.
func jsonKeys() []string {
	t := reflect.TypeOf(file{})
	keys := make([]string, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		keys = append(keys, strings.Split(t.Field(i).Tag.Get("json"), ",")[0])
	}
	return keys
}

func validIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// Mask hides a secret, keeping only enough to tell two tokens apart.
func Mask(secret string) string {
	switch {
	case secret == "":
		return ""
	case len(secret) <= 8:
		return "****"
	default:
		return secret[:4] + "****"
	}
}

// Describe renders the resolved configuration as "key = value" lines in
// agent.json key order, tokens masked, for `openflare-agent check`.
func (c *Config) Describe() string {
	ip := c.NodeIP
	if ip == "" {
		ip = "(detected at run time)"
	}
	rows := [][2]string{
		{"server_url", c.ServerURL},
		{"agent_token", Mask(c.AgentToken)},
		{"discovery_token", Mask(c.DiscoveryToken)},
		{"node_name", c.NodeName},
		{"node_ip", ip},
		{"openresty_path", c.OpenRestyPath},
		{"openresty_resolvers", strings.Join(c.OpenRestyResolvers, " ")},
		{"data_dir", c.DataDir},
		{"main_config_path", c.MainConfigPath},
		{"route_config_path", c.RouteConfigPath},
		{"access_log_path", c.AccessLogPath},
		{"cert_dir", c.CertDir},
		{"openresty_cert_dir", c.OpenRestyCertDir},
		{"lua_dir", c.LuaDir},
		{"openresty_lua_dir", c.OpenRestyLuaDir},
		{"runtime_config_dir", c.RuntimeConfigDir},
		{"pages_dir", c.PagesDir},
		{"mmdb_path", c.MMDBPath},
		{"city_mmdb_path", c.CityMMDBPath},
		{"mmdb_update_interval", c.MMDBUpdateInterval.String()},
		{"mmdb_download_url", c.MMDBDownloadURL},
		{"city_mmdb_download_url", c.CityMMDBDownloadURL},
		{"openresty_observability_port", fmt.Sprint(c.ObservabilityPort)},
		{"observability_buffer_path", c.ObservabilityBufferPath},
		{"observability_replay_minutes", fmt.Sprint(c.ObservabilityReplayMinutes)},
		{"state_path", c.StatePath},
		{"heartbeat_interval", c.HeartbeatInterval.String()},
		{"request_timeout", c.RequestTimeout.String()},
		{"memory_limit", fmt.Sprintf("%d MiB", c.MemoryLimit>>20)},
		{"log_max_bytes", sizeText(c.LogMaxBytes)},
		{"log_keep", fmt.Sprint(c.LogKeep)},
		{"nginx_user", nginxUser(c.NginxUser)},
		{"template_policy", c.TemplatePolicy},
		{"allowed_paths", strings.Join(c.AllowedPaths, " ")},
		{"allow_link_local_origins", fmt.Sprint(c.AllowLinkLocalOrigins)},
		{"update_repo", c.UpdateRepo},
		{"update_api_url", c.UpdateAPIURL},
		{"update_public_key", publicKey(c.UpdatePublicKey)},
		{"update_confirm_timeout", c.UpdateConfirmTimeout.String()},
	}
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "%-30s %s\n", r[0], r[1])
	}
	return b.String()
}

func publicKey(k []byte) string {
	if len(k) == 0 {
		return "(none: SHA-256 digest only)"
	}
	return base64.StdEncoding.EncodeToString(k)
}

func nginxUser(u string) string {
	if u == "" {
		return "(template's user if it exists, else openflare-www, www-data or nobody)"
	}
	return u
}
