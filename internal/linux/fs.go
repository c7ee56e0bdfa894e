package linux

import "path/filepath"

// FS names the roots the facts are read from. Tests point it at a fixture
// tree; production uses Default.
type FS struct {
	Proc string // procfs mount, normally /proc
	Sys  string // sysfs mount, normally /sys
	Etc  string // configuration directory holding os-release, normally /etc
}

// Default returns the roots of the running system.
func Default() FS {
	return FS{Proc: "/proc", Sys: "/sys", Etc: "/etc"}
}

// NewFS returns the roots <root>/proc, <root>/sys and <root>/etc.
func NewFS(root string) FS {
	return FS{
		Proc: filepath.Join(root, "proc"),
		Sys:  filepath.Join(root, "sys"),
		Etc:  filepath.Join(root, "etc"),
	}
}
