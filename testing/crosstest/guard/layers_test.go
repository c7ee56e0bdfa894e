package guard

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"openflare/testing/testsupport"
)

// The layers of docs/ARCHITECTURE.md, as rules on direct imports: who may
// run processes, who may open sockets, what stays pure, and that the leaf
// libraries under internal/ never reach up into agent/.
var (
	// render turns a version into text and policy judges it: no disk,
	// network, process or clock.
	purePkgs      = []string{"agent/render", "agent/policy"}
	renderForbids = []string{"os", "os/exec", "net", "net/http", "crypto/tls", "syscall", "time", "io/fs", "golang.org/x/sys/unix"}
	// Only agent/nginx starts processes (nginx -V, -t, the master),
	// agent/updater its one trial run of a downloaded agent binary
	// ("-version", before the binary may replace the running one), and
	// agent/command's join, an operator's first-run command, the service
	// restart (systemctl, or the OpenWrt init script) after it wrote
	// agent.json. The daemon never runs join.
	processOwners = []string{"agent/nginx", "agent/updater", "agent/command"}
	// Packages that open sockets: the server's two channels, node-IP
	// detection, the GeoIP downloads from agent.json's URLs, the release
	// lookups and downloads of self-update (agent.json's update_api_url),
	// and the named loopback probes (observability's stub_status read,
	// nginx's self-test).
	socketOwners = []string{"agent/controlplane", "agent/wsclient", "agent/nodeip", "agent/observability", "agent/nginx", "agent/geoip", "agent/updater"}
	socketPkgs   = []string{"net", "net/http", "crypto/tls", "golang.org/x/net/websocket"}
)

// checkLayers lists the layering violations among pkgs, whose paths sit
// under root (this module, or a test module laid out like it).
func checkLayers(pkgs []*pkg, root string) []string {
	var out []string
	for _, p := range pkgs {
		rel, ok := strings.CutPrefix(p.ImportPath, root+"/")
		if !ok {
			continue
		}
		for _, imp := range p.Imports {
			switch {
			case slices.Contains(purePkgs, rel) && slices.Contains(renderForbids, imp):
				out = append(out, fmt.Sprintf("%s imports %s: it is pure (no disk, network, process or clock)", rel, imp))
			case imp == "os/exec" && !slices.Contains(processOwners, rel):
				out = append(out, fmt.Sprintf("%s imports os/exec: only %s starts processes", rel, strings.Join(processOwners, ", ")))
			case slices.Contains(socketPkgs, imp) && strings.HasPrefix(rel, "agent/") && !slices.Contains(socketOwners, rel):
				out = append(out, fmt.Sprintf("%s imports %s: only %s open sockets", rel, imp, strings.Join(socketOwners, ", ")))
			case strings.HasPrefix(rel, "internal/") && strings.HasPrefix(imp, root+"/agent/"):
				out = append(out, fmt.Sprintf("%s imports %s: internal/ libraries import nothing from agent/", rel, strings.TrimPrefix(imp, root+"/")))
			}
		}
	}
	slices.Sort(out)
	return out
}

// listImports lists the non-test packages matching patterns, with their
// direct imports.
func listImports(t *testing.T, patterns ...string) []*pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-tags", releaseTags, "-json=ImportPath,Imports"}, patterns...)...)
	cmd.Dir = testsupport.ModuleRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", patterns, err)
	}
	var pkgs []*pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, &p)
	}
	return pkgs
}

func TestLayering(t *testing.T) {
	pkgs := listImports(t, "./agent/...", "./internal/...")
	if len(pkgs) < 10 {
		t.Fatalf("only %d packages listed", len(pkgs))
	}
	for _, v := range checkLayers(pkgs, modulePath) {
		t.Error(v)
	}
}

// The guard fails a renderer that runs a process, reads the clock and
// dials, and an internal library that imports agent/.
func TestLayeringCatchesBadPackages(t *testing.T) {
	root := modulePath + "/testing/crosstest/guard/testdata/badlayer"
	got := checkLayers(listImports(t, "./testing/crosstest/guard/testdata/badlayer/..."), root)
	want := []string{
		"agent/render imports net: it is pure (no disk, network, process or clock)",
		"agent/render imports os/exec: it is pure (no disk, network, process or clock)",
		"agent/render imports time: it is pure (no disk, network, process or clock)",
		"internal/leaf imports agent/state: internal/ libraries import nothing from agent/",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
