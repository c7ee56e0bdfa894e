// Package luaassets holds the Lua scripts the agent installs for OpenResty:
// the WAF runtime, the observability endpoint, the PoW endpoints and the
// service-worker offline mode. DATAPLANE.md is their behavioural contract.
package luaassets

import (
	"bytes"
	_ "embed"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"

	"openflare/internal/xz"
)

// lua/ is what developers edit (then `go generate ./agent/luaassets`); the
// binary embeds it packed (testing/luapack: the scripts without their comments, xz
// compressed), because verbatim it would take about 200 KiB of the release
// binary's flash budget. TestPackMatchesTree fails when the two drift.
//
//go:generate go run ../../testing/luapack
//go:embed lua.pack.xz
var pack string

// MaxSnapshotBytes is the largest waf_ip_groups.json the runtime reads
// (its placeholder in the scripts is in agent/landing's table).
const MaxSnapshotBytes = "20971520"

// alias is a lua_dir path that carries the same script as aliased: the
// rendered config may call either name.
const alias, aliased = "read.lua", "observability/read.lua"

// certDirPaths are the scripts also installed under cert_dir, where the
// rendered service-worker locations point.
var certDirPaths = []string{"sw/challenge.lua", "sw/runtime.lua"}

// File is one script, Path relative to the directory it is installed in.
type File struct {
	Path    string
	Content []byte
}

// Files returns every file of lua_dir, sorted by path, each passed through
// r: the scripts name this node's paths by placeholders, which
// agent/landing's table substitutes (landing.Paths.LuaReplacer).
func Files(r *strings.Replacer) []File {
	byPath := map[string][]byte{}
	err := unpack(func(p string, b []byte) { byPath[p] = []byte(r.Replace(string(b))) })
	if err != nil {
		panic("luaassets: embedded tree unreadable: " + err.Error())
	}
	byPath[alias] = slices.Clone(byPath[aliased])
	// Sorting the paths rather than the Files reuses the binary's string
	// sort: a SortFunc over File would add its own 12 KiB instantiation.
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	files := make([]File, len(paths))
	for i, p := range paths {
		files[i] = File{Path: p, Content: byPath[p]}
	}
	return files
}

// CertDirFiles picks from files (Files') the service-worker scripts also
// installed under cert_dir (sw/runtime.lua and sw/challenge.lua).
func CertDirFiles(files []File) []File {
	var out []File
	for _, f := range files {
		if slices.Contains(certDirPaths, f.Path) {
			out = append(out, f)
		}
	}
	return out
}

// unpack calls fn with each file of the embedded tree, path relative to
// lua/. It decodes on every call rather than once per process: the agent
// installs the scripts rarely, and the decoded tree would otherwise stay in
// its resting memory. The format is testing/luapack's.
func unpack(fn func(path string, b []byte)) error {
	zr, err := xz.NewReader(strings.NewReader(pack))
	if err != nil {
		return err
	}
	rest, err := io.ReadAll(zr)
	if err != nil {
		return err
	}
	for len(rest) > 0 {
		line, after, ok := bytes.Cut(rest, []byte("\n"))
		size, path, _ := bytes.Cut(line, []byte(" "))
		n, err := strconv.Atoi(string(size))
		if !ok || err != nil || n < 0 || n > len(after) {
			return errors.New("malformed entry " + strconv.Quote(string(line)))
		}
		fn(string(path), after[:n])
		rest = after[n:]
	}
	return nil
}
