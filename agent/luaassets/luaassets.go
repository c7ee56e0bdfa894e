// Package luaassets holds the Lua scripts the agent installs for OpenResty:
// the WAF runtime, the observability endpoint, the PoW endpoints and the
// service-worker offline mode. DATAPLANE.md is their behavioural contract.
package luaassets

import (
	"embed"
	"io/fs"
	"slices"
	"strings"
)

//go:embed lua
var tree embed.FS

// maxSnapshotBytes is the largest waf_ip_groups.json the runtime reads.
const maxSnapshotBytes = "20971520"

// aliases are lua_dir paths that carry the same script as another path:
// the rendered config may call either name.
var aliases = map[string]string{"read.lua": "observability/read.lua"}

// certDirPaths are the scripts also installed under cert_dir, where the
// rendered service-worker locations point.
var certDirPaths = []string{"sw/challenge.lua", "sw/runtime.lua"}

// File is one script, Path relative to the directory it is installed in.
type File struct {
	Path    string
	Content []byte
}

// Vars are the install-time values substituted into the scripts.
type Vars struct {
	RuntimeConfigDir string // holds waf_config.json and the IP-group snapshot
	LuaDir           string // where nginx finds these scripts (openresty_lua_dir)
	CertDir          string // where nginx finds cert_dir (openresty_cert_dir)
	TempDir          string // parent of the *_temp_path directories
	CountryMMDBPath  string // agent.json mmdb_path, for geo_match
	CityMMDBPath     string // agent.json city_mmdb_path, for geo_match
}

func (v Vars) replacer() *strings.Replacer {
	return strings.NewReplacer(
		"__OPENFLARE_RUNTIME_CONFIG_DIR__", v.RuntimeConfigDir,
		"__OPENFLARE_LUA_DIR__", v.LuaDir,
		"__OPENFLARE_CERT_DIR__", v.CertDir,
		"__OPENFLARE_NGINX_CACHE_DIR__", v.TempDir,
		"__OPENFLARE_COUNTRY_MMDB_PATH__", v.CountryMMDBPath,
		"__OPENFLARE_CITY_MMDB_PATH__", v.CityMMDBPath,
		"__OPENFLARE_WAF_IP_GROUPS_MAX_SNAPSHOT_BYTES__", maxSnapshotBytes,
	)
}

// Files returns every file of lua_dir, sorted by path, placeholders substituted.
func Files(v Vars) []File {
	r := v.replacer()
	byPath := map[string][]byte{}
	err := fs.WalkDir(tree, "lua", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := tree.ReadFile(p)
		if err != nil {
			return err
		}
		byPath[strings.TrimPrefix(p, "lua/")] = []byte(r.Replace(string(b)))
		return nil
	})
	if err != nil {
		panic("luaassets: embedded tree unreadable: " + err.Error())
	}
	for alias, src := range aliases {
		byPath[alias] = slices.Clone(byPath[src])
	}
	files := make([]File, 0, len(byPath))
	for p, b := range byPath {
		files = append(files, File{Path: p, Content: b})
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files
}

// CertDirFiles returns the service-worker scripts installed under cert_dir
// (sw/runtime.lua and sw/challenge.lua), identical to their lua_dir copies.
func CertDirFiles(v Vars) []File {
	var out []File
	for _, f := range Files(v) {
		if slices.Contains(certDirPaths, f.Path) {
			out = append(out, f)
		}
	}
	return out
}
