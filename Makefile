# openflare-agent: build, test and demo on a fresh Debian machine.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# The agent talks HTTP/1.1 to the control plane (the WebSocket needs it
# anyway): leaving net/http's bundled HTTP/2 out saves ~320 KiB per binary.
# testing/crosstest/deps_test.go builds with the same tags.
RELEASE_TAGS := nethttpomithttp2
GOBUILD := CGO_ENABLED=0 go build -tags $(RELEASE_TAGS) -trimpath -ldflags='$(LDFLAGS)'

# Debian packages the tests and the demo need: a real nginx with the Lua
# module stands in for OpenResty; unshare comes from util-linux.
DEB_PACKAGES := nginx libnginx-mod-http-lua lua-resty-core lua-cjson util-linux iproute2 ca-certificates curl git gcc libc6-dev qemu-user-static busybox xz-utils 7zip bzip2 zip mmdb-bin libmaxmind-db-writer-perl chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build deps test vet demo bench clean

all: build

build:
	$(GOBUILD) -o bin/openflare-agent .

# Idempotent: installs only what is missing.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "deps: all Debian packages present"; fi
	@command -v go >/dev/null || { echo "Go is not installed (expected at /usr/local/go/bin)"; exit 1; }
	go mod download

vet:
	go vet ./...

test: vet
	# -count=1: the end-to-end tests build the agent binary themselves, which
	# the test cache cannot see.
	go test -race -count=1 -timeout 14m ./...
	# As root the run above has nginx's master as root and its workers as
	# another user (production); run the end-to-end suite once more in a
	# one-uid user namespace (what non-root developers get).
	if [ "$$(id -u)" = 0 ]; then \
		OPENFLARE_NSTEST_MODE=userns go test -race -count=1 -timeout 10m ./testing/e2e; \
	fi

demo: deps build
	go run ./testing/demo

# Figures measured on this machine (a few minutes: it idles the agent for
# a minute and runs load through nginx).
bench: deps build cross
	go run ./testing/bench
	go run ./testing/applybench
	# Per-request cost of the WAF through nginx: off, empty, a 100 000-entry
	# IP group, geo_match over full-size databases, all nine security_check
	# flags on a 4 KiB query.
	go run ./testing/wafbench
	# Pages extraction and the geo snapshot's compile under the agent's own
	# runtime settings (GOGC 50, a 32 MiB memory limit), so their peak RSS
	# is the agent's.
	GOGC=50 GOMEMLIMIT=32MiB go test -run=NONE -bench=Extract100MiB -benchtime=2x ./agent/pages
	GOGC=50 GOMEMLIMIT=32MiB go test -run=NONE -bench=CompileFullSize -benchtime=3x ./agent/geosnap

clean:
	rm -rf bin dist .demo

include cross/cross.mk
