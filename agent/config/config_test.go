package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func noEnv(string) string { return "" }

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaultsRelativeToDataDir(t *testing.T) {
	path := writeConfig(t, `{"server_url":"https://cp.example/of/","agent_token":"tok-123456789","node_name":"edge-1"}`)
	c, warns, err := Load(path, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 0 {
		t.Fatalf("warnings: %v", warns)
	}
	dd := filepath.Join(filepath.Dir(path), "data")
	want := map[string]string{
		"server_url":                "https://cp.example/of",
		"data_dir":                  dd,
		"main_config_path":          dd + "/etc/nginx/nginx.conf",
		"route_config_path":         dd + "/etc/nginx/conf.d/openflare_routes.conf",
		"access_log_path":           dd + "/var/log/openflare/access.log",
		"cert_dir":                  dd + "/etc/nginx/certs",
		"openresty_cert_dir":        dd + "/etc/nginx/certs",
		"lua_dir":                   dd + "/etc/nginx/lua",
		"openresty_lua_dir":         dd + "/etc/nginx/lua",
		"runtime_config_dir":        dd + "/etc/openflare",
		"pages_dir":                 dd + "/var/lib/openflare/pages",
		"mmdb_path":                 dd + "/etc/openflare/GeoLite2-Country.mmdb",
		"city_mmdb_path":            dd + "/etc/openflare/GeoLite2-City.mmdb",
		"observability_buffer_path": dd + "/var/lib/openflare/observability-buffer.json",
		"state_path":                dd + "/var/lib/openflare/agent-state.json",
	}
	got := map[string]string{
		"server_url": c.ServerURL, "data_dir": c.DataDir, "main_config_path": c.MainConfigPath,
		"route_config_path": c.RouteConfigPath, "access_log_path": c.AccessLogPath, "cert_dir": c.CertDir,
		"openresty_cert_dir": c.OpenRestyCertDir, "lua_dir": c.LuaDir, "openresty_lua_dir": c.OpenRestyLuaDir,
		"runtime_config_dir": c.RuntimeConfigDir, "pages_dir": c.PagesDir, "mmdb_path": c.MMDBPath,
		"city_mmdb_path": c.CityMMDBPath, "observability_buffer_path": c.ObservabilityBufferPath, "state_path": c.StatePath,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if c.HeartbeatInterval != 3*time.Second || c.RequestTimeout != 10*time.Second || c.MMDBUpdateInterval != 24*time.Hour {
		t.Errorf("durations %v %v %v", c.HeartbeatInterval, c.RequestTimeout, c.MMDBUpdateInterval)
	}
	if c.ObservabilityPort != 18081 || c.ObservabilityReplayMinutes != 60 || c.OpenRestyPath != "openresty" {
		t.Errorf("port %d minutes %d path %q", c.ObservabilityPort, c.ObservabilityReplayMinutes, c.OpenRestyPath)
	}
}

func TestRelativeConfigPathGivesRelativeDataDir(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	os.WriteFile("agent.json", []byte(`{"server_url":"http://127.0.0.1:1","agent_token":"x"}`), 0o600)
	c, _, err := Load("agent.json", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "data" || c.StatePath != "data/var/lib/openflare/agent-state.json" {
		t.Fatalf("data_dir %q state %q", c.DataDir, c.StatePath)
	}
}

func TestDurationForms(t *testing.T) {
	path := writeConfig(t, `{"server_url":"http://h","agent_token":"x","heartbeat_interval":30000,"request_timeout":"1500ms","mmdb_update_interval":"2h"}`)
	c, _, err := Load(path, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.HeartbeatInterval != 30*time.Second || c.RequestTimeout != 1500*time.Millisecond || c.MMDBUpdateInterval != 2*time.Hour {
		t.Fatalf("%v %v %v", c.HeartbeatInterval, c.RequestTimeout, c.MMDBUpdateInterval)
	}
	c, _, err = Load(path, envOf(map[string]string{"OPENFLARE_HEARTBEAT_INTERVAL": " 5s ", "OPENFLARE_REQUEST_TIMEOUT": "250"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HeartbeatInterval != 5*time.Second || c.RequestTimeout != 250*time.Millisecond {
		t.Fatalf("env durations %v %v", c.HeartbeatInterval, c.RequestTimeout)
	}
}

func TestEnvironmentOverrides(t *testing.T) {
	path := writeConfig(t, `{"server_url":"http://file","agent_token":"filetok","node_name":"file"}`)
	env := map[string]string{
		"OPENFLARE_SERVER_URL":                   "https://env.example",
		"OPENFLARE_AGENT_TOKEN":                  "envtok",
		"OPENFLARE_DISCOVERY_TOKEN":              "disc",
		"OPENFLARE_NODE_NAME":                    "env-node",
		"OPENFLARE_NODE_IP":                      "198.51.100.7",
		"OPENFLARE_OPENRESTY_PATH":               "/usr/sbin/nginx",
		"OPENFLARE_DATA_DIR":                     "/srv/of",
		"OPENFLARE_PAGES_DIR":                    "/srv/pages",
		"OPENFLARE_MMDB_PATH":                    "/srv/c.mmdb",
		"OPENFLARE_CITY_MMDB_PATH":               "/srv/city.mmdb",
		"OPENFLARE_MMDB_UPDATE_INTERVAL":         "3600000",
		"OPENFLARE_MMDB_DOWNLOAD_URL":            "https://m/c",
		"OPENFLARE_CITY_MMDB_DOWNLOAD_URL":       "https://m/city",
		"OPENFLARE_OPENRESTY_OBSERVABILITY_PORT": "18999",
		"OPENFLARE_HEARTBEAT_INTERVAL":           "1s",
		"OPENFLARE_REQUEST_TIMEOUT":              "2s",
		"OPENFLARE_UNRELATED":                    "ignored",
	}
	c, _, err := Load(path, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct{ got, want string }{
		{c.ServerURL, "https://env.example"}, {c.AgentToken, "envtok"}, {c.DiscoveryToken, "disc"},
		{c.NodeName, "env-node"}, {c.NodeIP, "198.51.100.7"}, {c.OpenRestyPath, "/usr/sbin/nginx"},
		{c.DataDir, "/srv/of"}, {c.MainConfigPath, "/srv/of/etc/nginx/nginx.conf"}, {c.PagesDir, "/srv/pages"},
		{c.MMDBPath, "/srv/c.mmdb"}, {c.CityMMDBPath, "/srv/city.mmdb"}, {c.MMDBDownloadURL, "https://m/c"},
		{c.CityMMDBDownloadURL, "https://m/city"},
	}
	for i, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("check %d: got %q want %q", i, ch.got, ch.want)
		}
	}
	if c.ObservabilityPort != 18999 || c.MMDBUpdateInterval != time.Hour || c.HeartbeatInterval != time.Second || c.RequestTimeout != 2*time.Second {
		t.Errorf("numbers: %d %v %v %v", c.ObservabilityPort, c.MMDBUpdateInterval, c.HeartbeatInterval, c.RequestTimeout)
	}
	if len(Env) != 16 {
		t.Fatalf("PROTOCOL 1.1 lists 16 overrides, have %d", len(Env))
	}
}

func TestEnvOnlyWithoutFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.json")
	if _, _, err := Load(path, noEnv); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing file without env: %v", err)
	}
	c, _, err := Load(path, envOf(map[string]string{"OPENFLARE_SERVER_URL": "http://h", "OPENFLARE_DISCOVERY_TOKEN": "d"}))
	if err != nil || c.DiscoveryToken != "d" {
		t.Fatalf("env only: %v %+v", err, c)
	}
}

func TestUnknownKeysWarn(t *testing.T) {
	path := writeConfig(t, `{"server_url":"http://h","agent_token":"x","heartbeat_intervall":5,"zzz":1}`)
	_, warns, err := Load(path, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 2 || !strings.Contains(warns[0], `"heartbeat_intervall"`) || !strings.Contains(warns[1], `"zzz"`) {
		t.Fatalf("warnings %v", warns)
	}
}

func TestValidationNamesKeyAndValue(t *testing.T) {
	const secret = "SECRET-TOKEN-abcdef0123456789"
	cases := []struct{ body, want string }{
		{`{"agent_token":"` + secret + `"}`, `"server_url": required`},
		{`{"server_url":"ftp://h","agent_token":"` + secret + `"}`, `scheme of "ftp://h" must be http or https`},
		{`{"server_url":"ws://h","agent_token":"` + secret + `"}`, `must be http or https`},
		{`{"server_url":"https://user:pw@h","agent_token":"` + secret + `"}`, `must not carry credentials`},
		{`{"server_url":"http://h"}`, `at least one token is required`},
		{`{"server_url":"http://h","agent_token":"` + secret + `","openresty_observability_port":70000}`, `"openresty_observability_port": must be 1-65535, got 70000`},
		{`{"server_url":"http://h","agent_token":"` + secret + `","observability_replay_minutes":0}`, `"observability_replay_minutes": must be positive, got 0`},
		{`{"server_url":"http://h","agent_token":"` + secret + `","heartbeat_interval":"fast"}`, `"heartbeat_interval": "fast" is neither milliseconds nor a duration`},
		{`{"server_url":"http://h","agent_token":"` + secret + `","mmdb_update_interval":-5}`, `"mmdb_update_interval"`},
		{`{"server_url":"http://h","agent_token":"` + secret + `","node_ip":"not-an-ip"}`, `"node_ip": "not-an-ip" is not an IP address`},
		{`{"server_url":"http://h","agent_token":12345}`, `key "agent_token": expected string, got JSON number`},
		{`{"server_url":"http://h","agent_token":"` + secret + `",}`, `invalid JSON`},
	}
	for _, tc := range cases {
		_, _, err := Load(writeConfig(t, tc.body), noEnv)
		if err == nil {
			t.Errorf("%s: no error", tc.body)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not contain %q", tc.body, err, tc.want)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "pw") {
			t.Errorf("error leaks a secret: %q", err)
		}
	}
}

func TestDescribeMasksTokens(t *testing.T) {
	path := writeConfig(t, `{"server_url":"http://h","agent_token":"0123456789abcdef","discovery_token":"fedcba9876543210"}`)
	c, _, err := Load(path, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Describe()
	if strings.Contains(d, "0123456789abcdef") || strings.Contains(d, "fedcba9876543210") {
		t.Fatalf("Describe leaks a token:\n%s", d)
	}
	if !strings.Contains(d, "agent_token") || !strings.Contains(d, "0123****") {
		t.Fatalf("Describe:\n%s", d)
	}
	for _, k := range jsonKeys() {
		if !strings.Contains(d, k+" ") {
			t.Errorf("Describe misses %s", k)
		}
	}
}

func TestMemoryLimit(t *testing.T) {
	cases := map[string]int64{
		``:                          DefaultMemoryLimit,
		`,"memory_limit":67108864`:  64 << 20,
		`,"memory_limit":"48MiB"`:   48 << 20,
		`,"memory_limit":"1G"`:      1 << 30,
		`,"memory_limit":" 16 MiB"`: 16 << 20,
	}
	for extra, want := range cases {
		c, _, err := Load(writeConfig(t, `{"server_url":"http://h","agent_token":"x"`+extra+`}`), noEnv)
		if err != nil || c.MemoryLimit != want {
			t.Errorf("%s: %v %v", extra, c, err)
		}
	}
	for _, bad := range []string{`"lots"`, `1000`, `-5`, `"2TiB"`} {
		if _, _, err := Load(writeConfig(t, `{"server_url":"http://h","agent_token":"x","memory_limit":`+bad+`}`), noEnv); err == nil || !strings.Contains(err.Error(), `"memory_limit"`) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func TestSelfUpdateKeys(t *testing.T) {
	c, _, err := Load(writeConfig(t, `{"server_url":"http://h","agent_token":"x"}`), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.UpdateRepo != DefaultUpdateRepo || c.UpdateAPIURL != DefaultUpdateAPIURL || c.UpdatePublicKey != nil || c.UpdateConfirmTimeout != 10*time.Minute {
		t.Errorf("defaults: repo %q api %q key %x confirm %v", c.UpdateRepo, c.UpdateAPIURL, c.UpdatePublicKey, c.UpdateConfirmTimeout)
	}
	key := strings.Repeat("ab", 32)
	keyB64 := "q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s="
	for _, k := range []string{key, keyB64} {
		c, _, err := Load(writeConfig(t, `{"server_url":"http://h","agent_token":"x","update_repo":"Me/agent.fork","update_api_url":"http://127.0.0.1:9/","update_public_key":"`+k+`","update_confirm_timeout":"5s"}`), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if c.UpdateRepo != "Me/agent.fork" || c.UpdateAPIURL != "http://127.0.0.1:9" || len(c.UpdatePublicKey) != 32 || c.UpdatePublicKey[0] != 0xab || c.UpdateConfirmTimeout != 5*time.Second {
			t.Errorf("%s: repo %q api %q key %x confirm %v", k, c.UpdateRepo, c.UpdateAPIURL, c.UpdatePublicKey, c.UpdateConfirmTimeout)
		}
		if !strings.Contains(c.Describe(), keyB64) {
			t.Errorf("Describe does not show the key:\n%s", c.Describe())
		}
	}
	if c, _, err := Load(writeConfig(t, `{"server_url":"http://h","agent_token":"x","update_repo":"off"}`), noEnv); err != nil || c.UpdateRepo != "off" {
		t.Errorf("off: %v %v", c, err)
	}
	for body, want := range map[string]string{
		`"update_repo":"just-a-name"`:              `"update_repo": "just-a-name" is not a GitHub owner/name`,
		`"update_repo":"a/b/c"`:                    `"update_repo"`,
		`"update_api_url":"ftp://x"`:               `"update_api_url": scheme of "ftp://x" must be http or https`,
		`"update_public_key":"abcd"`:               `"update_public_key": not a 32-byte Ed25519 public key`,
		`"update_confirm_timeout":0`:               `"update_confirm_timeout": must be positive`,
		`"update_public_key":"` + key[:62] + `zz"`: `"update_public_key"`,
	} {
		_, _, err := Load(writeConfig(t, `{"server_url":"http://h","agent_token":"x",`+body+`}`), noEnv)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", body, err, want)
		}
	}
}

func TestAllowLinkLocalOrigins(t *testing.T) {
	for body, want := range map[string]bool{
		``:                                  false,
		`,"allow_link_local_origins":false`: false,
		`,"allow_link_local_origins":null`:  false,
		`,"allow_link_local_origins":true`:  true,
	} {
		c, _, err := Load(writeConfig(t, `{"server_url":"http://h","agent_token":"x"`+body+`}`), noEnv)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if c.AllowLinkLocalOrigins != want {
			t.Errorf("%s: AllowLinkLocalOrigins %v, want %v", body, c.AllowLinkLocalOrigins, want)
		}
		if line := "allow_link_local_origins       " + fmt.Sprint(want) + "\n"; !strings.Contains(c.Describe(), line) {
			t.Errorf("%s: Describe does not say %q:\n%s", body, line, c.Describe())
		}
	}
	// Only agent.json decides it: no environment variable turns it on.
	c, _, err := Load(writeConfig(t, `{"server_url":"http://h","agent_token":"x"}`), envOf(map[string]string{"OPENFLARE_ALLOW_LINK_LOCAL_ORIGINS": "true"}))
	if err != nil || c.AllowLinkLocalOrigins {
		t.Errorf("environment: %v %v", c, err)
	}
	_, _, err = Load(writeConfig(t, `{"server_url":"http://h","agent_token":"x","allow_link_local_origins":"yes"}`), noEnv)
	if err == nil || !strings.Contains(err.Error(), `key "allow_link_local_origins": expected bool, got JSON string`) {
		t.Errorf("a string: %v", err)
	}
}

func TestLogRotationKeys(t *testing.T) {
	c, _, err := Load(writeConfig(t, `{"server_url":"http://h","agent_token":"x"}`), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.LogMaxBytes != DefaultLogMaxBytes || c.LogKeep != DefaultLogKeep {
		t.Errorf("defaults: log_max_bytes %d, log_keep %d", c.LogMaxBytes, c.LogKeep)
	}
	if d := c.Describe(); !strings.Contains(d, "log_max_bytes                  4 MiB\n") || !strings.Contains(d, "log_keep                       2\n") {
		t.Errorf("Describe:\n%s", d)
	}
	for body, want := range map[string][2]int64{
		`,"log_max_bytes":262144,"log_keep":0`:   {256 << 10, 0},
		`,"log_max_bytes":"256KiB","log_keep":5`: {256 << 10, 5},
		`,"log_max_bytes":"64 MiB"`:              {64 << 20, DefaultLogKeep},
		`,"log_max_bytes":65536,"log_keep":100`:  {64 << 10, 100},
	} {
		c, _, err := Load(writeConfig(t, `{"server_url":"http://h","agent_token":"x"`+body+`}`), noEnv)
		if err != nil {
			t.Errorf("%s: %v", body, err)
			continue
		}
		if c.LogMaxBytes != want[0] || int64(c.LogKeep) != want[1] {
			t.Errorf("%s: log_max_bytes %d, log_keep %d", body, c.LogMaxBytes, c.LogKeep)
		}
	}
	for body, want := range map[string]string{
		`,"log_max_bytes":65535`: `key "log_max_bytes": 65535 is below the 64 KiB minimum`,
		`,"log_max_bytes":"big"`: `key "log_max_bytes": "big" is not a size`,
		`,"log_max_bytes":-1`:    `key "log_max_bytes"`,
		`,"log_keep":-1`:         `key "log_keep": must be 0-100, got -1`,
		`,"log_keep":101`:        `key "log_keep": must be 0-100, got 101`,
		`,"log_keep":"2"`:        `key "log_keep"`,
		`,"memory_limit":"3MiB"`: `key "memory_limit": 3MiB is below the 4 MiB minimum`,
	} {
		_, _, err := Load(writeConfig(t, `{"server_url":"http://h","agent_token":"x"`+body+`}`), noEnv)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}
