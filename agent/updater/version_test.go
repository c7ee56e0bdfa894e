package updater

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
)

func TestCompareVersions(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"1.2.3", "v1.2.3", 0},
		{"v1.2", "1.2.0", 0},
		{"1.2.3+build.7", "1.2.3", 0},
		{"1.10.0", "1.9.9", 1},
		{"2.0.0", "10.0.0", -1},
		{"1.2.3", "1.2.3.1", -1},
		{"1.0.0-rc.1", "1.0.0", -1},
		{"1.0.0-rc.2", "1.0.0-rc.10", -1},
		{"1.0.0-alpha", "1.0.0-alpha.1", -1},
		{"1.0.0-alpha.beta", "1.0.0-alpha.1", 1},
		{"1.0.0-beta", "1.0.0-alpha", 1},
		{"18446744073709551615.0", "1.0", 1},
	}
	for _, c := range cases {
		a, errA := ParseVersion(c.a)
		b, errB := ParseVersion(c.b)
		if errA != nil || errB != nil {
			t.Fatalf("%s, %s: %v %v", c.a, c.b, errA, errB)
		}
		if got := Compare(a, b); got != c.want {
			t.Errorf("Compare(%s, %s) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := Compare(b, a); got != -c.want {
			t.Errorf("Compare(%s, %s) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}

// Versions that cannot be ordered are errors, so they are never "newer".
func TestUnparsableVersions(t *testing.T) {
	for _, s := range []string{"", "dev", "e2e-test", "v", "vv1.0", "1..2", "1.2.3.4.5", "1.2a", "-1.0", "1.0-", "1.0-rc..1", "1.0-rc_1", "1.99999999999999999999"} {
		if v, err := ParseVersion(s); err == nil {
			t.Errorf("ParseVersion(%q) = %v, want an error", s, v)
		}
	}
}

func TestDigestField(t *testing.T) {
	hexSum := strings.Repeat("0a", 32)
	sum, ok, err := ParseDigestField("sha256:" + hexSum)
	if err != nil || !ok || sum[0] != 0x0a || len(sum) != 32 {
		t.Errorf("sha256 field: %x %v %v", sum, ok, err)
	}
	for _, f := range []string{"", "sha512:" + hexSum + hexSum, "md5:abc"} {
		if _, ok, err := ParseDigestField(f); ok || err != nil {
			t.Errorf("%q: ok %v err %v, want no SHA-256 and no error", f, ok, err)
		}
	}
	for _, f := range []string{"sha256:" + hexSum[:62], "sha256:" + strings.Repeat("zz", 32), "sha256:"} {
		if _, _, err := ParseDigestField(f); err == nil {
			t.Errorf("%q: no error", f)
		}
	}
}

func TestDigestFile(t *testing.T) {
	const name = "openflare-agent-linux-arm64"
	hexSum := strings.Repeat("ab", 32)
	other := strings.Repeat("cd", 32)
	good := []string{
		hexSum,
		hexSum + "\n",
		hexSum + "  " + name + "\n",
		hexSum + " *" + name,
		"SHA256(" + name + ")= " + hexSum + "\n",
		// A SHA256SUMS: the line naming this asset counts.
		other + "  openflare-agent-linux-amd64\n" + hexSum + "  " + name + "\n",
	}
	for _, f := range good {
		sum, err := ParseDigestFile([]byte(f), name)
		if err != nil || sum[0] != 0xab {
			t.Errorf("%q: %x %v", f, sum, err)
		}
	}
	bad := []string{
		"",
		"not hex",
		hexSum + "  openflare-agent-linux-amd64\n", // names another file
		"SHA256(other)= " + hexSum,
		hexSum + "\n" + other + "\n", // two bare sums: which one?
		hexSum[:60] + "  " + name,
		"SHA256(" + name + ") " + hexSum,
	}
	for _, f := range bad {
		if sum, err := ParseDigestFile([]byte(f), name); err == nil {
			t.Errorf("%q: accepted %x", f, sum)
		}
	}
}

func TestSignatureForms(t *testing.T) {
	raw := bytes.Repeat([]byte{7}, 64)
	if s, err := ParseSignature(raw); err != nil || !bytes.Equal(s, raw) {
		t.Errorf("raw: %v", err)
	}
	b64 := []byte("BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBw==\n")
	if s, err := ParseSignature(b64); err != nil || !bytes.Equal(s, raw) {
		t.Errorf("base64: %x %v", s, err)
	}
	for _, bad := range [][]byte{nil, raw[:63], []byte("AAAA"), []byte("!!" + string(b64))} {
		if _, err := ParseSignature(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestAssetNames(t *testing.T) {
	cases := []struct {
		goos, goarch, goarm string
		want                []string
	}{
		{"linux", "amd64", "", []string{"openflare-agent-linux-amd64"}},
		{"linux", "arm64", "", []string{"openflare-agent-linux-arm64"}},
		{"linux", "arm", "7", []string{"openflare-agent-linux-armv7", "openflare-agent-linux-arm"}},
		{"linux", "arm", "6,softfloat", []string{"openflare-agent-linux-armv6", "openflare-agent-linux-arm"}},
		{"linux", "arm", "", []string{"openflare-agent-linux-arm"}},
		{"linux", "mipsle", "", []string{"openflare-agent-linux-mipsle"}},
		{"windows", "amd64", "", []string{"openflare-agent-windows-amd64.exe"}},
	}
	for _, c := range cases {
		got := AssetNames(c.goos, c.goarch, c.goarm)
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s/%s GOARM=%q: %v, want %v", c.goos, c.goarch, c.goarm, got, c.want)
		}
	}
}

// Only auto_update or update_now start a check, and only with an
// update_repo; the preview channel needs update_now.
func TestTriggerFor(t *testing.T) {
	base := protocol.AgentSettings{UpdateRepo: "openflare/openflare-agent", UpdateChannel: "preview", UpdateTag: "v9"}
	if _, ok := TriggerFor(base); ok {
		t.Error("neither auto_update nor update_now: triggered")
	}
	s := base
	s.AutoUpdate, s.UpdateRepo = true, " "
	if _, ok := TriggerFor(s); ok {
		t.Error("empty update_repo: triggered")
	}
	s = base
	s.AutoUpdate = true
	if tr, ok := TriggerFor(s); !ok || tr.Force || tr.Channel != "stable" || tr.Tag != "v9" {
		t.Errorf("auto_update: %+v %v", tr, ok)
	}
	s = base
	s.UpdateNow = true
	if tr, ok := TriggerFor(s); !ok || !tr.Force || tr.Channel != "preview" {
		t.Errorf("update_now: %+v %v", tr, ok)
	}
	s.RestartOpenRestyNow, s.UpdateNow, s.HeartbeatInterval = true, false, 1
	if _, ok := TriggerFor(s); ok {
		t.Error("other fields triggered a check")
	}
}

// auto_update looks a release up at most once an hour, also across a
// restart; update_now at once; neither while a new version is unconfirmed.
func TestRateLimit(t *testing.T) {
	dir := t.TempDir()
	u := New(Options{Exe: dir + "/agent", StatePath: dir + "/update.json", Version: "1.0.0"})
	now := time.Now()
	auto, now1 := Trigger{Channel: "stable"}, Trigger{Force: true}
	if !u.Due(auto, now) {
		t.Fatal("first auto check not due")
	}
	u.mu.Lock()
	u.st.LastAutoCheckUnix = now.Unix()
	saveState(u.o.StatePath, u.st)
	u.mu.Unlock()
	if u.Due(auto, now.Add(59*time.Minute)) {
		t.Error("auto check due again within the hour")
	}
	if !u.Due(now1, now.Add(time.Second)) {
		t.Error("update_now not due at once")
	}
	if !u.Due(auto, now.Add(time.Hour)) {
		t.Error("auto check not due after an hour")
	}
	restarted := New(Options{Exe: dir + "/agent", StatePath: dir + "/update.json", Version: "1.0.0"})
	if restarted.Due(auto, now.Add(time.Minute)) {
		t.Error("a restart reset the hourly limit")
	}
	restarted.st.Pending = &Pending{Version: "1.1.0", Previous: "1.0.0"}
	if restarted.Due(now1, now.Add(2*time.Hour)) {
		t.Error("a check is due while a new version is unconfirmed")
	}
}
