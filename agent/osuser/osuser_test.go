package osuser

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeDB(t *testing.T, passwd, group string) DB {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"passwd": passwd, "group": group} {
		if err := os.WriteFile(filepath.Join(root, "etc", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return DB{Root: root}
}

const debianPasswd = "root:x:0:0:root:/root:/bin/bash\nwww-data:x:33:33:www-data:/var/www:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nmallory:x:0:0::/:/bin/sh\n"
const debianGroup = "root:x:0:\nwww-data:x:33:\nssl-cert:x:111:www-data,postgres\nnogroup:x:65534:\n"

// OpenWrt: nobody only, group nogroup.
const openwrtPasswd = "root:x:0:0:root:/root:/bin/ash\nnobody:*:65534:65534:nobody:/var:/bin/false\n"
const openwrtGroup = "root:x:0:\nnogroup:x:65534:\n"

func TestResolve(t *testing.T) {
	debian := writeDB(t, debianPasswd, debianGroup)
	openwrt := writeDB(t, openwrtPasswd, openwrtGroup)
	root := Host{EUID: 0}
	cases := []struct {
		name                 string
		db                   DB
		host                 Host
		configured, template string
		want                 string // Directive
		wantUID              int
	}{
		{"template user missing: www-data", debian, root, "", "openflare", "user www-data www-data;", 33},
		{"no template user: www-data", debian, root, "", "", "user www-data www-data;", 33},
		{"template user exists", debian, root, "", "nobody", "user nobody nogroup;", 65534},
		{"template user with group", debian, root, "", "www-data nogroup", "user www-data nogroup;", 33},
		{"template names root: not taken", debian, root, "", "root", "user www-data www-data;", 33},
		{"template names a uid-0 alias: not taken", debian, root, "", "mallory", "user www-data www-data;", 33},
		{"template group missing: fallback", debian, root, "", "nobody nobody", "user www-data www-data;", 33},
		{"openwrt fallback is nobody:nogroup", openwrt, root, "", "openflare", "user nobody nogroup;", 65534},
		{"configured wins over template", debian, root, "nobody", "www-data", "user nobody nogroup;", 65534},
		{"configured user:group", debian, root, "www-data:ssl-cert", "", "user www-data ssl-cert;", 33},
		{"configured root is the owner's call", debian, root, "root", "", "user root root;", 0},
		{"single-uid namespace", debian, Host{EUID: 0, SingleUID: true}, "", "openflare", "user root root;", 0},
		{"not root: dropped", debian, Host{EUID: 33, EGID: 33}, "nobody", "openflare", "", 33},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := tc.db.Resolve(tc.host, tc.configured, tc.template)
			if err != nil {
				t.Fatal(err)
			}
			if id.Directive != tc.want || id.UID != tc.wantUID || id.Why == "" {
				t.Fatalf("got %+v, want %q uid %d", id, tc.want, tc.wantUID)
			}
		})
	}
	id, _ := debian.Resolve(root, "", "")
	if len(id.Groups) != 1 || id.Groups[0] != 111 {
		t.Errorf("www-data's supplementary groups = %v, want [111]", id.Groups)
	}
}

// The workers' own user comes before the shared ones, and the reason given
// says which was taken and why; the owner's and the template's choices
// still win.
func TestResolvePrefersWorkerUser(t *testing.T) {
	const own = "openflare-www:x:998:998:openflare nginx workers:/nonexistent:/usr/sbin/nologin\n"
	dedicated := writeDB(t, debianPasswd+own, debianGroup+"openflare-www:x:998:\n")
	noGroup := writeDB(t, debianPasswd+own, debianGroup)
	root := Host{EUID: 0}
	cases := []struct {
		name                 string
		db                   DB
		configured, template string
		want                 string // Directive
		wantUID              int
		why                  string // in Why
	}{
		{"no template user", dedicated, "", "", "user openflare-www openflare-www;", 998, "openflare-www is the workers' own user"},
		{"template user missing", dedicated, "", "openflare", "user openflare-www openflare-www;", 998, `the template's user "openflare" does not exist`},
		{"template names root", dedicated, "", "root", "user openflare-www openflare-www;", 998, "openflare-www is the workers' own user"},
		{"template user exists", dedicated, "", "www-data", "user www-data www-data;", 33, "the template's user directive"},
		{"configured", dedicated, "www-data", "", "user www-data www-data;", 33, "agent.json nginx_user"},
		{"its group missing: www-data", noGroup, "", "", "user www-data www-data;", 33, "no usable openflare-www (install.sh creates it), so www-data"},
		{"absent: www-data", writeDB(t, debianPasswd, debianGroup), "", "", "user www-data www-data;", 33, "no usable openflare-www (install.sh creates it), so www-data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := tc.db.Resolve(root, tc.configured, tc.template)
			if err != nil {
				t.Fatal(err)
			}
			if id.Directive != tc.want || id.UID != tc.wantUID || !strings.Contains(id.Why, tc.why) {
				t.Fatalf("got %+v, want %q uid %d, why with %q", id, tc.want, tc.wantUID, tc.why)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	debian := writeDB(t, debianPasswd, debianGroup)
	for _, configured := range []string{"ghost", "www-data:ghosts"} {
		_, err := debian.Resolve(Host{}, configured, "")
		if !errors.Is(err, ErrUnknownUser) || !strings.Contains(err.Error(), "ghost") || !strings.Contains(err.Error(), "nginx_user") {
			t.Errorf("%q: err = %v", configured, err)
		}
	}
	bare := writeDB(t, "root:x:0:0::/:/bin/sh\n", "root:x:0:\n")
	if _, err := bare.Resolve(Host{}, "", "openflare"); !errors.Is(err, ErrUnknownUser) {
		t.Errorf("no fallback user: err = %v", err)
	}
}

func TestCan(t *testing.T) {
	w := Identity{UID: 33, GID: 33, Groups: []int{111}}
	cases := []struct {
		mode     fs.FileMode
		uid, gid int
		a        Access
		want     bool
	}{
		{0o700, 0, 0, Traverse, false},
		{0o711, 0, 0, Traverse, true},
		{0o750, 0, 0, Traverse, false},
		{0o750, 0, 111, Traverse, true}, // supplementary group
		{0o750, 0, 33, Read, true},
		{0o640, 0, 0, Read, false},
		{0o644, 0, 0, Read, true},
		{0o700, 33, 33, Write | Traverse, true},
		{0o077, 33, 0, Read, false}, // owner bits rule for the owner
	}
	for _, tc := range cases {
		if got := w.Can(tc.mode, tc.uid, tc.gid, tc.a); got != tc.want {
			t.Errorf("%v %d:%d %v: got %v", tc.mode, tc.uid, tc.gid, tc.a, got)
		}
	}
	if !(Identity{}).Can(0, 5, 5, Read|Write) {
		t.Error("uid 0 is refused")
	}
}

func TestUnreachable(t *testing.T) {
	w := Identity{UID: 65534, GID: 65534}
	dir := t.TempDir()
	deep := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	for p := dir; p != filepath.Clean(os.TempDir()) && p != filepath.Dir(p); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := w.Unreachable(deep)
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		// Not root: the files are ours, not 65534's, so the rule is the
		// same; the parents of TempDir may already stop a stranger.
		if got == "" {
			t.Fatalf("%s reported reachable", deep)
		}
		return
	}
	if got != filepath.Join(dir, "a") {
		t.Fatalf("blocked at %q, want %s", got, filepath.Join(dir, "a"))
	}
}

func TestSingleUIDMap(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		m    string
		want bool
	}{
		{"         0       1000          1\n", true},
		{"         0          0 4294967295\n", false},
		{"0 100000 65536\n", false},
	} {
		p := filepath.Join(dir, "uid_map")
		if err := os.WriteFile(p, []byte(tc.m), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := singleUIDMap(p); got != tc.want {
			t.Errorf("%q → %v", tc.m, got)
		}
	}
}

func TestGroupID(t *testing.T) {
	db := writeDB(t, debianPasswd, debianGroup+"adm:x:4:syslog\n")
	if gid, ok := db.GroupID("adm"); !ok || gid != 4 {
		t.Errorf("adm: %d %v", gid, ok)
	}
	if _, ok := writeDB(t, openwrtPasswd, openwrtGroup).GroupID("adm"); ok {
		t.Error("adm found on OpenWrt")
	}
}
