package ipgroups

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"openflare/agent/protocol"
)

// The child process: pushes new versions of group 1 into the store in
// crashDirEnv until killed, appending the hash of every snapshot version to
// crashLogEnv before writing it.
const (
	crashDirEnv   = "OPENFLARE_IPGROUPS_CRASH_DIR"
	crashLogEnv   = "OPENFLARE_IPGROUPS_CRASH_LOG"
	crashStartEnv = "OPENFLARE_IPGROUPS_CRASH_START"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		crashChild(dir)
		return
	}
	os.Exit(m.Run())
}

// crashVersion is version v of group 1, distinct for every v; sizes vary so
// a torn file would be truncated JSON, and are large enough that a kill
// often lands mid-write.
func crashVersion(v int) protocol.WAFIPGroup {
	list := append(bigList(3000+v%7*2000, v), "version-"+strconv.Itoa(v))
	return group(1, true, list...)
}

// crashStatic is a group that never changes, so every write also carries
// bytes spliced from the previous file.
var crashStatic = group(2, true, "198.51.100.7", "2001:db8::/32")

func crashChild(dir string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	start, err := strconv.Atoi(os.Getenv(crashStartEnv))
	if err != nil {
		fail(err)
	}
	logFile, err := os.OpenFile(os.Getenv(crashLogEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fail(err)
	}
	s, err := Open(dir, nil)
	if err != nil {
		fail(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for v := start; time.Now().Before(deadline); v++ {
		g := crashVersion(v)
		// Recorded before the write: a SIGKILL after the checksum file
		// changed must find the version here. A plain write survives the
		// kill of the process (it is in the page cache).
		if _, err := fmt.Fprintln(logFile, sha(expectedSnapshot(g, crashStatic))); err != nil {
			fail(err)
		}
		res, err := push(s, []protocol.WAFIPGroup{g})
		if err != nil || len(res.Landed) != 1 {
			fail(fmt.Errorf("push %d: %+v, %v", v, res, err))
		}
		if v == start {
			fmt.Println("started")
		}
	}
}

// Killing a process with SIGKILL at random instants while it pushes never
// leaves a JSON that fails to parse, and the checksum file always names a
// version whose JSON was completely written: the current one or, when the
// kill fell between the two writes, the one before it.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns writers")
	}
	_, dir := seed(t, crashVersion(0), crashStatic)
	current := sha(readFile(t, filepath.Join(dir, SnapshotName)))
	logDir := t.TempDir()
	betweenWrites := 0
	for round := range 25 {
		logPath := filepath.Join(logDir, fmt.Sprintf("round-%d.log", round))
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashLogEnv+"="+logPath, crashStartEnv+"="+strconv.Itoa(1+round*100000))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
			t.Fatalf("writer did not start: %v", err)
		}
		time.Sleep(time.Duration(rand.IntN(40000)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("writer ended with %v, want killed", err)
		}

		// Versions in write order: the one the round started from, then
		// every version the child recorded.
		versions := []string{current}
		versions = append(versions, strings.Fields(string(readFile(t, logPath)))...)
		data := readFile(t, filepath.Join(dir, SnapshotName))
		var doc struct {
			Groups map[string]protocol.WAFIPGroup `json:"groups"`
		}
		if err := json.Unmarshal(data, &doc); err != nil || len(doc.Groups) != 2 {
			t.Fatalf("round %d: snapshot does not parse (%d groups): %v", round, len(doc.Groups), err)
		}
		j := slices.Index(versions, sha(data))
		if j < 0 {
			t.Fatalf("round %d: JSON is not a version that was written", round)
		}
		sum := strings.TrimSuffix(string(readFile(t, filepath.Join(dir, ChecksumName))), "\n")
		switch c := slices.Index(versions, sum); {
		case c == j:
		case c == j-1:
			betweenWrites++
		default:
			t.Fatalf("round %d: checksum file names version %d, JSON is version %d", round, c, j)
		}

		// The next start repairs a lagging checksum file.
		if _, err := Open(dir, nil); err != nil {
			t.Fatal(err)
		}
		assertConsistent(t, dir)
		current = sha(data)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*")); len(left) != 0 {
		t.Fatalf("stale temps after Open: %v", left)
	}
	t.Logf("%d of 25 kills fell between the JSON and the checksum write", betweenWrites)
}
