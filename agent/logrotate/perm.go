package logrotate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"openflare/agent/osuser"
)

// Perm is who may read nginx's logs: every line holds a visitor's address,
// the URI with its query (tokens included) and the User-Agent, so never
// other users. The adm group reads them where the host has one (the
// Debian and Ubuntu convention for operators who read /var/log).
type Perm struct {
	Mode fs.FileMode
	// GID is the group the logs are given; -1 leaves the group alone,
	// Mode then gives it nothing.
	GID int
}

// PermFor is 0640 with group adm when db has that group, else 0600.
func PermFor(db osuser.DB) Perm {
	if gid, ok := db.GroupID("adm"); ok {
		return Perm{Mode: 0o640, GID: gid}
	}
	return Perm{Mode: 0o600, GID: -1}
}

// Ensure creates the log at path, empty, unless it exists, and gives it
// the mode. nginx must find it there: it creates a missing log 0644 and
// leaves the mode of an existing one as it is (a root master gives the
// file to the worker user on a reopen and adds u+rw, nothing more). A path
// that is not a regular file (a link to /dev/null the owner put there) is
// left alone.
func (p Perm) Ensure(path string) error {
	err := p.create(path)
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	return p.apply(path, fi)
}

// create makes an empty file at path with the mode, failing when
// something is there already. It is never more open than the mode, not
// even for the instant before the group is set.
func (p Perm) create(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	mode := p.Mode
	if p.GID >= 0 {
		if err := f.Chown(-1, p.GID); err != nil {
			// A service-user agent outside adm, or a user namespace
			// without that gid: the owner alone.
			mode = 0o600
		}
	}
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("set the mode of %s: %w", path, err)
	}
	return nil
}

// apply gives the existing log at path (as fi describes it) the group and
// mode: the files of an older release, or of a nginx that created them.
func (p Perm) apply(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return nil
	}
	mode := p.Mode
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && p.GID >= 0 && int(st.Gid) != p.GID {
		if err := os.Lchown(path, -1, p.GID); err != nil {
			mode = 0o600
		}
	}
	if fi.Mode().Perm() == mode {
		return nil
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("restrict %s to %v: %w", path, mode, err)
	}
	return nil
}
