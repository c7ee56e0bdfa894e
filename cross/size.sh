#!/bin/sh
# size.sh: the size of each cross binary in DIST, in bytes and MiB, and what
# it costs compressed as OpenWrt stores it: squashfs compresses a firmware
# image with xz in independent 256 KiB blocks, which --block-size mimics
# (a whole-file xz would be a few percent smaller than what flash holds).
set -eu

dist=${1:?usage: size.sh DIST}
targets=$(dirname "$0")/targets

mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }

printf '%-32s %10s %8s %10s %8s\n' binary bytes MiB xz-bytes xz-MiB
while read -r name _; do
	case $name in '' | '#'*) continue ;; esac
	bin=$dist/openflare-agent-linux-$name
	if [ ! -f "$bin" ]; then
		printf '%-32s %10s %8s %10s %8s\n' "${bin##*/}" missing - - -
		continue
	fi
	bytes=$(wc -c <"$bin" | tr -d ' ')
	xzbytes=$(xz -9 --check=none --block-size=262144 -T1 -c "$bin" | wc -c | tr -d ' ')
	printf '%-32s %10s %8s %10s %8s\n' "${bin##*/}" "$bytes" "$(mib "$bytes")" "$xzbytes" "$(mib "$xzbytes")"
done <"$targets"
