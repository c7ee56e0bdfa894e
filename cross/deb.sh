#!/bin/sh
# deb.sh: the Debian package of one openflare-agent binary, with dpkg-deb.
#
#   sh cross/deb.sh BINARY ARCH VERSION OUTDIR
#
# ARCH is Debian's name (amd64, arm64, armhf, armel, riscv64), VERSION a
# Debian version (cross/version.sh makes one of `git describe`). Writes
# OUTDIR/openflare-agent_VERSION_ARCH.deb and prints its path.
#
# The package holds the binary in a directory of its own,
# /usr/libexec/openflare-agent (the unit lets self-update write there and
# nowhere else among the binaries), a link /usr/sbin/openflare-agent, the
# unit cross/systemd/openflare-agent.service with that directory in place
# of install.sh's /usr/local/lib/openflare-agent, the maintainer scripts in
# cross/debian, a manual page, the copyright file and a changelog.
#
# Environment: SOURCE_DATE_EPOCH (default: the last commit's time) stamps
# every file and the changelog, so the same inputs give the same bytes;
# PACKAGE_MAINTAINER replaces the Maintainer field; PACKAGE_DESCRIBE is the
# git describe string the changelog names (default: git describe).
set -eu
LC_ALL=C
export LC_ALL

usage() {
	echo "usage: deb.sh BINARY ARCH VERSION OUTDIR" >&2
	exit 64
}
[ $# -eq 4 ] || usage
binary=$1 arch=$2 version=$3 out=$4
here=$(cd "$(dirname "$0")" && pwd -P)
[ -f "$binary" ] || {
	echo "deb.sh: $binary not found" >&2
	exit 1
}
case $version in
[0-9]*) ;;
*)
	echo "deb.sh: $version is not a Debian version (cross/version.sh makes one)" >&2
	exit 1
	;;
esac
for tool in dpkg-deb gzip md5sum sed; do
	command -v "$tool" >/dev/null 2>&1 || {
		echo "deb.sh: $tool not found" >&2
		exit 1
	}
done

: "${SOURCE_DATE_EPOCH:=$(git -C "$here" log -1 --format=%ct 2>/dev/null || echo 0)}"
export SOURCE_DATE_EPOCH
maintainer=${PACKAGE_MAINTAINER:-OpenFlare agent maintainers <openflare-agent@users.noreply.github.com>}
describe=${PACKAGE_DESCRIBE:-$(git -C "$here" describe --tags --always --dirty 2>/dev/null || echo "$version")}

mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/openflare-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
umask 022

install -d "$root/DEBIAN" "$root/usr/libexec/openflare-agent" "$root/usr/sbin" "$root/lib/systemd/system" \
	"$root/usr/share/doc/openflare-agent" "$root/usr/share/man/man8" "$root/usr/share/lintian/overrides"
install -m 0755 "$binary" "$root/usr/libexec/openflare-agent/openflare-agent"
ln -s ../libexec/openflare-agent/openflare-agent "$root/usr/sbin/openflare-agent"
# The directives (not the comments, which describe both installs) name
# the package's binary directory instead of install.sh's.
sed '/^#/!s|/usr/local/lib/openflare-agent|/usr/libexec/openflare-agent|g' "$here/systemd/openflare-agent.service" \
	>"$root/lib/systemd/system/openflare-agent.service"
chmod 0644 "$root/lib/systemd/system/openflare-agent.service"
install -m 0644 "$here/debian/copyright" "$root/usr/share/doc/openflare-agent/copyright"
install -m 0644 "$here/debian/lintian-overrides" "$root/usr/share/lintian/overrides/openflare-agent"
gzip -9n <"$here/debian/openflare-agent.8" >"$root/usr/share/man/man8/openflare-agent.8.gz"
{
	printf 'openflare-agent (%s) unstable; urgency=medium\n\n' "$version"
	printf '  * Built from openflare-agent %s.\n\n' "$describe"
	printf ' -- %s  %s\n' "$maintainer" "$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$root/usr/share/doc/openflare-agent/changelog.gz"
chmod 0644 "$root/usr/share/man/man8/openflare-agent.8.gz" "$root/usr/share/doc/openflare-agent/changelog.gz"

for script in postinst prerm postrm; do
	install -m 0755 "$here/debian/$script" "$root/DEBIAN/$script"
done
# 32-bit ARM: the machines the binary does not run on, and the binary for
# them.
case $arch in
armhf) too_old='armv6l armv5tel armv5tejl armv4tl' advice='use openflare-agent-linux-armv6 with cross/install.sh' ;;
armel) too_old='armv5tel armv5tejl armv4tl' advice='ARMv5 is not supported' ;;
*) too_old='' ;;
esac
if [ -n "$too_old" ]; then
	sed -e "s|@TOO_OLD@|$too_old|" -e "s|@ADVICE@|$advice|" "$here/debian/preinst-arm" >"$root/DEBIAN/preinst"
	chmod 0755 "$root/DEBIAN/preinst"
fi
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' | sort | xargs md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums"
size=$(du -sk --apparent-size "$root" | cut -f1)
# The fields take the maintainer's name as given: escape sed's specials.
maint_sed=$(printf '%s' "$maintainer" | sed 's/[\\|&]/\\&/g')
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$maint_sed|" \
	-e "s|@INSTALLED_SIZE@|$size|" "$here/debian/control" >"$root/DEBIAN/control"
chmod 0644 "$root/DEBIAN/control"

find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
deb=$out/openflare-agent_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
