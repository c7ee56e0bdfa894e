package apply

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"openflare/agent/controlplane"
	"openflare/agent/protocol"
)

// e4Reply is the body of an E4 reply for ac, its support files being
// files (raw JSON array elements) instead of ac's.
func e4Reply(t *testing.T, ac protocol.ActiveConfig, files []string) string {
	t.Helper()
	ac.SupportFiles = nil
	head, err := json.Marshal(ac)
	if err != nil {
		t.Fatal(err)
	}
	// {"version":…,"support_files":null,…} with the array spliced in.
	return `{"error_msg":"","data":` + strings.Replace(string(head), `"support_files":null`, `"support_files":[`+strings.Join(files, ",")+`]`, 1) + `}`
}

// serveE4 makes the rig fetch E4 from a real client talking to a server
// that answers reply(), and takes apply logs.
func (r *rig) serveE4(reply func(w http.ResponseWriter)) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == protocol.PathActive {
			reply(w)
			return
		}
		io.WriteString(w, `{"error_msg":"","data":{}}`)
	}))
	r.t.Cleanup(srv.Close)
	c := controlplane.New(srv.URL, "0123456789abcdef0123456789abcdef", "test", 5*time.Second)
	// What the smallest node takes: a file or the source up to 2 MiB.
	c.Budgets = controlplane.BudgetsFor(0)
	r.e.CP = c
}

// landed is every file under the data dir but the agent's own state (the
// stage among it): what nginx reads.
func (r *rig) landed() map[string]string {
	r.t.Helper()
	out := map[string]string{}
	stateDir := filepath.Dir(r.e.StageDir)
	err := filepath.WalkDir(filepath.Join(r.dir, "data"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == stateDir && d.IsDir() {
			if err == nil {
				err = filepath.SkipDir
			}
			return err
		}
		if !d.IsDir() {
			fi, _ := d.Info()
			out[p] = fi.Mode().String() + " " + r.read(p)
		}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// Support files reach the stage as E4 is decoded and land from there; the
// stage is gone once the apply is over, and at boot whatever a crash left.
func TestSupportFilesLandThroughTheStage(t *testing.T) {
	r := newRig(t)
	v1 := version(t, "v1", "one", "")
	files := []string{`{"path":"9.crt","content":"CERT v1\n"}`, `{"path":"9.key","content":"KEY v1\n"}`}
	r.serveE4(func(w http.ResponseWriter) { io.WriteString(w, e4Reply(t, v1, files)) })
	target := ref(v1)
	if err := r.e.Apply(context.Background(), &target, Normal); err != nil {
		t.Fatal(err)
	}
	if r.read(filepath.Join(r.paths.CertDir, "9.crt")) != "CERT v1\n" || r.read(filepath.Join(r.paths.CertDir, "9.key")) != "KEY v1\n" {
		t.Fatal("support files not landed")
	}
	if _, err := os.Stat(r.e.StageDir); !os.IsNotExist(err) {
		t.Fatalf("stage left after the apply: %v", err)
	}
	os.MkdirAll(r.e.StageDir, 0o700)
	os.WriteFile(filepath.Join(r.e.StageDir, "0"), []byte("left by a crash"), 0o600)
	if err := r.e.Boot(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.e.StageDir); !os.IsNotExist(err) {
		t.Fatalf("stage left after boot: %v", err)
	}
}

// A hostile E4 reply fails the apply with a reason, whatever the shape of
// the hostility: a support file over its budget, more files than a version may
// have, a path that leaves its place, a reply cut short. Nothing staged
// remains, nothing landed changes, and nothing is written outside.
func TestHostileSupportFilesChangeNothing(t *testing.T) {
	r := newRig(t)
	v1 := version(t, "v1", "one", "")
	v1.SupportFiles = []protocol.SupportFile{{Path: "9.crt", Content: "CERT v1\n"}, {Path: "9.key", Content: "KEY v1\n"}}
	if err := r.publish(v1, Normal); err != nil {
		t.Fatal(err)
	}
	before := r.landed()
	v2 := version(t, "v2", "two", "")
	many := make([]string, 10_001)
	for i := range many {
		many[i] = `{"path":"` + strconv.Itoa(i) + `.crt","content":"x"}`
	}
	for _, tc := range []struct {
		name  string
		reply func(w http.ResponseWriter)
		want  string
	}{
		{"a file over its budget", func(w http.ResponseWriter) {
			io.WriteString(w, e4Reply(t, v2, []string{`{"path":"1.crt","content":"ok"}`, `{"path":"big.crt","content":"` + strings.Repeat("b", 2<<20+1) + `"}`}))
		}, `active config: reply holds support file "big.crt" over 2 MiB`},
		{"too many files", func(w http.ResponseWriter) { io.WriteString(w, e4Reply(t, v2, many)) }, "more than 10000 support files"},
		{"a path outside", func(w http.ResponseWriter) {
			io.WriteString(w, e4Reply(t, v2, []string{`{"path":"1.crt","content":"ok"}`, `{"path":"../../../../escape.crt","content":"x"}`}))
		}, `support file "../../../../escape.crt": path escapes its directory or is not clean`},
		{"a reply cut short", func(w http.ResponseWriter) {
			full := e4Reply(t, v2, []string{`{"path":"1.crt","content":"` + strings.Repeat("c", 256<<10) + `"}`, `{"path":"2.crt","content":"late"}`})
			w.Header().Set("Content-Length", strconv.Itoa(len(full)))
			io.WriteString(w, full[:len(full)*3/4])
			w.(http.Flusher).Flush()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		}, "fetch active config: active config: read reply: unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.serveE4(tc.reply)
			target := ref(v2)
			// Force: neither the fetch back-off nor the blocklist of the
			// case before holds this one back.
			if err := r.e.Apply(context.Background(), &target, Force); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v", err)
			}
			if _, err := os.Stat(r.e.StageDir); !os.IsNotExist(err) {
				t.Fatalf("stage left: %v", err)
			}
			after := r.landed()
			for p, was := range before {
				if after[p] != was {
					t.Errorf("%s changed", p)
				}
			}
			for p := range after {
				if _, ok := before[p]; !ok {
					t.Errorf("%s appeared", p)
				}
			}
			if st := r.state(); st.Current != ref(v1) {
				t.Fatalf("current %+v", st.Current)
			}
			filepath.WalkDir(r.dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Name() == "escape.crt" {
					t.Errorf("%s written", p)
				}
				return nil
			})
		})
	}
}
