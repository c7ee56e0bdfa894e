package render

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

const swLocations = "\n" +
	"    location = /sw.js {\n" +
	"        alias __OPENFLARE_SW_DIR__/sw.js;\n" +
	"        default_type application/javascript;\n" +
	"        add_header Service-Worker-Allowed /;\n" +
	"        add_header Cache-Control \"no-cache\";\n" +
	"    }\n" +
	"\n" +
	"    location = /offline.html {\n" +
	"        alias __OPENFLARE_SW_DIR__/offline.html;\n" +
	"        default_type text/html;\n" +
	"        add_header Cache-Control \"no-cache\";\n" +
	"    }\n" +
	"\n" +
	"    location = /__openflare_sw_challenge {\n" +
	"        internal;\n" +
	"        # hit when sw.runtime.check() intercepts the homepage in the access phase\n" +
	"        content_by_lua_file __OPENFLARE_SW_DIR__/challenge.lua;\n" +
	"    }\n"

// serviceWorker is the SW offline option (DATAPLANE 7).
type serviceWorker struct {
	domains map[string]bool // nil: off
}

func newServiceWorker(c *restyConfig) serviceWorker {
	if !c.SWOfflineEnabled || len(c.SWOfflineDomains) == 0 {
		return serviceWorker{}
	}
	sw := serviceWorker{domains: make(map[string]bool, len(c.SWOfflineDomains))}
	for _, d := range c.SWOfflineDomains {
		sw.domains[d] = true
	}
	return sw
}

func (s serviceWorker) enabled() bool { return s.domains != nil }

// covers reports whether an HTTPS server for these domains gets the SW: any
// one listed domain (exact match) is enough.
func (s serviceWorker) covers(domains []string) bool {
	for _, d := range domains {
		if s.domains[d] {
			return true
		}
	}
	return false
}

// offlineHTML is sw/offline.html: the custom HTML, else the built-in page.
func offlineHTML(c *restyConfig) string {
	if strings.TrimSpace(c.SWOfflineHTML) != "" {
		return c.SWOfflineHTML
	}
	return builtinOfflineHTML
}

// swJS generates sw/sw.js. The cache name carries a hash of the offline page
// so a new page evicts the old cache on the next activation.
func swJS(offline string) string {
	sum := sha256.Sum256([]byte(offline))
	return swJSHead + hex.EncodeToString(sum[:])[:12] + swJSTail
}
