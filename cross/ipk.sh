#!/bin/sh
# ipk.sh: the OpenWrt package of one openflare-agent binary, for opkg.
#
#   sh cross/ipk.sh BINARY ARCH VERSION OUTDIR
#
# ARCH is OpenWrt's package architecture (mips_24kc, mipsel_24kc,
# arm_cortex-a7_neon-vfpv4, aarch64_cortex-a53, x86_64, ...), VERSION the
# package version (cross/version.sh). Writes
# OUTDIR/openflare-agent_VERSION_ARCH.ipk and prints its path.
#
# The layout is what OpenWrt's own ipkg-build writes and opkg reads: a
# gzipped tar of ./debian-binary ("2.0"), ./data.tar.gz and
# ./control.tar.gz, every member root's. data: /usr/bin/openflare-agent,
# the procd script cross/openwrt/openflare-agent.init as
# /etc/init.d/openflare-agent (the one install.sh installs), agent.json as a
# conffile (0600), and /lib/upgrade/keep.d/openflare-agent, which makes
# sysupgrade keep /etc/openflare. control: control, conffiles, postinst,
# prerm, postrm from cross/openwrt.
#
# Environment: SOURCE_DATE_EPOCH (default: the last commit's time) for the
# tar members' times; PACKAGE_MAINTAINER for the Maintainer field.
set -eu
LC_ALL=C
export LC_ALL

[ $# -eq 4 ] || {
	echo "usage: ipk.sh BINARY ARCH VERSION OUTDIR" >&2
	exit 64
}
binary=$1 arch=$2 version=$3 out=$4
here=$(cd "$(dirname "$0")" && pwd -P)
[ -f "$binary" ] || {
	echo "ipk.sh: $binary not found" >&2
	exit 1
}
for tool in tar gzip sed; do
	command -v "$tool" >/dev/null 2>&1 || {
		echo "ipk.sh: $tool not found" >&2
		exit 1
	}
done
: "${SOURCE_DATE_EPOCH:=$(git -C "$here" log -1 --format=%ct 2>/dev/null || echo 0)}"
maintainer=${PACKAGE_MAINTAINER:-OpenFlare agent maintainers <openflare-agent@users.noreply.github.com>}

mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/openflare-ipk.XXXXXX")
trap 'rm -rf "$work"' EXIT
umask 022
data=$work/data ctrl=$work/control
mkdir -p "$data/usr/bin" "$data/etc/init.d" "$data/etc/openflare" "$data/lib/upgrade/keep.d" "$ctrl"
cp "$binary" "$data/usr/bin/openflare-agent"
chmod 0755 "$data/usr/bin/openflare-agent"
cp "$here/openwrt/openflare-agent.init" "$data/etc/init.d/openflare-agent"
chmod 0755 "$data/etc/init.d/openflare-agent"
cp "$here/openwrt/agent.json" "$data/etc/openflare/agent.json"
chmod 0600 "$data/etc/openflare/agent.json"
chmod 0751 "$data/etc/openflare"
cp "$here/openwrt/keep.d" "$data/lib/upgrade/keep.d/openflare-agent"
chmod 0644 "$data/lib/upgrade/keep.d/openflare-agent"

# Installed-Size in bytes, as OpenWrt's feeds give it.
size=$(find "$data" -type f -exec cat {} + | wc -c | tr -d ' ')
maint_sed=$(printf '%s' "$maintainer" | sed 's/[\\|&]/\\&/g')
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$maint_sed|" \
	-e "s|@INSTALLED_SIZE@|$size|" "$here/openwrt/control" >"$ctrl/control"
cp "$here/openwrt/conffiles" "$ctrl/conffiles"
chmod 0644 "$ctrl/control" "$ctrl/conffiles"
for script in postinst prerm postrm; do
	cp "$here/openwrt/$script" "$ctrl/$script"
	chmod 0755 "$ctrl/$script"
done
printf '2.0\n' >"$work/debian-binary"

# tar_gz DIR OUT [MEMBER...]: DIR's members (all of it without MEMBERs) as
# a reproducible gzipped tar, root's.
tar_gz() {
	dir=$1 dest=$2
	shift 2
	[ $# -gt 0 ] || set -- .
	tar --format=gnu --numeric-owner --owner=0 --group=0 --sort=name --mtime="@$SOURCE_DATE_EPOCH" \
		-C "$dir" -cf - "$@" | gzip -9n >"$dest"
}
tar_gz "$data" "$work/data.tar.gz"
tar_gz "$ctrl" "$work/control.tar.gz"
ipk=$out/openflare-agent_${version}_$arch.ipk
tar_gz "$work" "$ipk" ./debian-binary ./data.tar.gz ./control.tar.gz
echo "$ipk"
