package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Below the root no link is followed, in the last component or a parent;
// the root itself may be reached through one. Both the openat2 path and
// the component walk (older kernels) are checked.
func TestReadBeneathRefusesLinks(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	secret := filepath.Join(base, "secret")
	os.MkdirAll(filepath.Join(root, "conf", "sub"), 0o755)
	os.WriteFile(secret, []byte("secret"), 0o600)
	os.WriteFile(filepath.Join(root, "conf", "sub", "ok.conf"), []byte("ok"), 0o640)
	os.Symlink(secret, filepath.Join(root, "conf", "link.conf"))
	os.Symlink(base, filepath.Join(root, "linkdir"))
	os.Symlink(root, filepath.Join(base, "root-link"))

	for _, walk := range []bool{false, true} {
		read := func(root, p string) ([]byte, os.FileMode, error) {
			if !walk {
				return ReadBeneath(root, p)
			}
			rel, _ := filepath.Rel(root, p)
			dirfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(dirfd)
			fd, err := walkNoFollow(dirfd, rel)
			if errors.Is(err, unix.ELOOP) {
				return nil, 0, ErrSymlink
			}
			if err != nil {
				return nil, 0, err
			}
			unix.Close(fd)
			return []byte("ok"), 0o640, nil
		}
		data, mode, err := read(root, filepath.Join(root, "conf", "sub", "ok.conf"))
		if err != nil || string(data) != "ok" || mode != 0o640 {
			t.Fatalf("walk=%v: regular file: %q %v %v", walk, data, mode, err)
		}
		if _, _, err := read(filepath.Join(base, "root-link"), filepath.Join(base, "root-link", "conf", "sub", "ok.conf")); err != nil {
			t.Fatalf("walk=%v: root reached through a link: %v", walk, err)
		}
		for _, p := range []string{filepath.Join(root, "conf", "link.conf"), filepath.Join(root, "linkdir", "secret")} {
			if _, _, err := read(root, p); !errors.Is(err, ErrSymlink) {
				t.Fatalf("walk=%v: %s: err = %v, want ErrSymlink", walk, p, err)
			}
		}
	}
	if _, _, err := ReadBeneath(root, secret); err == nil {
		t.Fatal("a path outside the root was read")
	}
	if _, _, err := ReadBeneath(root, filepath.Join(root, "conf")); err == nil {
		t.Fatal("a directory was read as a file")
	}
}
