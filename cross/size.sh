#!/bin/sh
# size.sh: the size of each cross binary in DIST, in bytes and MiB.
set -eu

dist=${1:?usage: size.sh DIST}
targets=$(dirname "$0")/targets

printf '%-32s %10s %8s\n' binary bytes MiB
while read -r name _; do
	case $name in '' | '#'*) continue ;; esac
	bin=$dist/openflare-agent-linux-$name
	if [ ! -f "$bin" ]; then
		printf '%-32s %10s %8s\n' "${bin##*/}" missing -
		continue
	fi
	bytes=$(wc -c <"$bin" | tr -d ' ')
	printf '%-32s %10s %8s\n' "${bin##*/}" "$bytes" "$(awk -v b="$bytes" 'BEGIN { printf "%.2f", b / 1048576 }')"
done <"$targets"
