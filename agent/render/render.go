// Package render turns a published config version (E4's source_config_json and
// support_files) into nginx text, byte for byte as the OpenFlare Server renders
// it, so the server's checksum verifies the result (PROTOCOL 4.3, 5).
// It reads nothing but its inputs (the support files the agent staged on
// disk among them): no network, no clock.
package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"openflare/agent/protocol"
)

// Paths of the support files the renderer adds (PROTOCOL 5.3). Where each
// lands on a node is agent/landing's business (landing.Place).
const (
	WAFConfigFile       = "waf_config.json"
	originErrorPagePath = "error_pages/origin_error.html.tmpl"
	swJSPath            = "sw/sw.js"
	swOfflinePath       = "sw/offline.html"
	SourceConfigFile    = "openresty_config.json"
)

// Output is one rendered version, placeholders (__OPENFLARE_*__) intact.
type Output struct {
	Main  string
	Route string
	// Files are the support files to land: the shipped ones plus those the
	// renderer adds (waf_config.json, the origin error page, the service
	// worker files, openresty_config.json), deduplicated by path (the last
	// one wins) and sorted by path. Shipped files keep their Staged copy.
	Files []protocol.SupportFile
	// IPGroups are the ids of the IP groups the WAF config references
	// (PROTOCOL 7.2): what the node's IP-group snapshot must hold.
	IPGroups []uint64
	// Origins are where the routes have nginx connect, route by route in
	// the order rendered, each route's as written, duplicates dropped:
	// what the template policy checks (policy.CheckOrigins). The main
	// template's own proxy targets, if a custom one has any, are not here.
	Origins []Origin

	checksum string
}

// Config renders a config version into nginx text and the files to land.
// Errors name the route and the reason. Support files may be staged on
// disk (Staged): only the certificates are read whole, one at a time.
func Config(sourceConfigJSON string, support []protocol.SupportFile) (*Output, error) {
	s, err := decodeSnapshot(sourceConfigJSON)
	if err != nil {
		return nil, err
	}
	if err := validateConfig(&s.Config); err != nil {
		return nil, err
	}
	shipped := make(map[string]protocol.SupportFile, len(support))
	for _, f := range support {
		shipped[f.Path] = f
	}
	rd := &renderer{
		cfg:     &s.Config,
		certs:   newCertStore(shipped),
		pow:     newPowRoutes(&s.WAF),
		errPage: newOriginErrorPage(&s.Config),
		sw:      newServiceWorker(&s.Config),
	}
	rd.b.Grow(rd.estimateSize(s.Routes))
	rd.b.WriteString(routeHeader)
	for i := range s.Routes {
		if err := rd.renderRoute(&s.Routes[i]); err != nil {
			return nil, err
		}
	}
	if err := validateUpstreamNames(s.Routes); err != nil {
		return nil, err
	}
	ipGroups, err := s.WAF.ipGroupIDs()
	if err != nil {
		return nil, fmt.Errorf("waf: %w", err)
	}
	wafJSON, err := json.Marshal(&s.WAF)
	if err != nil {
		return nil, fmt.Errorf("encode waf_config.json: %w", err)
	}
	files := make([]protocol.SupportFile, 0, len(support)+5)
	files = append(files, support...)
	files = append(files, protocol.SupportFile{Path: WAFConfigFile, Content: string(wafJSON)})
	if s.Config.OriginErrorPageEnabled {
		files = append(files, protocol.SupportFile{Path: originErrorPagePath, Content: originErrorHTML(&s.Config)})
	}
	if rd.sw.enabled() {
		offline := offlineHTML(&s.Config)
		files = append(files,
			protocol.SupportFile{Path: swJSPath, Content: swJS(offline)},
			protocol.SupportFile{Path: swOfflinePath, Content: offline})
	}
	files = append(files, protocol.SupportFile{Path: SourceConfigFile, Content: sourceConfigJSON})
	out := &Output{
		Main:     renderMain(&s.Config, requestRates(s.Routes, &s.Config)),
		Route:    rd.b.String(),
		Files:    dedupeSorted(files),
		IPGroups: ipGroups,
		Origins:  dedupeOrigins(rd.origins),
	}
	if out.checksum, err = Checksum(out.Main, out.Route, out.Files); err != nil {
		return nil, err
	}
	return out, nil
}

// Checksum is the PROTOCOL 4.3 checksum of the output.
func (o *Output) Checksum() string { return o.checksum }

// MainChecksum is the sha256 hex of the main config as rendered.
func (o *Output) MainChecksum() string { return sha256Hex(o.Main) }

// RouteChecksum is the sha256 hex of the route config as rendered.
func (o *Output) RouteChecksum() string { return sha256Hex(o.Route) }

// Checksum computes PROTOCOL 4.3 over main, route and files: deduplicated by
// path (last wins), openresty_config.json dropped, sorted by path. Staged
// files are hashed as they are read.
func Checksum(main, route string, files []protocol.SupportFile) (string, error) {
	h := sha256.New()
	for _, s := range []string{main, "\n--route-config--\n", route, "\n--support-files--\n"} {
		h.Write([]byte(s))
	}
	for _, f := range dedupeSorted(files) {
		if f.Path == SourceConfigFile {
			continue
		}
		h.Write([]byte(f.Path))
		h.Write([]byte{'\n'})
		if _, err := io.Copy(h, content(&f)); err != nil {
			return "", fmt.Errorf("checksum: read support file %s: %w", f.Path, err)
		}
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// content reads a support file's content, wherever it is held.
func content(f *protocol.SupportFile) io.Reader {
	if f.Staged != nil {
		return io.NewSectionReader(f.Staged, 0, f.Staged.Size())
	}
	return strings.NewReader(f.Content)
}

// dedupeSorted keeps the last file of each path and sorts by path (byte-wise).
func dedupeSorted(files []protocol.SupportFile) []protocol.SupportFile {
	last := make(map[string]int, len(files))
	for i, f := range files {
		last[f.Path] = i
	}
	out := make([]protocol.SupportFile, 0, len(last))
	for i, f := range files {
		if last[f.Path] == i {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
