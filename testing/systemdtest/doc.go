// Package systemdtest installs the Debian package (cross/deb.sh) into a
// throw-away copy of this machine booted by systemd-nspawn, with the
// machine's own systemd as PID 1, and runs the agent the way a node does:
// apt install, openflare-agent join, the unit's sandbox, restarts, self-
// update and rollback under systemd, a package upgrade, remove and purge.
//
// The container's root is an overlay: this machine's root file system,
// read-only, under a tmpfs upper layer, so dpkg sees the installed nginx
// and everything the container writes is gone when it stops. The test
// binary first moves into a mount and network namespace of its own: the
// overlay and the tmpfs never show on the host, and the container, which
// shares that network namespace, the test control plane, the release
// server and the origins talk over its loopback only.
//
// It needs root and systemd-nspawn (Debian package systemd-container);
// elsewhere every test skips, saying why.
package systemdtest
