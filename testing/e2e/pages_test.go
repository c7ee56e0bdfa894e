package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/agent/testhook"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

// sitePackage is a tar.gz of files under one top directory, with the
// counts the server records at upload.
func sitePackage(t *testing.T, files map[string]string) ([]byte, int, int64) {
	t.Helper()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	var total int64
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		body := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: "dist/" + name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
		total += int64(len(body))
	}
	tw.Close()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(tb.Bytes())
	zw.Close()
	return gz.Bytes(), len(files), total
}

// A Pages route serves its project's package through nginx: the entry
// file, nested paths, and the SPA fallback for unknown paths. A new
// deployment of the project (no new config version) is served without an
// nginx reload, and a package the agent refuses leaves the site as it was.
func TestPagesServeAndSwitch(t *testing.T) {
	cp := controlPlane(t)
	pkg, files, total := sitePackage(t, map[string]string{
		"index.html":        "pages v1 home",
		"docs/guide.html":   "pages v1 guide",
		"assets/app.css":    "body{color:red}",
		"assets/deep/x.txt": "deep",
	})
	cp.SetPagesPackage(3, pkg, files, total)
	v1 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{{
		ID: 1, SiteName: "docs", Domains: []string{"pages.test"},
		Pages: &controlplane.PagesDeployment{ProjectID: 3, SPAFallbackEnabled: true},
	}}})
	n := newNode(t, cp, nil)
	n.start()
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	waitServes(t, "pages.test", "/", "pages v1 home")
	for path, want := range map[string]string{"/docs/guide.html": "pages v1 guide", "/assets/deep/x.txt": "deep", "/app/some/route": "pages v1 home"} {
		if r := get("pages.test", path); r.status != 200 || r.body != want {
			t.Fatalf("GET %s: %d %q, want %q", path, r.status, r.body, want)
		}
	}
	// The release marker is in the site's root, and no visitor reads it.
	if _, err := os.Stat(n.data("var", "lib", "openflare", "pages", "projects", "3", "current", ".openflare-pages.json")); err != nil {
		t.Fatalf("the marker is not where this test looks: %v", err)
	}
	if r := get("pages.test", "/.openflare-pages.json"); r.status != 404 || strings.Contains(r.body, "deployment") {
		t.Fatalf("the release marker is served: %d %q", r.status, r.body)
	}
	master, workers := n.nginxPID(), workerPIDs(n.nginxPID())

	pkg2, files2, total2 := sitePackage(t, map[string]string{"index.html": "pages v2 home", "docs/guide.html": "pages v2 guide"})
	cp.SetPagesPackage(3, pkg2, files2, total2)
	// While the switch happens, every answer is one release's file, whole:
	// never a partly written file or an error.
	testsupport.WaitFor(t, 30*time.Second, "the new release to serve", func() bool {
		r := get("pages.test", "/docs/guide.html")
		if r.status != 200 || r.body != "pages v1 guide" && r.body != "pages v2 guide" {
			t.Fatalf("during the switch: %d %q", r.status, r.body)
		}
		return r.body == "pages v2 guide"
	})
	waitServes(t, "pages.test", "/", "pages v2 home")
	// v2 has no stylesheet: the SPA fallback answers for it now.
	if r := get("pages.test", "/assets/app.css"); r.body != "pages v2 home" {
		t.Fatalf("a file of the previous release is still served: %d %q", r.status, r.body)
	}
	if n.nginxPID() != master || !slices.Equal(workerPIDs(master), workers) {
		t.Fatal("nginx reloaded for a Pages deployment")
	}

	// A package with a link in it is refused, named by project, and v2
	// keeps serving.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "index.html", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"})
	tw.Close()
	cp.SetPagesPackage(3, tb.Bytes(), 1, 10)
	n.waitLog(`pages project 3`, 30*time.Second)
	testsupport.WaitFor(t, 30*time.Second, "the refusal in a beat's health events", func() bool {
		for _, b := range cp.Heartbeats() {
			for _, e := range b.Payload.HealthEvents {
				if e.EventType == "pages_sync_error" && strings.Contains(e.Message, "symbolic link") {
					return true
				}
			}
		}
		return false
	})
	if r := get("pages.test", "/"); r.body != "pages v2 home" {
		t.Fatalf("after a refused package: %d %q", r.status, r.body)
	}
}

// Killing the agent (SIGKILL) while it extracts a new package, between
// the release and the switch, and in the middle of the switch leaves
// current on the complete previous release (nginx keeps serving it), and
// the next start finishes the job.
func TestPagesCrashKeepsCurrent(t *testing.T) {
	for _, point := range []string{"pages-mid-extract", "pages-before-switch", "pages-mid-switch"} {
		t.Run(point, func(t *testing.T) {
			cp := controlPlane(t)
			pkg, files, total := sitePackage(t, map[string]string{"index.html": "crash v1", "a.txt": "a1"})
			cp.SetPagesPackage(4, pkg, files, total)
			v1 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{{
				ID: 1, SiteName: "crash", Domains: []string{"crash.test"}, Pages: &controlplane.PagesDeployment{ProjectID: 4},
			}}})
			n := newNode(t, cp, nil)
			n.start()
			waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
			waitServes(t, "crash.test", "/", "crash v1")
			n.stop()

			pkg2, files2, total2 := sitePackage(t, map[string]string{"index.html": "crash v2", "a.txt": "a2", "b.txt": "b2"})
			cp.SetPagesPackage(4, pkg2, files2, total2)
			n.start(testhook.CrashEnv + "=" + point)
			n.waitCrash(60 * time.Second)
			if r := get("crash.test", "/"); r.body != "crash v1" {
				t.Fatalf("after a crash at %s: %d %q", point, r.status, r.body)
			}
			n.start()
			waitServes(t, "crash.test", "/", "crash v2")
			if r := get("crash.test", "/b.txt"); r.body != "b2" {
				t.Fatalf("the new release is incomplete: %d %q", r.status, r.body)
			}
		})
	}
}
