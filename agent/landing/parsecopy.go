package landing

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// WriteParseCopy lays out, in dir (emptied first), what nginx reads in
// the template policy's nginx parse: the copy (policy.ParseCopy) with its
// placeholders pointing into dir, the version's certificate files (the
// only files a main config reads from the version), a route config that
// declares the variables the version's route config sets (main configs
// key zones on them), and mime.types. Nothing it names is the live tree's,
// so the parse runs before anything of the version is landed. It returns
// the copy's main config.
func (s *Set) WriteParseCopy(p Paths, dir, copyText, routeText string) (string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("policy parse: %w", err)
	}
	q := Paths{
		Main:              filepath.Join(dir, "main.conf"),
		Route:             filepath.Join(dir, "routes.conf"),
		AccessLog:         filepath.Join(dir, "access.log"),
		ErrorLog:          filepath.Join(dir, "error.log"),
		PID:               filepath.Join(dir, "nginx.pid"),
		TempDir:           filepath.Join(dir, "temp"),
		ProxyCache:        filepath.Join(dir, "cache"),
		CertDir:           filepath.Join(dir, "certs"),
		OpenRestyCertDir:  filepath.Join(dir, "certs"),
		LuaDir:            filepath.Join(dir, "lua"),
		OpenRestyLuaDir:   filepath.Join(dir, "lua"),
		RuntimeConfigDir:  filepath.Join(dir, "runtime"),
		PagesDir:          filepath.Join(dir, "pages"),
		ObservabilityPort: p.ObservabilityPort,
	}
	files := []File{
		{Path: q.Main, Data: []byte(q.replacer(nginxText).Replace(copyText))},
		{Path: q.Route, Data: []byte(routeVariables(routeText))},
		{Path: filepath.Join(dir, "mime.types"), Data: mimeTypes},
	}
	for _, f := range s.Files {
		if rel, ok := strings.CutPrefix(f.Path, p.CertDir+"/"); ok {
			f.Path = filepath.Join(q.CertDir, rel)
			files = append(files, f)
		}
	}
	dirs := []string{q.TempDir, q.ProxyCache, q.CertDir, q.LuaDir, q.RuntimeConfigDir, q.PagesDir}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", fmt.Errorf("policy parse: %w", err)
		}
	}
	for i := range files {
		if err := files[i].writeScratch(); err != nil {
			return "", fmt.Errorf("policy parse: %w", err)
		}
	}
	return q.Main, nil
}

// writeScratch writes f at f.Path for the policy parse alone (0600): a
// scratch copy, not worth landing's fsyncs.
func (f *File) writeScratch() error {
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
		return err
	}
	src, _ := f.content()
	dst, err := os.OpenFile(f.Path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}

// routeVariables declares, at the http level, every variable the route
// config sets: its servers define them with set, and main configs use
// them in zones (limit_req_zone $openflare_waf_site...).
func routeVariables(routeText string) string {
	var names []string
	for _, line := range strings.Split(routeText, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimLeft(line, " \t"), "set $")
		if !ok {
			continue
		}
		n := strings.IndexFunc(rest, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_')
		})
		if n > 0 && (rest[n] == ' ' || rest[n] == '\t') && !slices.Contains(names, rest[:n]) {
			names = append(names, rest[:n])
		}
	}
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "map $host $%s { default \"\"; }\n", n)
	}
	return b.String()
}
