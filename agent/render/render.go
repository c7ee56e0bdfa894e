// Package render turns a published config version (E4's source_config_json and
// support_files) into nginx text, byte for byte as the OpenFlare Server renders
// it, so the server's checksum verifies the result (PROTOCOL 4.3, 5).
// It is pure: no disk, no network, no clock.
package render

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sort"
	"strings"

	"github.com/openflare/openflare-agent/agent/protocol"
)

// Output is one rendered version, placeholders (__OPENFLARE_*__) intact.
type Output struct {
	Main  string
	Route string
	// Files are the support files to land: the shipped ones plus those the
	// renderer adds (waf_config.json, the origin error page, the service
	// worker files, openresty_config.json), deduplicated by path (the last
	// one wins) and sorted by path.
	Files []protocol.SupportFile
}

// Render renders a version. Errors name the route and the reason.
func Render(sourceConfigJSON string, support []protocol.SupportFile) (*Output, error) {
	return nil, errors.New("render: not implemented")
}

// Checksum is the PROTOCOL 4.3 checksum of the output.
func (o *Output) Checksum() string { return Checksum(o.Main, o.Route, o.Files) }

// MainChecksum is the sha256 hex of the main config as rendered.
func (o *Output) MainChecksum() string { return sha256Hex(o.Main) }

// RouteChecksum is the sha256 hex of the route config as rendered.
func (o *Output) RouteChecksum() string { return sha256Hex(o.Route) }

// Checksum computes PROTOCOL 4.3 over main, route and files: deduplicated by
// path (last wins), openresty_config.json dropped, sorted by path.
func Checksum(main, route string, files []protocol.SupportFile) string {
	byPath := make(map[string]string, len(files))
	for _, f := range files {
		byPath[f.Path] = f.Content
	}
	delete(byPath, "openresty_config.json")
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	h := sha256.New()
	var b strings.Builder
	b.WriteString(main)
	b.WriteString("\n--route-config--\n")
	b.WriteString(route)
	b.WriteString("\n--support-files--\n")
	h.Write([]byte(b.String()))
	for _, p := range paths {
		h.Write([]byte(p))
		h.Write([]byte{'\n'})
		h.Write([]byte(byPath[p]))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
