package state

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/internal/atomicfile"
)

// writerEnv makes the test binary act as a process that rewrites state files
// in a loop until it is killed.
const writerEnv = "OPENFLARE_STATE_TORTURE_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(writerEnv); dir != "" {
		tortureWriter(dir)
		return
	}
	os.Exit(m.Run())
}

func tortureWriter(dir string) {
	for i := 0; ; i++ {
		s := State{
			Current: protocol.ConfigRef{Version: fmt.Sprintf("20261129-%03d", i%1000)},
			// Vary the size so a torn write would show as truncated JSON.
			LastError: strings.Repeat("x", (i*7919)%20000),
		}
		path := filepath.Join(dir, "state-"+strconv.Itoa(i%3)+".json")
		if err := atomicfile.SaveJSON(path, s); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if i == 0 {
			fmt.Println("started")
		}
	}
}

// Killing a writer with SIGKILL at random instants never leaves a state file
// that fails to parse, and stale temp files are cleaned on the next load.
func TestTornWriteSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns writers")
	}
	dir := t.TempDir()
	for round := 0; round < 25; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), writerEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until the writer has completed at least one write, then let it
		// run for a random while before killing it mid-flight.
		buf := make([]byte, 8)
		if _, err := out.Read(buf); err != nil {
			t.Fatalf("writer did not start: %v", err)
		}
		time.Sleep(time.Duration(rand.IntN(30000)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		files, _ := filepath.Glob(filepath.Join(dir, "state-*.json"))
		if len(files) == 0 {
			t.Fatal("no state file survived")
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var s State
			if err := json.Unmarshal(data, &s); err != nil {
				t.Fatalf("round %d: %s is torn: %v", round, filepath.Base(f), err)
			}
			if info, _ := os.Stat(f); info.Mode().Perm() != FileMode {
				t.Fatalf("%s mode = %v, want %v", f, info.Mode().Perm(), FileMode)
			}
		}
	}
	for i := 0; i < 3; i++ {
		if _, err := Open(filepath.Join(dir, "state-"+strconv.Itoa(i)+".json"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if stale, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*")); len(stale) != 0 {
		t.Fatalf("stale temp files left after load: %v", stale)
	}
}

// A state file that does not parse is moved aside and the agent starts fresh.
func TestCorruptStateMovedAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent-state.json")
	if err := os.WriteFile(path, []byte(`{"current_version": "20261129-0`), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := Open(path, nil)
	if err != nil {
		t.Fatalf("open corrupt state: %v", err)
	}
	if got := st.Get(); got != (State{}) {
		t.Fatalf("state = %+v, want fresh", got)
	}
	aside, _ := filepath.Glob(path + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("corrupt file not moved aside: %v", aside)
	}
	if err := st.Update(func(s *State) { s.Current.Version = "20261129-001" }); err != nil {
		t.Fatal(err)
	}
	again, err := Open(path, nil)
	if err != nil || again.Get().Current.Version != "20261129-001" {
		t.Fatalf("reopen: %+v, %v", again.Get(), err)
	}
}

// A file whose JSON is valid but of the wrong shape is also set aside rather
// than half-applied.
func TestWrongShapeStateNotHalfApplied(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	os.WriteFile(path, []byte(`{"current_version":"v1","current_checksum":7}`), 0o600)
	st, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Get().Current.Version != "" {
		t.Fatalf("half-decoded state leaked: %+v", st.Get())
	}
}

// The file keeps upstream's flat keys: state written by earlier releases
// loads, and what this one writes reads back the same.
func TestFlatLayoutRoundTrip(t *testing.T) {
	old := `{"node_id":"n1","current_version":"v1","current_checksum":"c1","blocked_version":"v2","blocked_checksum":"c2","blocked_reason":"r","last_error":"e"}`
	var s State
	if err := json.Unmarshal([]byte(old), &s); err != nil {
		t.Fatal(err)
	}
	want := State{NodeID: "n1", Current: protocol.ConfigRef{Version: "v1", Checksum: "c1"}, Blocked: protocol.ConfigRef{Version: "v2", Checksum: "c2"}, BlockedReason: "r", LastError: "e"}
	if s != want {
		t.Fatalf("loaded %+v", s)
	}
	b, err := json.Marshal(s)
	if err != nil || !strings.Contains(string(b), `"current_version":"v1"`) || !strings.Contains(string(b), `"blocked_checksum":"c2"`) {
		t.Fatalf("%s %v", b, err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil || back != s {
		t.Fatalf("round trip %+v %v", back, err)
	}
}
