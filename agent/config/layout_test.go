package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The layout answers every path of the node's tree: by default below
// data_dir, below a data_dir of its own when agent.json names one, and
// where agent.json puts a path explicitly, VAR (pid, temp, cache, the
// self-test) following the access log and the agent's own files the
// state (PROTOCOL 1.1, 6.1).
func TestLayout(t *testing.T) {
	dir := t.TempDir()
	const keys = `"server_url":"http://h","agent_token":"x"`
	for _, tc := range []struct {
		name, json string
		want       Layout
	}{
		{"defaults", `{` + keys + `}`, layoutBelow(filepath.Join(dir, "data"))},
		{"data_dir", `{` + keys + `,"data_dir":"/srv/edge"}`, layoutBelow("/srv/edge")},
		{"explicit paths", `{` + keys + `,"data_dir":"/srv/edge",
			"main_config_path":"/etc/nginx/nginx.conf","route_config_path":"/etc/nginx/conf.d/of.conf",
			"access_log_path":"/var/log/edge/access.log","cert_dir":"/etc/ssl/edge",
			"openresty_cert_dir":"/chroot/ssl/edge","lua_dir":"/usr/share/edge/lua",
			"openresty_lua_dir":"/chroot/lua","runtime_config_dir":"/etc/edge",
			"pages_dir":"/srv/pages","mmdb_path":"/geo/c.mmdb","city_mmdb_path":"/geo/city.mmdb",
			"observability_buffer_path":"/var/spool/edge/buffer.json","state_path":"/var/lib/edge/state.json"}`,
			Layout{
				DataDir:             "/srv/edge",
				Main:                "/etc/nginx/nginx.conf",
				Route:               "/etc/nginx/conf.d/of.conf",
				AccessLog:           "/var/log/edge/access.log",
				ErrorLog:            "/var/log/edge/error.log",
				HTTPErrorLog:        "/var/log/edge/http-error.log",
				PID:                 "/var/run/nginx.pid",
				TempDir:             "/var/cache/nginx",
				ProxyCache:          "/var/cache/openflare_proxy",
				SelfTestDir:         "/var/run/selftest",
				EmptyDir:            "/var/empty",
				CertDir:             "/etc/ssl/edge",
				OpenRestyCertDir:    "/chroot/ssl/edge",
				LuaDir:              "/usr/share/edge/lua",
				OpenRestyLuaDir:     "/chroot/lua",
				RuntimeConfigDir:    "/etc/edge",
				PagesDir:            "/srv/pages",
				CountryMMDB:         "/geo/c.mmdb",
				CityMMDB:            "/geo/city.mmdb",
				State:               "/var/lib/edge/state.json",
				StateDir:            "/var/lib/edge",
				ObservabilityState:  "/var/lib/edge/observability-state.json",
				ObservabilityBuffer: "/var/spool/edge/buffer.json",
				ApplyBackup:         "/var/lib/edge/apply-backup",
				ApplyStaging:        "/var/lib/edge/apply-staging",
				PolicyProbe:         "/var/lib/edge/policy-probe",
				SupportStage:        "/var/lib/edge/support-stage",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "agent.json")
			if err := os.WriteFile(path, []byte(tc.json), 0o600); err != nil {
				t.Fatal(err)
			}
			c, _, err := Load(path, noEnv)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Layout(), tc.want) {
				diffLayouts(t, c.Layout(), tc.want)
			}
		})
	}
}

// The environment's overrides move the layout as they move the keys.
func TestLayoutFollowsEnvironment(t *testing.T) {
	path := writeConfig(t, `{"server_url":"http://h","agent_token":"x","data_dir":"/file"}`)
	c, _, err := Load(path, envOf(map[string]string{"OPENFLARE_DATA_DIR": "/env", "OPENFLARE_PAGES_DIR": "/pages"}))
	if err != nil {
		t.Fatal(err)
	}
	want := layoutBelow("/env")
	want.PagesDir = "/pages"
	if !reflect.DeepEqual(c.Layout(), want) {
		diffLayouts(t, c.Layout(), want)
	}
}

// layoutBelow is the layout with every path key at its default below dd.
func layoutBelow(dd string) Layout {
	return Layout{
		DataDir:             dd,
		Main:                dd + "/etc/nginx/nginx.conf",
		Route:               dd + "/etc/nginx/conf.d/openflare_routes.conf",
		AccessLog:           dd + "/var/log/openflare/access.log",
		ErrorLog:            dd + "/var/log/openflare/error.log",
		HTTPErrorLog:        dd + "/var/log/openflare/http-error.log",
		PID:                 dd + "/var/run/nginx.pid",
		TempDir:             dd + "/var/cache/nginx",
		ProxyCache:          dd + "/var/cache/openflare_proxy",
		SelfTestDir:         dd + "/var/run/selftest",
		EmptyDir:            dd + "/var/empty",
		CertDir:             dd + "/etc/nginx/certs",
		OpenRestyCertDir:    dd + "/etc/nginx/certs",
		LuaDir:              dd + "/etc/nginx/lua",
		OpenRestyLuaDir:     dd + "/etc/nginx/lua",
		RuntimeConfigDir:    dd + "/etc/openflare",
		PagesDir:            dd + "/var/lib/openflare/pages",
		CountryMMDB:         dd + "/etc/openflare/GeoLite2-Country.mmdb",
		CityMMDB:            dd + "/etc/openflare/GeoLite2-City.mmdb",
		State:               dd + "/var/lib/openflare/agent-state.json",
		StateDir:            dd + "/var/lib/openflare",
		ObservabilityState:  dd + "/var/lib/openflare/observability-state.json",
		ObservabilityBuffer: dd + "/var/lib/openflare/observability-buffer.json",
		ApplyBackup:         dd + "/var/lib/openflare/apply-backup",
		ApplyStaging:        dd + "/var/lib/openflare/apply-staging",
		PolicyProbe:         dd + "/var/lib/openflare/policy-probe",
		SupportStage:        dd + "/var/lib/openflare/support-stage",
	}
}

func diffLayouts(t *testing.T, got, want Layout) {
	t.Helper()
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := 0; i < g.NumField(); i++ {
		if g.Field(i).String() != w.Field(i).String() {
			t.Errorf("%s = %q, want %q", g.Type().Field(i).Name, g.Field(i).String(), w.Field(i).String())
		}
	}
}
