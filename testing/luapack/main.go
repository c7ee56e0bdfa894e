// Command luapack writes agent/luaassets/lua.pack.xz, the form of agent/luaassets/lua that the
// binary embeds (go generate ./agent/luaassets runs it): every file, in path
// order so the pack is reproducible, as "<size> <path>\n" and its bytes, Lua
// scripts without their comments (luamin), the whole compressed by the xz
// tool. Not tar: its headers cost about 900 bytes more in a binary at its
// flash budget; pb=0 (no alignment, right for text) saves another 150.
package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"openflare/testing/luamin"
)

func main() {
	var raw bytes.Buffer
	err := filepath.WalkDir("lua", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b = []byte(luamin.Pack(p, string(b)))
		fmt.Fprintf(&raw, "%d %s\n", len(b), filepath.ToSlash(strings.TrimPrefix(p, "lua"+string(filepath.Separator))))
		raw.Write(b)
		return nil
	})
	if err == nil {
		cmd := exec.Command("xz", "--lzma2=preset=9e,pb=0", "-c")
		cmd.Stdin, cmd.Stderr = &raw, os.Stderr
		var out []byte
		if out, err = cmd.Output(); err == nil {
			err = os.WriteFile("lua.pack.xz", out, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pack:", err)
		os.Exit(1)
	}
}
