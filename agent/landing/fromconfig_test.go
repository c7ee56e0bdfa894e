package landing

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"openflare/agent/config"
)

// Every path an apply lands to is the layout's of the same name, for a
// data_dir of its own and paths put outside it: the daemon's apply and
// the commands, which read the layout, see one tree.
func TestFromConfigIsTheLayout(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.json")
	body := `{"server_url":"http://h","agent_token":"x","data_dir":"` + dir + `/node",
		"main_config_path":"` + dir + `/nginx/main.conf","access_log_path":"` + dir + `/var/log/edge/access.log",
		"openresty_lua_dir":"/chroot/lua","runtime_config_dir":"` + dir + `/runtime","openresty_observability_port":18999}`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Load(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	p := reflect.ValueOf(FromConfig(cfg))
	l := reflect.ValueOf(cfg.Layout())
	for i := 0; i < p.NumField(); i++ {
		f := p.Type().Field(i)
		if f.Type.Kind() != reflect.String {
			continue
		}
		lf := l.FieldByName(f.Name)
		switch {
		case !lf.IsValid():
			t.Errorf("Paths.%s is not in the layout", f.Name)
		case p.Field(i).String() == "" || p.Field(i).String() != lf.String():
			t.Errorf("Paths.%s = %q, layout %q", f.Name, p.Field(i).String(), lf.String())
		}
	}
	if got := FromConfig(cfg); got.PID != dir+"/var/run/nginx.pid" || got.OpenRestyLuaDir != "/chroot/lua" || got.ObservabilityPort != 18999 {
		t.Errorf("pid %s, OpenResty's Lua %s, port %d", got.PID, got.OpenRestyLuaDir, got.ObservabilityPort)
	}
}
