package render

import (
	"fmt"
	"path"
	"strings"
	"unicode"
)

const (
	defaultPagesRoot   = "__OPENFLARE_PAGES_DIR__"
	defaultPagesEntry  = "index.html"
	defaultSPAFallback = "/index.html"
)

// pagesLocations renders a Pages route's root, index and locations
// (PROTOCOL 5.2 "Pages route"). Pages never get the origin error page.
func (rd *renderer) pagesLocations(r *route) string {
	d := r.PagesDeployment
	root := strings.TrimSpace(d.LocalRoot)
	if root == "" {
		root = defaultPagesRoot
	}
	entry := strings.TrimSpace(d.EntryFile)
	if entry == "" {
		entry = defaultPagesEntry
	}
	var b strings.Builder
	b.Grow(1024)
	b.WriteString("    root ")
	nginxQuote(&b, root)
	b.WriteString(";\n    index ")
	nginxQuote(&b, entry)
	b.WriteString(";\n")
	writeAPIProxy(&b, d)

	// With an SPA fallback the site root serves the app shell too.
	rootTry, miss := "/"+strings.TrimLeft(entry, "/"), "=404"
	if d.SPAFallbackEnabled {
		rootTry = spaFallback(d.SPAFallbackPath)
		miss = rootTry
	}
	lim := effectiveLimits(r, rd.cfg)
	b.WriteString("    location = / {\n")
	writeBasicAuth(&b, r)
	writeLimits(&b, lim)
	writeLines(&b, "        try_files ", rootTry, " =404;\n    }\n\n\n")
	b.WriteString("    location / {\n")
	writeBasicAuth(&b, r)
	writeLimits(&b, lim)
	writeLines(&b, "        try_files $uri $uri/ ", miss, ";\n    }\n")
	return b.String()
}

// writeAPIProxy emits the API proxy location when it is on with a path and a
// target. A rewrite maps the path prefix onto the rewrite prefix; `/` as the
// rewrite strips the prefix.
func writeAPIProxy(b *strings.Builder, d *pagesDeployment) {
	loc, pass := apiProxy(d)
	if loc == "" {
		return
	}
	writeLines(b, "    location ", loc, " {\n")
	if rw := strings.TrimSpace(d.APIProxyRewrite); rw != "" {
		if !strings.HasPrefix(rw, "/") {
			rw = "/" + rw
		}
		target := strings.TrimRight(rw, "/")
		bare := target
		if bare == "" {
			bare = "/"
		}
		re := quoteMeta(loc)
		writeLines(b,
			"        rewrite ^", re, "/(.*)$ ", target, "/$1 break;\n",
			"        rewrite ^", re, "$ ", bare, " break;\n")
	}
	writeLines(b,
		"        proxy_pass ", pass, ";\n",
		"        proxy_http_version 1.1;\n",
		"        proxy_set_header Host $http_host;\n",
		proxyForwardHeaders,
		"        proxy_set_header Upgrade $http_upgrade;\n",
		"        proxy_set_header Connection $connection_upgrade;\n",
		"    }\n\n")
}

// apiProxy is the API proxy location and its proxy_pass target, or two
// empty strings when the deployment has none: it is off, or its path or
// target is blank.
func apiProxy(d *pagesDeployment) (loc, pass string) {
	loc, pass = apiProxyPath(d.APIProxyPath), strings.TrimSpace(d.APIProxyPass)
	if !d.APIProxyEnabled || loc == "" || pass == "" {
		return "", ""
	}
	return loc, pass
}

// apiProxyPath normalises the API prefix: leading `/` added, trailing `/`
// removed. "" (also from `/` alone) means no API location, since it would
// shadow `location /`.
func apiProxyPath(p string) string {
	p = strings.TrimRight(strings.TrimSpace(p), "/")
	if p == "" {
		return ""
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return p
}

// spaFallback sanitises spa_fallback_path into a try_files target: a missing
// leading `/` is added; anything that could escape the site root or break
// the directive falls back to /index.html; the rest is path.Clean-ed.
func spaFallback(p string) string {
	if p == "" {
		return defaultSPAFallback
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	if p == "/" || strings.HasSuffix(p, "/") || strings.ContainsAny(p, "\\\"';") || strings.ContainsFunc(p, unicode.IsSpace) {
		return defaultSPAFallback
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return defaultSPAFallback
		}
	}
	return path.Clean(p)
}

// PagesProjectIDs lists the Pages projects a config version serves
// (PROTOCOL 9): each `upstream_type: "pages"` route's pages_project_id, else
// its pages_deployment.project_id. Deduplicated, sorted ascending.
func PagesProjectIDs(sourceConfigJSON string) ([]uint64, error) {
	s, err := decodeSnapshot(sourceConfigJSON)
	if err != nil {
		return nil, err
	}
	seen := make(map[uint64]bool)
	for i := range s.Routes {
		r := &s.Routes[i]
		if !r.isPages() {
			continue
		}
		id := r.PagesProjectID
		if id == 0 && r.PagesDeployment != nil {
			id = r.PagesDeployment.ProjectID
		}
		if id == 0 {
			return nil, fmt.Errorf("route %s is a Pages route without a project id", r.displayName())
		}
		seen[id] = true
	}
	return sortedIDs(seen), nil
}
