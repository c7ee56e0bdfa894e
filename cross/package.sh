#!/bin/sh
# package.sh: the Debian and OpenWrt packages of every release binary.
#
#   sh cross/package.sh DIST VERSION
#
# For each target of cross/targets, DIST/openflare-agent-linux-TARGET (make
# cross builds them) goes into the packages cross/packages names for it:
# DIST/packages/openflare-agent_VERSION_ARCH.deb (cross/deb.sh, dpkg-deb)
# and .ipk (cross/ipk.sh, tar and gzip), and DIST/packages/SHA256SUMS lists
# them. VERSION is a package version (cross/version.sh makes one of git
# describe). With lintian installed every .deb must pass it.
set -eu
LC_ALL=C
export LC_ALL

[ $# -eq 2 ] || {
	echo "usage: package.sh DIST VERSION" >&2
	exit 64
}
dist=$1 version=$2
here=$(cd "$(dirname "$0")" && pwd -P)
out=$dist/packages
rm -rf "$out"
mkdir -p "$out"

# Every target has a line in cross/packages, and nothing else does.
targets=$(awk '!/^#/ && NF { print $1 }' "$here/targets")
listed=$(awk '!/^#/ && NF { print $1 }' "$here/packages")
if [ "$targets" != "$listed" ]; then
	echo "package.sh: cross/packages does not list the targets of cross/targets in order" >&2
	exit 1
fi

while read -r target deb owrt; do
	case $target in '' | '#'*) continue ;; esac
	bin=$dist/openflare-agent-linux-$target
	[ -f "$bin" ] || {
		echo "package.sh: $bin not found: run make cross first" >&2
		exit 1
	}
	if [ "$deb" != - ]; then
		echo "built $(sh "$here/deb.sh" "$bin" "$deb" "$version" "$out")"
	fi
	if [ "$owrt" != - ]; then
		for arch in $(printf '%s\n' "$owrt" | tr ',' ' '); do
			echo "built $(sh "$here/ipk.sh" "$bin" "$arch" "$version" "$out")"
		done
	fi
done <"$here/packages"

if command -v lintian >/dev/null 2>&1; then
	# Clean: no tag at any level but the overrides the package carries
	# (each justified in cross/debian/lintian-overrides).
	lintian --fail-on error,warning,info,pedantic,experimental --display-info --pedantic --display-experimental "$out"/*.deb
	echo "lintian: clean"
else
	echo "note: lintian not installed (make deps installs it): the .deb files are not checked"
fi
(cd "$out" && sha256sum ./*.deb ./*.ipk | sed 's| \./| |' >SHA256SUMS)
echo "$out/SHA256SUMS"
