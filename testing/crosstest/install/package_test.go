package install

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"openflare/testing/crosstest"
	"openflare/testing/testsupport"
)

// The packages cross/deb.sh and cross/ipk.sh build, checked file by file
// against what dpkg and opkg read: the members, every path with its mode
// and owner, the control fields, the scripts; the OpenWrt scripts and the
// procd script under BusyBox. The Debian package on a real systemd is
// testing/systemdtest's.

// packageEpoch stamps the packages the tests build, so that two builds
// can be compared byte for byte.
const packageEpoch = "1700000000"

// buildPackage runs cross/deb.sh or cross/ipk.sh on bin and returns the
// package's path.
func buildPackage(t *testing.T, script, bin, arch, version string) string {
	t.Helper()
	cmd := exec.Command("sh", filepath.Join(testsupport.ModuleRoot(t), "cross", script), bin, arch, version, t.TempDir())
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+packageEpoch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cross/%s: %v\n%s", script, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// entry is one tar member: its mode (type included), owner and content
// (or link target).
type entry struct {
	mode     fs.FileMode
	uid, gid int
	content  string
}

func (e entry) String() string {
	return fmt.Sprintf("%v %d:%d", e.mode, e.uid, e.gid)
}

// readTar lists a tar stream's members in order.
func readTar(t *testing.T, r io.Reader) ([]string, map[string]entry) {
	t.Helper()
	var names []string
	m := map[string]entry{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, m
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		e := entry{mode: h.FileInfo().Mode(), uid: h.Uid, gid: h.Gid, content: string(b)}
		if h.Typeflag == tar.TypeSymlink {
			e.content = h.Linkname
		}
		names = append(names, h.Name)
		m[h.Name] = e
	}
}

func readTarGz(t *testing.T, b []byte) ([]string, map[string]entry) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return readTar(t, zr)
}

// controlFields parses a control file; continuation lines join their
// field with newlines.
func controlFields(t *testing.T, text string) map[string]string {
	t.Helper()
	f := map[string]string{}
	last := ""
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if strings.HasPrefix(line, " ") && last != "" {
			f[last] += "\n" + line
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			t.Fatalf("control line %q is neither a field nor a continuation", line)
		}
		if _, dup := f[k]; dup {
			t.Fatalf("control field %s twice", k)
		}
		f[k], last = strings.TrimSpace(v), k
	}
	return f
}

// fakeAgent is a stand-in binary: the layout tests need no real one.
func fakeAgent(t *testing.T) (string, []byte) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "openflare-agent-linux-test")
	content := []byte("#!/bin/sh\necho fake openflare-agent\n")
	if err := os.WriteFile(p, content, 0o755); err != nil {
		t.Fatal(err)
	}
	return p, content
}

func readRepo(t *testing.T, rel string) string {
	t.Helper()
	return testsupport.ReadFile(t, filepath.Join(testsupport.ModuleRoot(t), rel))
}

// Package versions from git describe: what dpkg and opkg accept, ordered
// as the releases are.
func TestPackageVersion(t *testing.T) {
	t.Parallel()
	script := filepath.Join(testsupport.ModuleRoot(t), "cross", "version.sh")
	cases := []struct{ describe, want string }{
		{"v1.2.3", "1.2.3"},
		{"v1.2.3-4-gabc1234", "1.2.3+4.gabc1234"},
		{"v1.2.3-rc.1", "1.2.3~rc.1"},
		{"v1.2.3-rc.1-4-gabc1234", "1.2.3~rc.1+4.gabc1234"},
		{"v1.2.3-dirty", "1.2.3+dirty"},
		{"v1.2.3-4-gabc1234-dirty", "1.2.3+4.gabc1234.dirty"},
		{"1.4.0_beta", "1.4.0.beta"},
		{"v2", "2"},
		{"c923eb9", "0.0.0+git.c923eb9"},
		{"c923eb9-dirty", "0.0.0+git.c923eb9.dirty"},
	}
	for _, c := range cases {
		out, err := exec.Command("sh", script, c.describe).CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != c.want {
			t.Errorf("version.sh %s: %q (%v), want %q", c.describe, got, err, c.want)
		}
	}
	if out, err := exec.Command("sh", script, "nightly").CombinedOutput(); err == nil {
		t.Errorf("version.sh nightly: %q, want a refusal", out)
	}
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Skip("dpkg not installed: the order is not checked")
	}
	// Each is older than the next, as dpkg compares them.
	order := []string{"0.0.0+git.c923eb9", "1.2.3~rc.1", "1.2.3~rc.1+4.gabc1234", "1.2.3", "1.2.3+4.gabc1234", "1.2.3+4.gabc1234.dirty", "1.2.4"}
	for i := 1; i < len(order); i++ {
		if err := exec.Command(dpkg, "--compare-versions", order[i-1], "lt", order[i]).Run(); err != nil {
			t.Errorf("dpkg does not order %s before %s", order[i-1], order[i])
		}
	}
	for _, v := range order {
		if out, err := exec.Command(dpkg, "--validate-version", v).CombinedOutput(); err != nil {
			t.Errorf("dpkg refuses %s: %s", v, out)
		}
	}
}

// cross/packages gives every target of cross/targets its packages: a .deb
// for the Debian ports, .ipk files for the OpenWrt targets.
func TestPackagesCoverTargets(t *testing.T) {
	t.Parallel()
	want := map[string]string{"amd64": "amd64", "arm64": "arm64", "armv7": "armhf", "armv6": "armel", "riscv64": "riscv64"}
	openwrt := map[string]bool{"amd64": true, "arm64": true, "armv7": true, "mips": true, "mipsle": true}
	s := bufio.NewScanner(strings.NewReader(readRepo(t, "cross/packages")))
	var names []string
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 3 {
			t.Fatalf("cross/packages line %q: want TARGET DEBIAN OPENWRT", s.Text())
		}
		names = append(names, f[0])
		if deb := want[f[0]]; f[1] != cmpOr(deb, "-") {
			t.Errorf("%s: Debian architecture %s, want %s", f[0], f[1], cmpOr(deb, "-"))
		}
		if openwrt[f[0]] == (f[2] == "-") {
			t.Errorf("%s: OpenWrt architectures %q", f[0], f[2])
		}
	}
	var tnames []string
	for _, tg := range crosstest.Targets {
		tnames = append(tnames, tg.Name)
	}
	if !slices.Equal(names, tnames) {
		t.Errorf("cross/packages lists %v, cross/targets %v", names, tnames)
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// The .deb: dpkg-deb's members and fields, every file with its mode and
// owner, the unit naming the binary where the package puts it, the
// maintainer scripts as committed, and the same bytes from the same
// inputs.
func TestDebLayout(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb not installed: the .deb is not built")
	}
	bin, content := fakeAgent(t)
	deb := buildPackage(t, "deb.sh", bin, "arm64", "1.2.3+4.gabc1234")
	if filepath.Base(deb) != "openflare-agent_1.2.3+4.gabc1234_arm64.deb" {
		t.Errorf("package file %s", filepath.Base(deb))
	}
	if again := buildPackage(t, "deb.sh", bin, "arm64", "1.2.3+4.gabc1234"); !bytes.Equal(fileBytes(t, deb), fileBytes(t, again)) {
		t.Error("two builds of the same inputs differ")
	}
	if ar, err := exec.LookPath("ar"); err == nil {
		out, err := exec.Command(ar, "t", deb).Output()
		if err != nil || string(out) != "debian-binary\ncontrol.tar.xz\ndata.tar.xz\n" {
			t.Errorf("ar members %q (%v)", out, err)
		}
	}

	fields := controlFields(t, run(t, "dpkg-deb", "-f", deb))
	for k, v := range map[string]string{"Package": "openflare-agent", "Version": "1.2.3+4.gabc1234", "Architecture": "arm64", "Section": "httpd", "Priority": "optional"} {
		if fields[k] != v {
			t.Errorf("%s: %q, want %q", k, fields[k], v)
		}
	}
	deps := strings.Split(fields["Depends"], ", ")
	for _, d := range []string{"nginx (>= 1.18) | openresty", "libnginx-mod-http-lua | openresty", "lua-resty-core | openresty", "lua-cjson | openresty"} {
		if !slices.Contains(deps, d) {
			t.Errorf("Depends %q lacks %q", fields["Depends"], d)
		}
	}
	for _, k := range []string{"Maintainer", "Installed-Size", "Description", "Homepage"} {
		if fields[k] == "" {
			t.Errorf("no %s field", k)
		}
	}
	if desc := fields["Description"]; !strings.Contains(desc, "Removing the package stops the agent and the nginx it manages") {
		t.Errorf("the description does not say what remove does:\n%s", desc)
	}

	_, ctrl := readTar(t, bytes.NewReader(runBytes(t, "dpkg-deb", "--ctrl-tarfile", deb)))
	wantCtrl := map[string]fs.FileMode{"./": fs.ModeDir | 0o755, "./control": 0o644, "./md5sums": 0o644, "./postinst": 0o755, "./prerm": 0o755, "./postrm": 0o755}
	if got := modes(ctrl); !reflect.DeepEqual(got, wantCtrl) {
		t.Errorf("control members %v, want %v (agent.json is the scripts', not a dpkg conffile)", got, wantCtrl)
	}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		if ctrl["./"+s].content != readRepo(t, "cross/debian/"+s) {
			t.Errorf("%s differs from cross/debian/%s", s, s)
		}
	}

	names, data := readTar(t, bytes.NewReader(runBytes(t, "dpkg-deb", "--fsys-tarfile", deb)))
	dir := fs.ModeDir | 0o755
	wantData := map[string]fs.FileMode{
		"./": dir, "./lib/": dir, "./lib/systemd/": dir, "./lib/systemd/system/": dir,
		"./lib/systemd/system/openflare-agent.service": 0o644,
		"./usr/": dir, "./usr/libexec/": dir, "./usr/libexec/openflare-agent/": dir,
		"./usr/libexec/openflare-agent/openflare-agent": 0o755,
		"./usr/sbin/": dir, "./usr/sbin/openflare-agent": fs.ModeSymlink | 0o777,
		"./usr/share/": dir, "./usr/share/doc/": dir, "./usr/share/doc/openflare-agent/": dir,
		"./usr/share/doc/openflare-agent/copyright": 0o644, "./usr/share/doc/openflare-agent/changelog.gz": 0o644,
		"./usr/share/lintian/": dir, "./usr/share/lintian/overrides/": dir, "./usr/share/lintian/overrides/openflare-agent": 0o644,
		"./usr/share/man/": dir, "./usr/share/man/man8/": dir, "./usr/share/man/man8/openflare-agent.8.gz": 0o644,
	}
	if got := modes(data); !reflect.DeepEqual(got, wantData) {
		t.Errorf("data members:\n%v\nwant\n%v", got, wantData)
	}
	for _, n := range names {
		if e := data[n]; e.uid != 0 || e.gid != 0 {
			t.Errorf("%s is owned by %d:%d, want root", n, e.uid, e.gid)
		}
	}
	if data["./usr/libexec/openflare-agent/openflare-agent"].content != string(content) {
		t.Error("the packaged binary is not the one given")
	}
	if l := data["./usr/sbin/openflare-agent"].content; l != "../libexec/openflare-agent/openflare-agent" {
		t.Errorf("/usr/sbin/openflare-agent -> %s", l)
	}
	unit := data["./lib/systemd/system/openflare-agent.service"].content
	// The one unit install.sh also installs, its directives naming the
	// package's binary directory instead of install.sh's.
	var want []string
	for _, line := range strings.Split(readRepo(t, "cross/systemd/openflare-agent.service"), "\n") {
		if !strings.HasPrefix(line, "#") {
			line = strings.ReplaceAll(line, "/usr/local/lib/openflare-agent", "/usr/libexec/openflare-agent")
		}
		want = append(want, line)
	}
	if unit != strings.Join(want, "\n") {
		t.Errorf("the packaged unit is not cross/systemd/openflare-agent.service with the package's paths:\n%s", testsupport.DiffExcerpt(strings.Join(want, "\n"), unit))
	}
	for _, line := range []string{
		"ExecStart=/usr/libexec/openflare-agent/openflare-agent -config /etc/openflare/agent.json",
		"ReadWritePaths=/var/lib/openflare /etc/openflare /usr/libexec/openflare-agent",
	} {
		if !strings.Contains(unit, "\n"+line+"\n") {
			t.Errorf("the packaged unit lacks %q", line)
		}
	}
	for _, line := range strings.Split(unit, "\n") {
		if !strings.HasPrefix(line, "#") && strings.Contains(line, "/usr/local") {
			t.Errorf("the packaged unit has %q", line)
		}
	}
	var md5 []string
	for _, line := range strings.Split(strings.TrimSpace(ctrl["./md5sums"].content), "\n") {
		md5 = append(md5, strings.Fields(line)[1])
	}
	var files []string
	for _, n := range names {
		if data[n].mode.IsRegular() {
			files = append(files, strings.TrimPrefix(n, "./"))
		}
	}
	slices.Sort(files)
	if !slices.Equal(md5, files) {
		t.Errorf("md5sums lists %v, the package has %v", md5, files)
	}

	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		// verify wants ExecStart to exist: the fake binary stands in.
		p := filepath.Join(t.TempDir(), "openflare-agent.service")
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(unit, "/usr/libexec/openflare-agent/openflare-agent", bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(sa, "verify", p).CombinedOutput(); err != nil || strings.Contains(string(out), "openflare-agent.service") {
			t.Errorf("systemd-analyze verify of the packaged unit: %v\n%s", err, out)
		}
	}
}

// The .deb of a real binary is clean under lintian: no tag at any level
// but the two the package overrides, each with its reason in
// cross/debian/lintian-overrides.
func TestDebLintian(t *testing.T) {
	t.Parallel()
	lintian, err := exec.LookPath("lintian")
	if err != nil {
		t.Skip("lintian not installed (make deps installs it): the .deb is not checked")
	}
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb not installed: the .deb is not built")
	}
	arch := map[string]string{"amd64": "amd64", "arm64": "arm64", "riscv64": "riscv64"}[runtime.GOARCH]
	if arch == "" {
		t.Skipf("no Debian package for %s built here", runtime.GOARCH)
	}
	bin := filepath.Join(t.TempDir(), "openflare-agent")
	build := exec.Command("go", "build", "-trimpath", "-tags", "nethttpomithttp2", "-ldflags", "-s -w", "-o", bin, ".")
	build.Dir = testsupport.ModuleRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	deb := buildPackage(t, "deb.sh", bin, arch, "1.0.0")
	out, err := exec.Command(lintian, "--fail-on", "error,warning,info,pedantic,experimental",
		"--display-info", "--pedantic", "--display-experimental", "--show-overrides", deb).CombinedOutput()
	var tags, overridden []string
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "O: "):
			overridden = append(overridden, strings.TrimPrefix(line, "O: openflare-agent: "))
		case strings.HasPrefix(line, "I: openflare-agent: unused-override spelling-error-in-binary "):
			// Whether compressed bytes spell a word lintian knows varies
			// with every build (below): unused, that override is no fault.
		case len(line) > 2 && line[1] == ':' && line[0] != 'N':
			tags = append(tags, line)
		}
	}
	// Shown overrides alone make lintian exit 2 under --fail-on; a tag
	// line is what counts.
	var exit *exec.ExitError
	if (err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 2)) || len(tags) > 0 {
		t.Errorf("lintian: %v\n%s", err, out)
	}
	// Whether compressed bytes spell a word lintian knows varies with
	// every build: that override may or may not show.
	overridden = slices.DeleteFunc(overridden, func(o string) bool { return strings.HasPrefix(o, "spelling-error-in-binary ") })
	slices.Sort(overridden)
	want := []string{
		"package-supports-alternative-init-but-no-init.d-script [lib/systemd/system/openflare-agent.service]",
		"statically-linked-binary [usr/libexec/openflare-agent/openflare-agent]",
	}
	if !slices.Equal(overridden, want) {
		t.Errorf("overridden tags %q, want %q", overridden, want)
	}
}

// The .ipk as opkg reads it and OpenWrt's ipkg-build writes it: a gzipped
// tar of debian-binary, data.tar.gz and control.tar.gz; control fields; a
// conffile that is in the data; every file root's with its mode; and the
// same bytes from the same inputs.
func TestIpkLayout(t *testing.T) {
	t.Parallel()
	bin, content := fakeAgent(t)
	ipk := buildPackage(t, "ipk.sh", bin, "mipsel_24kc", "1.2.3")
	if filepath.Base(ipk) != "openflare-agent_1.2.3_mipsel_24kc.ipk" {
		t.Errorf("package file %s", filepath.Base(ipk))
	}
	if again := buildPackage(t, "ipk.sh", bin, "mipsel_24kc", "1.2.3"); !bytes.Equal(fileBytes(t, ipk), fileBytes(t, again)) {
		t.Error("two builds of the same inputs differ")
	}
	names, outer := readTarGz(t, fileBytes(t, ipk))
	if !slices.Equal(names, []string{"./debian-binary", "./data.tar.gz", "./control.tar.gz"}) {
		t.Fatalf("members %v", names)
	}
	for _, n := range names {
		if e := outer[n]; e.mode != 0o644 || e.uid != 0 || e.gid != 0 {
			t.Errorf("%s: %v", n, e)
		}
	}
	if outer["./debian-binary"].content != "2.0\n" {
		t.Errorf("debian-binary %q", outer["./debian-binary"].content)
	}

	_, ctrl := readTarGz(t, []byte(outer["./control.tar.gz"].content))
	wantCtrl := map[string]fs.FileMode{"./": fs.ModeDir | 0o755, "./control": 0o644, "./conffiles": 0o644, "./postinst": 0o755, "./prerm": 0o755, "./postrm": 0o755}
	if got := modes(ctrl); !reflect.DeepEqual(got, wantCtrl) {
		t.Errorf("control members %v, want %v", got, wantCtrl)
	}
	for _, s := range []string{"postinst", "prerm", "postrm", "conffiles"} {
		if ctrl["./"+s].content != readRepo(t, "cross/openwrt/"+s) {
			t.Errorf("%s differs from cross/openwrt/%s", s, s)
		}
	}

	dataNames, data := readTarGz(t, []byte(outer["./data.tar.gz"].content))
	dir := fs.ModeDir | 0o755
	wantData := map[string]fs.FileMode{
		"./": dir, "./usr/": dir, "./usr/bin/": dir, "./usr/bin/openflare-agent": 0o755,
		"./etc/": dir, "./etc/init.d/": dir, "./etc/init.d/openflare-agent": 0o755,
		"./etc/openflare/": fs.ModeDir | 0o751, "./etc/openflare/agent.json": 0o600,
		"./lib/": dir, "./lib/upgrade/": dir, "./lib/upgrade/keep.d/": dir, "./lib/upgrade/keep.d/openflare-agent": 0o644,
	}
	if got := modes(data); !reflect.DeepEqual(got, wantData) {
		t.Errorf("data members:\n%v\nwant\n%v", got, wantData)
	}
	size := 0
	for _, n := range dataNames {
		e := data[n]
		if e.uid != 0 || e.gid != 0 {
			t.Errorf("%s is owned by %d:%d, want root", n, e.uid, e.gid)
		}
		if e.mode.IsRegular() {
			size += len(e.content)
		}
	}
	if data["./usr/bin/openflare-agent"].content != string(content) {
		t.Error("the packaged binary is not the one given")
	}
	if data["./etc/init.d/openflare-agent"].content != readRepo(t, "cross/openwrt/openflare-agent.init") {
		t.Error("the init script is not cross/openwrt/openflare-agent.init, which install.sh installs")
	}
	if data["./lib/upgrade/keep.d/openflare-agent"].content != "/etc/openflare/\n" {
		t.Errorf("keep.d: %q", data["./lib/upgrade/keep.d/openflare-agent"].content)
	}
	var conf map[string]any
	if err := json.Unmarshal([]byte(data["./etc/openflare/agent.json"].content), &conf); err != nil {
		t.Fatalf("agent.json: %v", err)
	}
	wantConf := map[string]any{"data_dir": "/etc/openflare/data", "access_log_path": "/var/log/openflare/access.log",
		"openresty_path": "/usr/sbin/nginx", "nginx_user": "openflare-www:openflare-www"}
	if !reflect.DeepEqual(conf, wantConf) {
		t.Errorf("agent.json %v, want %v", conf, wantConf)
	}
	for _, cf := range strings.Fields(ctrl["./conffiles"].content) {
		if !data["."+cf].mode.IsRegular() {
			t.Errorf("conffile %s is not a file of the package", cf)
		}
	}

	fields := controlFields(t, ctrl["./control"].content)
	for k, v := range map[string]string{"Package": "openflare-agent", "Version": "1.2.3", "Architecture": "mipsel_24kc",
		"Depends": "nginx-ssl | nginx-full, nginx-mod-lua, lua-cjson", "Installed-Size": strconv.Itoa(size), "Section": "net"} {
		if fields[k] != v {
			t.Errorf("%s: %q, want %q", k, fields[k], v)
		}
	}
	for _, k := range []string{"Maintainer", "Description", "Source", "URL"} {
		if fields[k] == "" {
			t.Errorf("no %s field", k)
		}
	}
}

// busybox is the BusyBox binary, or a skip.
func busybox(t *testing.T) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox not installed (Debian package busybox): the OpenWrt scripts are not run")
	}
	return bb
}

// The procd script under BusyBox ash with a stand-in for procd's shell
// functions that records each call and its arguments: start_service
// describes one instance, the agent with the installed agent.json,
// respawning, its nofile limit, reloaded when agent.json changes, output
// to logd; START and STOP place it in the boot order.
func TestProcdInitScript(t *testing.T) {
	t.Parallel()
	bb := busybox(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "procd.log")
	shim := `# procd_* as procd.sh defines them, recording instead of calling ubus.
for f in procd_open_instance procd_close_instance procd_set_param procd_append_param \
	procd_open_trigger procd_close_trigger procd_add_reload_trigger procd_add_validation \
	procd_open_data procd_close_data procd_add_jail procd_add_jail_mount procd_running; do
	eval "$f() { printf '%s' $f >>\"\$PROCD_LOG\"; for a in \"\$@\"; do printf ' [%s]' \"\$a\" >>\"\$PROCD_LOG\"; done; echo >>\"\$PROCD_LOG\"; }"
done
. "$1"
echo "USE_PROCD=$USE_PROCD START=$START STOP=$STOP" >>"$PROCD_LOG"
start_service
if command -v service_triggers >/dev/null; then service_triggers; fi
`
	if err := os.WriteFile(filepath.Join(dir, "rc.common"), []byte(shim), 0o644); err != nil {
		t.Fatal(err)
	}
	init := filepath.Join(testsupport.ModuleRoot(t), "cross", "openwrt", "openflare-agent.init")
	cmd := exec.Command(bb, "ash", filepath.Join(dir, "rc.common"), init)
	cmd.Env = []string{"PROCD_LOG=" + log, "PATH=/nonexistent"}
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("the init script under busybox ash: %v\n%s", err, out)
	}
	want := strings.Join([]string{
		"USE_PROCD=1 START=95 STOP=10",
		"procd_open_instance",
		"procd_set_param [command] [/usr/bin/openflare-agent] [-config] [/etc/openflare/agent.json]",
		"procd_set_param [respawn] [3600] [2] [5]",
		"procd_set_param [limits] [nofile=65535 65535]",
		"procd_set_param [file] [/etc/openflare/agent.json]",
		"procd_set_param [stdout] [1]",
		"procd_set_param [stderr] [1]",
		"procd_close_instance",
	}, "\n") + "\n"
	if got := testsupport.ReadFile(t, log); got != want {
		t.Errorf("procd calls:\n%s", testsupport.DiffExcerpt(want, got))
	}
}

// The scripts are POSIX sh as dash and BusyBox ash parse it.
func TestPackageScriptsParse(t *testing.T) {
	t.Parallel()
	bb := busybox(t)
	for _, f := range []string{"cross/debian/postinst", "cross/debian/prerm", "cross/debian/postrm",
		"cross/debian/preinst-arm", "cross/openwrt/postinst", "cross/openwrt/prerm", "cross/openwrt/postrm", "cross/openwrt/openflare-agent.init",
		"cross/deb.sh", "cross/ipk.sh", "cross/package.sh", "cross/version.sh"} {
		p := filepath.Join(testsupport.ModuleRoot(t), f)
		if !strings.HasPrefix(testsupport.ReadFile(t, p), "#!/bin/sh") {
			t.Errorf("%s: not a #!/bin/sh script", f)
		}
		for _, sh := range [][]string{{"sh", "-n", p}, {bb, "ash", "-n", p}} {
			if out, err := exec.Command(sh[0], sh[1:]...).CombinedOutput(); err != nil {
				t.Errorf("%s: %v\n%s", strings.Join(sh, " "), err, out)
			}
		}
	}
}

// The OpenWrt scripts in an image being built (IPKG_INSTROOT), under
// BusyBox alone: postinst creates the workers' user in the image's account
// files, closes agent.json, makes the data directory and enables the
// service through the image's rc.common; a second run changes nothing;
// prerm disables the service; postrm removes self-update's files.
func TestIpkScriptsInImage(t *testing.T) {
	t.Parallel()
	bb := busybox(t)
	tools := t.TempDir()
	for _, tool := range []string{"sh", "awk", "cat", "chmod", "grep", "mkdir", "printf", "rm", "sed", "tail", "tr", "sleep"} {
		if err := os.Symlink(bb, filepath.Join(tools, tool)); err != nil {
			t.Fatal(err)
		}
	}
	bin, _ := fakeAgent(t)
	ipk := buildPackage(t, "ipk.sh", bin, "x86_64", "1.2.3")
	_, outer := readTarGz(t, fileBytes(t, ipk))
	_, ctrl := readTarGz(t, []byte(outer["./control.tar.gz"].content))

	root := openWrtRoot(t)
	// What opkg unpacks before postinst runs.
	_, data := readTarGz(t, []byte(outer["./data.tar.gz"].content))
	for name, e := range data {
		p := filepath.Join(root, name)
		switch {
		case e.mode.IsDir():
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			os.Chmod(p, e.mode.Perm())
		default:
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(e.content), e.mode.Perm()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The files were written with the umask: put agent.json's mode
	// wrong on purpose, postinst must close it.
	os.Chmod(filepath.Join(root, "etc/openflare/agent.json"), 0o644)
	writeFiles(t, root, map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/ash\ndaemon:*:1:1:daemon:/var:/bin/false\nnetwork:*:101:101:network:/var:/bin/false\n" +
			"nobody:*:65534:65534:nobody:/var:/bin/false\ndnsmasq:x:453:453:dnsmasq:/var/run/dnsmasq:/bin/false\n",
		"etc/group":  "root:x:0:\ndaemon:x:1:\nnetwork:x:101:\nnogroup:x:65534:\ndnsmasq:x:453:dnsmasq\n",
		"etc/shadow": "root:::0:99999:7:::\ndaemon:*:0:0:99999:7:::\nnetwork:*:0:0:99999:7:::\nnobody:*:0:0:99999:7:::\ndnsmasq:x:0:0:99999:7:::\n",
		// rc.common as the image's: records what it was asked.
		"etc/rc.common": "echo \"$*\" >>\"${0%/etc/rc.common}/rc.log\"\n",
	}, map[string]fs.FileMode{"etc/shadow": 0o600})

	script := func(name string, env ...string) string {
		t.Helper()
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(ctrl["./"+name].content), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bb, "ash", p)
		cmd.Env = append([]string{"PATH=" + tools, "IPKG_INSTROOT=" + root}, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		return string(out)
	}
	out := script("postinst")
	if !strings.Contains(out, "created the system user openflare-www (uid 999)") {
		t.Errorf("postinst output:\n%s", out)
	}
	wantEntries := map[string][]string{
		"passwd": {"openflare-www", "x", "999", "999", "openflare-agent nginx workers", "/nonexistent", "/bin/false"},
		"group":  {"openflare-www", "x", "999", ""},
		"shadow": {"openflare-www", "!", "0", "0", "99999", "7", "", "", ""},
	}
	checkEntries := func() {
		t.Helper()
		for file, want := range wantEntries {
			if got := entries(t, root, file, "openflare-www"); len(got) != 1 || !slices.Equal(got[0], want) {
				t.Errorf("/etc/%s entries for openflare-www: %q, want one %q", file, got, strings.Join(want, ":"))
			}
		}
		if got := accountIDs(t, root, "openflare-www"); got != [2]int{999, 999} {
			t.Errorf("the agent resolves openflare-www to %v", got)
		}
		for p, mode := range map[string]fs.FileMode{"etc/openflare/agent.json": 0o600, "etc/openflare": 0o751, "etc/openflare/data": 0o751, "etc/shadow": 0o600} {
			if got := modeOf(t, filepath.Join(root, p)); got != mode {
				t.Errorf("%s: mode %v, want %v", p, got, mode)
			}
		}
	}
	checkEntries()
	before := tree(t, root)
	delete(before, "rc.log")
	script("postinst")
	after := tree(t, root)
	delete(after, "rc.log")
	if !reflect.DeepEqual(after, before) {
		t.Errorf("a second postinst changed the image:\nbefore %v\nafter  %v", before, after)
	}
	checkEntries()

	script("prerm")
	init := filepath.Join(root, "etc/init.d/openflare-agent")
	if got, want := testsupport.ReadFile(t, filepath.Join(root, "rc.log")), init+" enable\n"+init+" enable\n"+init+" disable\n"; got != want {
		t.Errorf("rc.common calls:\n%s\nwant\n%s", got, want)
	}
	exe := filepath.Join(root, "usr/bin/openflare-agent")
	for _, f := range []string{".update", ".bak", ".update.json"} {
		if err := os.WriteFile(exe+f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// An upgrade keeps them; a removal does not.
	script("postrm", "PKG_UPGRADE=1")
	if _, err := os.Stat(exe + ".bak"); err != nil {
		t.Error("postrm of an upgrade removed self-update's files")
	}
	os.Remove(exe)
	script("postrm")
	if left, _ := filepath.Glob(exe + "*"); len(left) > 0 {
		t.Errorf("postrm left %v", left)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/openflare/agent.json")); err != nil {
		t.Error("postrm removed agent.json: opkg keeps a changed conffile")
	}
}

// The release binaries in the packages (make package) are the ones the
// qemu tests run: byte for byte dist/openflare-agent-linux-<target>.
func TestCrossPackagedBinaries(t *testing.T) {
	dist := crosstest.Dist(t)
	// The packages of these binaries carry their version.
	out, err := exec.Command(filepath.Join(dist, "openflare-agent-linux-"+crosstest.Targets[0].Name), "-version").Output()
	f := strings.Fields(string(out))
	if err != nil || len(f) < 2 {
		t.Fatalf("-version: %v %q", err, out)
	}
	v, err := exec.Command("sh", filepath.Join(testsupport.ModuleRoot(t), "cross", "version.sh"), f[1]).Output()
	if err != nil {
		t.Fatalf("version.sh %s: %v", f[1], err)
	}
	prefix := "openflare-agent_" + strings.TrimSpace(string(v)) + "_"
	pkgs, _ := filepath.Glob(filepath.Join(dist, "packages", prefix+"*"))
	if len(pkgs) == 0 {
		t.Skip("no packages of these binaries in dist/packages: run make package")
	}
	byArch := map[string]string{}
	s := bufio.NewScanner(strings.NewReader(readRepo(t, "cross/packages")))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) != 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if f[1] != "-" {
			byArch[f[1]+".deb"] = f[0]
		}
		if f[2] != "-" {
			for _, a := range strings.Split(f[2], ",") {
				byArch[a+".ipk"] = f[0]
			}
		}
	}
	checked := 0
	for _, p := range pkgs {
		name := filepath.Base(p)
		target, ok := byArch[strings.TrimPrefix(name, prefix)]
		if !ok {
			t.Errorf("%s: no target in cross/packages", name)
			continue
		}
		want := fileBytes(t, filepath.Join(dist, "openflare-agent-linux-"+target))
		var got string
		if strings.HasSuffix(name, ".deb") {
			_, data := readTar(t, bytes.NewReader(runBytes(t, "dpkg-deb", "--fsys-tarfile", p)))
			got = data["./usr/libexec/openflare-agent/openflare-agent"].content
		} else {
			_, outer := readTarGz(t, fileBytes(t, p))
			_, data := readTarGz(t, []byte(outer["./data.tar.gz"].content))
			got = data["./usr/bin/openflare-agent"].content
		}
		if got != string(want) {
			t.Errorf("%s does not hold openflare-agent-linux-%s", name, target)
		}
		checked++
	}
	if want := len(byArch); checked != want {
		t.Errorf("%d packages, cross/packages names %d", checked, want)
	}
	t.Logf("%d packages hold the release binaries", checked)
}

func modes(m map[string]entry) map[string]fs.FileMode {
	out := map[string]fs.FileMode{}
	for k, e := range m {
		out[k] = e.mode
	}
	return out
}

func fileBytes(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func runBytes(t *testing.T, argv ...string) []byte {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	return out
}

func run(t *testing.T, argv ...string) string { return string(runBytes(t, argv...)) }

// The 32-bit ARM packages refuse, before unpacking, a CPU their binary
// dies on: armhf's ARMv7 binary on the ARMv6 Raspberry Pi 1 and Zero
// (which Raspberry Pi OS runs as armhf too), armel's ARMv6 one on ARMv5.
func TestDebArmPreinst(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb not installed: the .deb is not built")
	}
	bin, _ := fakeAgent(t)
	cases := []struct {
		arch    string
		refused []string
		runs    []string
	}{
		{"armhf", []string{"armv6l", "armv5tel"}, []string{"armv7l", "armv8l", "aarch64"}},
		{"armel", []string{"armv5tel", "armv4tl"}, []string{"armv6l", "armv7l"}},
	}
	for _, c := range cases {
		deb := buildPackage(t, "deb.sh", bin, c.arch, "1.0.0")
		_, ctrl := readTar(t, bytes.NewReader(runBytes(t, "dpkg-deb", "--ctrl-tarfile", deb)))
		pre, ok := ctrl["./preinst"]
		if !ok || pre.mode != 0o755 {
			t.Fatalf("%s: preinst %v", c.arch, pre)
		}
		dir := t.TempDir()
		script := filepath.Join(dir, "preinst")
		os.WriteFile(script, []byte(pre.content), 0o755)
		try := func(machine string) (string, error) {
			bindir := filepath.Join(dir, machine)
			os.MkdirAll(bindir, 0o755)
			os.WriteFile(filepath.Join(bindir, "uname"), []byte("#!/bin/sh\necho "+machine+"\n"), 0o755)
			cmd := exec.Command("sh", script, "install")
			cmd.Env = []string{"PATH=" + bindir + ":/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		for _, m := range c.refused {
			if out, err := try(m); err == nil || !strings.Contains(out, "does not run on this "+m+" CPU") {
				t.Errorf("%s package on %s: %v %q, want a refusal", c.arch, m, err, out)
			}
		}
		for _, m := range c.runs {
			if out, err := try(m); err != nil {
				t.Errorf("%s package on %s: %v %q", c.arch, m, err, out)
			}
		}
	}
	amd64 := buildPackage(t, "deb.sh", bin, "amd64", "1.0.0")
	if _, ctrl := readTar(t, bytes.NewReader(runBytes(t, "dpkg-deb", "--ctrl-tarfile", amd64))); ctrl["./preinst"].content != "" {
		t.Error("the amd64 package has a preinst")
	}
}
