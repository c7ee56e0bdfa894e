package nginx

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// The probe is confirmed by a worker of the landed generation only: answers
// of the previous configuration's workers, which accept for a moment after
// a reload, are asked again; a data plane that only ever answers with the
// old generation fails the probe, saying so.
func TestSelfTestWaitsForTheNewGeneration(t *testing.T) {
	main := filepath.Join(t.TempDir(), "nginx.conf")
	os.WriteFile(main, []byte("http {\n    server {\n        "+ProbeMarker+"\n        "+generationLine+`0123456789abcdef";`+"\n    }\n}\n"), 0o644)
	var asked atomic.Int32
	oldFor := int32(3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) <= oldFor {
			fmt.Fprintln(w, "ok fedcba9876543210")
			return
		}
		fmt.Fprintln(w, "ok 0123456789abcdef")
	}))
	defer srv.Close()
	n := &Ctl{MainConfig: main, ProbeURL: srv.URL + "/openflare/agent-probe"}
	if err := n.SelfTest(context.Background(), 0); err != nil || asked.Load() != oldFor+1 {
		t.Fatalf("err = %v after %d answers", err, asked.Load())
	}

	asked.Store(0)
	oldFor = 1 << 30
	err := n.SelfTest(context.Background(), 0)
	if !errors.Is(err, ErrProbe) || !strings.Contains(err.Error(), "previous configuration") {
		t.Fatalf("only the old generation answering: %v", err)
	}
}

func TestGenerationOfMainConfig(t *testing.T) {
	for conf, want := range map[string]string{
		"set $openflare_generation \"abc\";\n": "abc",
		"no line":                              "",
		"set $openflare_generation \"abc":      "",
	} {
		if got := generation([]byte(conf)); got != want {
			t.Errorf("generation(%q) = %q, want %q", conf, got, want)
		}
	}
}
