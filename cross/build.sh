#!/bin/sh
# build.sh: static, stripped openflare-agent binaries for the edge targets
# listed in cross/targets, each with a .sha256 file as sha256sum prints it.
#
#   LDFLAGS='-s -w -X main.version=v1 -X main.commit=abc' cross/build.sh DIST
#
# Run from the module root (cross/cross.mk does). CROSS_JOBS builds run at
# once (default: the number of CPUs): a cold build compiles the standard
# library once per target, and one go build alone keeps only ~1.5 cores busy.
set -eu

dist=${1:?usage: build.sh DIST}
targets=$(dirname "$0")/targets
: "${LDFLAGS:=-s -w}"
jobs=${CROSS_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}

for tool in go sha256sum; do
	command -v "$tool" >/dev/null 2>&1 || { echo "build.sh: $tool not found" >&2; exit 1; }
done
mkdir -p "$dist"

# build NAME GOARCH VARIANT: VARIANT is the GOARM or GOMIPS value, or -.
build() {
	out=openflare-agent-linux-$1
	goarm='' gomips=''
	case $2 in
	arm) goarm=$3 ;;
	mips | mipsle) gomips=$3 ;;
	esac
	rm -f "$dist/$out" "$dist/$out.sha256"
	env CGO_ENABLED=0 GOOS=linux GOARCH="$2" GOARM="$goarm" GOMIPS="$gomips" \
		go build -tags "${TAGS:-nethttpomithttp2}" -trimpath -ldflags="$LDFLAGS" -o "$dist/$out" . &&
		(cd "$dist" && sha256sum "$out" >"$out.sha256") &&
		echo "built $dist/$out"
}

pids='' failed=0
# wait_all: wait for the running batch; remember whether any build failed.
wait_all() {
	for pid in $pids; do
		wait "$pid" || failed=1
	done
	pids=''
}

running=0
while read -r name arch variant; do
	case $name in '' | '#'*) continue ;; esac
	build "$name" "$arch" "$variant" &
	pids="$pids $!"
	running=$((running + 1))
	if [ "$running" -ge "$jobs" ]; then
		wait_all
		running=0
	fi
done <"$targets"
wait_all
if [ "$failed" -ne 0 ]; then
	echo "build.sh: some builds failed" >&2
	exit 1
fi
