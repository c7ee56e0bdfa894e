package pages

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"openflare/agent/controlplane"
	testcp "openflare/testing/controlplane"
)

// Against the test control plane over HTTP: a wrong hash, a body longer or
// shorter than announced, and a deployment that changes during the
// download are each refused with a clear error, leave no file behind, and
// keep the current release; the next good package deploys.
func TestDownloadFaults(t *testing.T) {
	srv := testcp.New()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	_, tok := srv.AddNode("edge")
	client := controlplane.New(srv.URL(), tok, "test", 5e9)
	dir := t.TempDir()
	s := &Syncer{Dir: dir, CP: client}
	pkg := gzipBytes(tarBytes(t, site1))
	srv.SetPagesPackage(3, pkg, 2, int64(len("<h1>one</h1>")+len("console.log(1)")))
	if err := s.Reconcile(context.Background(), []uint64{3}); err != nil {
		t.Fatal(err)
	}
	site2 := []member{{name: "index.html", body: "<h1>two</h1>"}}
	pkg2 := gzipBytes(tarBytes(t, site2))
	for _, tc := range []struct {
		name  string
		fault testcp.PagesFault
		want  string
	}{
		{"wrong hash", testcp.PagesFault{WrongHash: true}, "hashes to"},
		{"longer body", testcp.PagesFault{ExtraBytes: 100}, "over the announced"},
		{"shorter body", testcp.PagesFault{MissingBytes: 100}, "download"},
		{"deployment changes during the download", testcp.PagesFault{NewDeploymentAfterDownload: true}, "became"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.SetPagesPackage(3, pkg2, 1, int64(len("<h1>two</h1>")))
			srv.SetPagesFault(3, tc.fault)
			err := s.Reconcile(context.Background(), []uint64{3})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if got := read(t, filepath.Join(dir, "projects", "3", "current", "index.html")); got != "<h1>one</h1>" {
				t.Fatalf("current changed: %q", got)
			}
			entries, _ := os.ReadDir(filepath.Join(dir, "projects", "3", "releases"))
			for _, e := range entries {
				if strings.HasSuffix(e.Name(), ".tmp") {
					t.Fatalf("left behind: %s", e.Name())
				}
			}
		})
	}
	srv.SetPagesFault(3, testcp.PagesFault{})
	if err := s.Reconcile(context.Background(), []uint64{3}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(dir, "projects", "3", "current", "index.html")); got != "<h1>two</h1>" {
		t.Fatalf("the good package did not deploy: %q", got)
	}
}
