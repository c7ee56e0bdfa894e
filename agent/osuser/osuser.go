// Package osuser decides which system user the nginx workers run as and
// answers, from file modes alone, whether that user can reach a path.
//
// Names are read from /etc/passwd and /etc/group directly: nginx resolves
// the names in its `user` directive from the same files, and os/user would
// add its own lookup machinery to a binary that must stay small.
package osuser

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Account is one /etc/passwd entry.
type Account struct {
	Name string
	UID  int
	GID  int
}

// DB reads the user and group databases under Root ("" is the real /).
type DB struct {
	Root string
}

type entry struct {
	name    string
	id      int
	gid     int      // passwd only
	members []string // group only
}

// tables are the two databases as read once for one decision.
type tables struct{ passwd, group []entry }

func (d DB) load() tables { return tables{passwd: d.read("passwd"), group: d.read("group")} }

func (d DB) read(file string) []entry {
	data, err := os.ReadFile(filepath.Join(d.Root, "/etc", file))
	if err != nil {
		return nil
	}
	var out []entry
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 4 || f[0] == "" || strings.HasPrefix(f[0], "#") {
			continue
		}
		id, err := strconv.Atoi(f[2])
		if err != nil {
			continue
		}
		e := entry{name: f[0], id: id}
		if file == "passwd" {
			if e.gid, err = strconv.Atoi(f[3]); err != nil {
				continue
			}
		} else if f[3] != "" {
			e.members = strings.Split(f[3], ",")
		}
		out = append(out, e)
	}
	return out
}

// user finds an account by name.
func (t tables) user(name string) (Account, bool) {
	for _, e := range t.passwd {
		if e.name == name {
			return Account{Name: e.name, UID: e.id, GID: e.gid}, true
		}
	}
	return Account{}, false
}

// userByID finds an account by uid.
func (t tables) userByID(uid int) (Account, bool) {
	for _, e := range t.passwd {
		if e.id == uid {
			return Account{Name: e.name, UID: e.id, GID: e.gid}, true
		}
	}
	return Account{}, false
}

// groupID finds a group's gid by name.
func (t tables) groupID(name string) (int, bool) {
	for _, e := range t.group {
		if e.name == name {
			return e.id, true
		}
	}
	return 0, false
}

// GroupID finds a group's gid by name in the group database.
func (d DB) GroupID(name string) (int, bool) {
	return tables{group: d.read("group")}.groupID(name)
}

// groupName finds a group's name by gid.
func (t tables) groupName(gid int) (string, bool) {
	for _, e := range t.group {
		if e.id == gid {
			return e.name, true
		}
	}
	return "", false
}

// memberOf lists the supplementary groups that name a user as a member,
// which nginx's workers also get (initgroups).
func (t tables) memberOf(user string) []int {
	var gids []int
	for _, e := range t.group {
		for _, m := range e.members {
			if m == user {
				gids = append(gids, e.id)
			}
		}
	}
	return gids
}

// Identity is who the nginx workers run as.
type Identity struct {
	User, Group string
	UID, GID    int
	Groups      []int // supplementary groups
	// Directive is the `user` line the main config gets; empty when the
	// agent is not root and the line must be dropped (workers then run as
	// the agent's own user and cannot switch).
	Directive string
	// Why says how the identity was chosen, for logs, `check` and `status`.
	Why string
}

// String is "user:group (uid:gid)".
func (id Identity) String() string {
	return fmt.Sprintf("%s:%s (%d:%d)", id.User, id.Group, id.UID, id.GID)
}

// WorkerUser is the system user install.sh creates for the workers alone.
// nginx leaves its workers dumpable, so every process of their uid can read
// their memory, the TLS keys of the sites they serve included: on Debian
// PHP-FPM and Apache run as www-data, and a compromised PHP app would get
// them.
const WorkerUser = "openflare-www"

// Fallbacks are the unprivileged users tried, in order, when neither
// agent.json nor the template names a user that exists: the workers' own
// user, then the shared ones, www-data (Debian and Ubuntu) and nobody
// (every Linux, OpenWrt and BusyBox included).
var Fallbacks = []string{WorkerUser, "www-data", "nobody"}

// Host is the process the agent runs as.
type Host struct {
	EUID, EGID int
	// SingleUID is true inside a user namespace that maps one uid only:
	// nginx cannot switch to any other user there.
	SingleUID bool
}

// CurrentHost reads the running process's situation.
func CurrentHost() Host {
	return Host{EUID: os.Geteuid(), EGID: os.Getegid(), SingleUID: singleUIDMap("/proc/self/uid_map")}
}

// singleUIDMap reports whether uid_map maps exactly one uid.
func singleUIDMap(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var total uint64
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			return false
		}
		n, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return false
		}
		total += n
	}
	return total == 1
}

// ErrUnknownUser is returned when agent.json's nginx_user names a user or
// group this host does not have.
var ErrUnknownUser = errors.New("unknown user")

// Resolve decides the worker identity. configured is agent.json's
// nginx_user ("user", "user:group" or "user group"); template is the user
// (and optional group) the main config names, or "". Root workers are only
// ever chosen when configured says so.
func (d DB) Resolve(h Host, configured, template string) (Identity, error) {
	t := d.load()
	switch {
	case h.EUID != 0:
		acct, ok := t.userByID(h.EUID)
		if !ok {
			acct = Account{Name: strconv.Itoa(h.EUID), UID: h.EUID}
		}
		group, _ := t.groupName(h.EGID)
		if group == "" {
			group = strconv.Itoa(h.EGID)
		}
		id := Identity{User: acct.Name, Group: group, UID: h.EUID, GID: h.EGID, Why: "the agent is not root, so nginx workers run as the agent's own user"}
		if configured != "" {
			id.Why += " (nginx_user ignored)"
		}
		return id, nil
	case h.SingleUID:
		// A one-uid user namespace (tests, rootless containers): uid 0 is
		// the only user there is.
		acct, ok := t.userByID(0)
		if !ok {
			acct = Account{Name: "root"}
		}
		group, ok := t.groupName(0)
		if !ok {
			group = "root"
		}
		return Identity{
			User: acct.Name, Group: group,
			Directive: "user " + acct.Name + " " + group + ";",
			Why:       "single-uid user namespace: root is the only user nginx can switch to",
		}, nil
	}
	if configured != "" {
		u, g := splitUserGroup(configured)
		acct, ok := t.user(u)
		if !ok {
			return Identity{}, fmt.Errorf("%w: agent.json nginx_user %q: no such user in /etc/passwd", ErrUnknownUser, u)
		}
		if g != "" {
			if _, ok := t.groupID(g); !ok {
				return Identity{}, fmt.Errorf("%w: agent.json nginx_user %q: no such group in /etc/group", ErrUnknownUser, g)
			}
		}
		id, err := t.identity(acct, g)
		id.Why = "agent.json nginx_user"
		return id, err
	}
	if template != "" {
		u, g := splitUserGroup(template)
		acct, ok := t.user(u)
		_, gok := t.groupID(g)
		switch {
		case !ok:
		case acct.UID == 0:
			// Root workers are an owner's decision, made locally.
		case g == "" || gok:
			if id, err := t.identity(acct, g); err == nil {
				id.Why = "the template's user directive"
				return id, nil
			}
		}
	}
	for _, name := range Fallbacks {
		if acct, ok := t.user(name); ok && acct.UID != 0 {
			id, err := t.identity(acct, "")
			if err != nil {
				continue
			}
			why := "the template names no usable user"
			if template != "" {
				u, _ := splitUserGroup(template)
				why = fmt.Sprintf("the template's user %q does not exist here or is root", u)
			}
			if name == WorkerUser {
				id.Why = fmt.Sprintf("fallback: %s; %s is the workers' own user (nginx_user in agent.json sets another)", why, name)
			} else {
				id.Why = fmt.Sprintf("fallback: %s and there is no usable %s (install.sh creates it), so %s, a user other services may share (nginx_user in agent.json sets one)", why, WorkerUser, name)
			}
			return id, nil
		}
	}
	return Identity{}, fmt.Errorf("%w: none of %s exists; set nginx_user in agent.json", ErrUnknownUser, strings.Join(Fallbacks, ", "))
}

// identity completes an account with its group: the named one, else its
// primary group, by name. nginx would otherwise look for a group named
// like the user (Debian's nobody has none) and cannot take a number.
func (t tables) identity(acct Account, group string) (Identity, error) {
	gid := acct.GID
	if group != "" {
		gid, _ = t.groupID(group)
	} else if name, ok := t.groupName(acct.GID); ok {
		group = name
	} else {
		return Identity{}, fmt.Errorf("%w: the primary group (gid %d) of user %q has no /etc/group entry; name a group in nginx_user (\"user:group\")", ErrUnknownUser, acct.GID, acct.Name)
	}
	return Identity{
		User: acct.Name, Group: group, UID: acct.UID, GID: gid,
		Groups:    t.memberOf(acct.Name),
		Directive: "user " + acct.Name + " " + group + ";",
	}, nil
}

func splitUserGroup(s string) (string, string) {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == ':' || r == ' ' || r == '\t' })
	switch len(f) {
	case 0:
		return "", ""
	case 1:
		return f[0], ""
	default:
		return f[0], f[1]
	}
}

// Access is a kind of access to a path.
type Access uint32

// The permission bits each access needs (in the owner position).
const (
	Read     Access = 4
	Write    Access = 2
	Traverse Access = 1
)

// Can reports whether the identity has the access to a file with this
// mode and owner, by the classic owner/group/other rule (no ACLs). uid 0
// can do anything.
func (id Identity) Can(mode fs.FileMode, uid, gid int, a Access) bool {
	if id.UID == 0 {
		return true
	}
	perm := uint32(mode.Perm())
	switch {
	case uid == id.UID:
		perm >>= 6
	case gid == id.GID || contains(id.Groups, gid):
		perm >>= 3
	}
	return Access(perm)&a == a
}

// CanPath stats path (following links, as nginx does) and applies Can.
func (id Identity) CanPath(path string, a Access) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true, nil
	}
	return id.Can(fi.Mode(), int(st.Uid), int(st.Gid), a), nil
}

// Unreachable returns the first directory from / down to dir (inclusive)
// the identity cannot traverse, or "".
func (id Identity) Unreachable(dir string) (string, error) {
	dir = filepath.Clean(dir)
	// The kernel walks the link targets, not the names.
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	var chain []string
	for p := dir; ; p = filepath.Dir(p) {
		chain = append(chain, p)
		if p == filepath.Dir(p) {
			break
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		ok, err := id.CanPath(chain[i], Traverse)
		if err != nil {
			return "", err
		}
		if !ok {
			return chain[i], nil
		}
	}
	return "", nil
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
