package config

import "path/filepath"

// Layout is the node's file tree: every path the agent, nginx and the
// commands use, derived from the path keys (after their defaults relative
// to data_dir) in this one place. The daemon and `check` and `status` take
// every path from it, so the commands inspect exactly the files the daemon
// writes (PROTOCOL 1.1, 6.1).
type Layout struct {
	DataDir string

	// What nginx reads and writes; landing.FromConfig hands these to the
	// apply, the field names are the same.
	Main             string // main_config_path
	Route            string // route_config_path
	AccessLog        string // access_log_path
	ErrorLog         string // dirname(access_log_path)/error.log: nginx's own lines only
	HTTPErrorLog     string // dirname(access_log_path)/http-error.log: the requests' errors
	PID              string // VAR/run/nginx.pid
	TempDir          string // VAR/cache/nginx: the five *_temp_path dirs
	ProxyCache       string // VAR/cache/openflare_proxy
	SelfTestDir      string // VAR/run/selftest: the self-test's sockets and log
	EmptyDir         string // VAR/empty: the root of whatever no site serves
	CertDir          string
	OpenRestyCertDir string
	LuaDir           string
	OpenRestyLuaDir  string
	RuntimeConfigDir string
	PagesDir         string
	CountryMMDB      string // mmdb_path
	CityMMDB         string // city_mmdb_path

	// The agent's own files, which the nginx workers must not read.
	State               string // state_path
	StateDir            string // dirname(state_path): the agent's private directory
	ObservabilityState  string // the collector's log cursor and profile fingerprint
	ObservabilityBuffer string // observability_buffer_path
	ApplyBackup         string // the apply's backup transaction
	ApplyStaging        string // left by releases before one-parse applies; removed at start
	PolicyProbe         string // the template policy's probe tree
	SupportStage        string // support files staged as an E4 reply is decoded
}

// Layout derives the tree from the resolved path keys. It is built where
// it is needed rather than kept in Config, whose type the binary carries:
// as a field its 27 names and an equality function would cost 1.5 KiB.
func (c *Config) Layout() Layout {
	// VAR is three levels above the access log (DD/var by default), and
	// nginx's error logs sit beside it.
	logs := filepath.Dir(c.AccessLogPath)
	v := filepath.Dir(filepath.Dir(logs))
	state := filepath.Dir(c.StatePath)
	return Layout{
		DataDir:          c.DataDir,
		Main:             c.MainConfigPath,
		Route:            c.RouteConfigPath,
		AccessLog:        c.AccessLogPath,
		ErrorLog:         filepath.Join(logs, "error.log"),
		HTTPErrorLog:     filepath.Join(logs, "http-error.log"),
		PID:              filepath.Join(v, "run/nginx.pid"),
		TempDir:          filepath.Join(v, "cache/nginx"),
		ProxyCache:       filepath.Join(v, "cache/openflare_proxy"),
		SelfTestDir:      filepath.Join(v, "run/selftest"),
		EmptyDir:         filepath.Join(v, "empty"),
		CertDir:          c.CertDir,
		OpenRestyCertDir: c.OpenRestyCertDir,
		LuaDir:           c.LuaDir,
		OpenRestyLuaDir:  c.OpenRestyLuaDir,
		RuntimeConfigDir: c.RuntimeConfigDir,
		PagesDir:         c.PagesDir,
		CountryMMDB:      c.MMDBPath,
		CityMMDB:         c.CityMMDBPath,

		State:               c.StatePath,
		StateDir:            state,
		ObservabilityState:  filepath.Join(state, "observability-state.json"),
		ObservabilityBuffer: c.ObservabilityBufferPath,
		ApplyBackup:         filepath.Join(state, "apply-backup"),
		ApplyStaging:        filepath.Join(state, "apply-staging"),
		PolicyProbe:         filepath.Join(state, "policy-probe"),
		SupportStage:        filepath.Join(state, "support-stage"),
	}
}
