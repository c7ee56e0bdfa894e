package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrSymlink marks a path that reaches a symbolic link where none is
// followed.
var ErrSymlink = errors.New("is or passes through a symbolic link, not followed")

// ReadBeneath reads the regular file at path without following a symbolic
// link anywhere below root: root itself is the owner's choice and may be
// reached through links (OpenWrt's /var is one), but inside the agent's
// tree a link is either a mistake or an attempt to make the agent, often
// root, read or overwrite something else. path must lie inside root.
// The mode returned is the file's permission bits.
func ReadBeneath(root, path string) ([]byte, fs.FileMode, error) {
	f, err := OpenBeneath(root, path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("read %s: not a regular file", path)
	}
	// As os.ReadFile: sized from the stat, grown if the file grew since.
	data := make([]byte, 0, fi.Size()+1)
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			return data, fi.Mode().Perm(), nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// OpenBeneath opens the file at path (inside root) read-only, refusing a
// symbolic link in any component below root with ErrSymlink. Linux 5.6's
// openat2 does it in one call; older kernels (or a seccomp filter that
// refuses the call) get a walk that opens each component with O_NOFOLLOW
// from its parent's descriptor, which gives the same guarantee.
func OpenBeneath(root, path string) (*os.File, error) {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return nil, fmt.Errorf("open %s: not inside %s", path, root)
	}
	dirfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dirfd)
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		fd, err = walkNoFollow(dirfd, rel)
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("open %s: %w", path, ErrSymlink)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// walkNoFollow opens rel below dirfd one component at a time, none of them
// followed if it is a link.
func walkNoFollow(dirfd int, rel string) (int, error) {
	parts := strings.Split(filepath.Clean(rel), "/")
	parent := dirfd
	for i, part := range parts {
		flags := unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i < len(parts)-1 {
			flags |= unix.O_PATH | unix.O_DIRECTORY
		} else {
			flags |= unix.O_RDONLY | unix.O_NONBLOCK
		}
		fd, err := unix.Openat(parent, part, flags, 0)
		if errors.Is(err, unix.ENOTDIR) {
			// O_DIRECTORY|O_NOFOLLOW on a link fails with ENOTDIR: say
			// what it is.
			var st unix.Stat_t
			if unix.Fstatat(parent, part, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = unix.ELOOP
			}
		}
		if parent != dirfd {
			unix.Close(parent)
		}
		if err != nil {
			return -1, err
		}
		parent = fd
	}
	return parent, nil
}
