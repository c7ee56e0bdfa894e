// Package nginx is the only package that runs the nginx/OpenResty binary:
// it reads what the installed build can do, adapts rendered text to it,
// validates (-t), reloads and starts it.
package nginx

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Caps is what one nginx binary can do, read once from `-V`.
type Caps struct {
	Binary  string
	Product string // "nginx" or "openresty"
	// Version is the product version printed by -v (e.g. 1.27.1.2 for
	// OpenResty, 1.22.1 for nginx): the node's ext_version.
	Version string
	// Core is the nginx core version, which decides directive support.
	Core  [3]int
	HTTP2 bool
	HTTP3 bool
	// LuaBuiltin is true when lua-nginx-module is compiled in (OpenResty).
	LuaBuiltin bool
	// LuaModules are the dynamic modules (ndk first) to load when the Lua
	// module is not compiled in; empty when none were found.
	LuaModules []string
	StubStatus bool
	// ErrorLogFlag is true when the binary accepts -e (nginx ≥ 1.19.5), so
	// -t never depends on the compiled-in error log path being writable.
	ErrorLogFlag bool
}

// ReadCaps runs `<bin> -V` and reads the capabilities.
func ReadCaps(ctx context.Context, bin string) (*Caps, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("nginx binary %q: %w", bin, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "-V").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s -V: %w: %s", path, err, strings.TrimSpace(string(out)))
	}
	return parseCaps(path, string(out), moduleDirs(string(out))), nil
}

func parseCaps(path, v string, dirs []string) *Caps {
	c := &Caps{Binary: path, Product: "nginx", Version: productVersion(v)}
	// OpenResty's -V names itself "nginx version: openresty/1.27.1.2"; its
	// core is the first three numbers.
	if strings.Contains(strings.ToLower(v), "openresty/") {
		c.Product = "openresty"
	}
	if parts := strings.SplitN(c.Version, ".", 4); len(parts) >= 3 {
		var core [3]int
		ok := true
		for i := range core {
			digits := parts[i]
			if i == 2 {
				// "1.25.3rc1": only the leading digits count.
				digits = digits[:len(digits)-len(strings.TrimLeft(digits, "0123456789"))]
			}
			n, err := strconv.Atoi(digits)
			core[i], ok = n, ok && err == nil
		}
		if ok {
			c.Core = core
		}
	}
	c.HTTP2 = strings.Contains(v, "--with-http_v2_module")
	c.HTTP3 = strings.Contains(v, "--with-http_v3_module")
	c.StubStatus = strings.Contains(v, "--with-http_stub_status_module")
	c.LuaBuiltin = strings.Contains(v, "lua-nginx-module") || c.Product == "openresty"
	c.ErrorLogFlag = c.AtLeast(1, 19, 5)
	if !c.LuaBuiltin {
		c.LuaModules = findLuaModules(dirs)
	}
	return c
}

// productVersion reads "nginx version: openresty/1.27.1.2" (PROTOCOL 1.3's
// ext_version): the token after the product name, case-insensitively.
func productVersion(v string) string {
	lower := strings.ToLower(v)
	for _, product := range []string{"nginx", "openresty"} {
		for from := 0; ; {
			i := strings.Index(lower[from:], product+" version:")
			if i < 0 {
				break
			}
			rest := strings.TrimLeft(v[from+i+len(product)+len(" version:"):], " \t\r\n")
			for _, p := range []string{"nginx/", "openresty/"} {
				if strings.HasPrefix(strings.ToLower(rest), p) {
					if tok := strings.Fields(rest[len(p):]); len(tok) > 0 {
						return tok[0]
					}
				}
			}
			from += i + 1
		}
	}
	return ""
}

// configureArg returns the value of one `configure arguments:` option.
func configureArg(v, prefix string) string {
	for _, f := range strings.Fields(v) {
		if val, ok := strings.CutPrefix(f, prefix); ok && val != "" {
			return val
		}
	}
	return ""
}

// AtLeast reports whether the core version is ≥ a.b.c.
func (c *Caps) AtLeast(a, b, d int) bool {
	want := [3]int{a, b, d}
	for i := range want {
		if c.Core[i] != want[i] {
			return c.Core[i] > want[i]
		}
	}
	return true
}

// HasLua reports whether Lua can run at all with this binary.
func (c *Caps) HasLua() bool { return c.LuaBuiltin || len(c.LuaModules) > 0 }

// moduleDirs lists where dynamic modules may live: the compiled-in modules
// path, then the usual distribution locations.
func moduleDirs(v string) []string {
	var dirs []string
	if p := configureArg(v, "--modules-path="); p != "" {
		dirs = append(dirs, p)
	}
	if p := configureArg(v, "--prefix="); p != "" {
		dirs = append(dirs, filepath.Join(p, "modules"))
	}
	return append(dirs, "/usr/lib/nginx/modules", "/usr/lib64/nginx/modules", "/usr/share/nginx/modules")
}

// findLuaModules finds the NDK and Lua dynamic modules (Debian's
// libnginx-mod-http-ndk and libnginx-mod-http-lua). The Lua module needs NDK
// loaded first.
func findLuaModules(dirs []string) []string {
	for _, d := range dirs {
		lua := filepath.Join(d, "ngx_http_lua_module.so")
		if _, err := os.Stat(lua); err != nil {
			continue
		}
		mods := []string{}
		if ndk := filepath.Join(d, "ndk_http_module.so"); fileExists(ndk) {
			mods = append(mods, ndk)
		}
		return append(mods, lua)
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Summary is a one-line description for logs and `check`.
func (c *Caps) Summary() string {
	lua := "none"
	switch {
	case c.LuaBuiltin:
		lua = "built in"
	case len(c.LuaModules) > 0:
		lua = "dynamic (" + strings.Join(c.LuaModules, ", ") + ")"
	}
	return fmt.Sprintf("%s %s (core %d.%d.%d): http2=%t http3=%t stub_status=%t lua=%s",
		c.Product, c.Version, c.Core[0], c.Core[1], c.Core[2], c.HTTP2, c.HTTP3, c.StubStatus, lua)
}
