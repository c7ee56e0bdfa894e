# openflare-agent: build, test and demo on a fresh Debian machine.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# The agent talks HTTP/1.1 to the control plane (the WebSocket needs it
# anyway): leaving net/http's bundled HTTP/2 out saves ~320 KiB per binary.
# testing/crosstest/guard/deps_test.go builds with the same tags.
RELEASE_TAGS := nethttpomithttp2
GOBUILD := CGO_ENABLED=0 go build -tags $(RELEASE_TAGS) -trimpath -ldflags='$(LDFLAGS)'

# Debian packages the tests and the demo need: a real nginx with the Lua
# module stands in for OpenResty; unshare comes from util-linux;
# systemd-nspawn (systemd-container) boots the container the .deb is tested
# in under systemd, and lintian checks the .deb.
DEB_PACKAGES := nginx libnginx-mod-http-lua lua-resty-core lua-cjson util-linux iproute2 ca-certificates curl git gcc libc6-dev qemu-user-static busybox xz-utils 7zip bzip2 zip mmdb-bin libmaxmind-db-writer-perl chromium systemd-container lintian
# Debian packages only `make bench` needs: ModSecurity v3 for nginx and the
# OWASP Core Rule Set, the yardstick testing/wafcorpus measures the WAF by.
BENCH_DEB_PACKAGES := libnginx-mod-http-modsecurity modsecurity-crs
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Installs those of the packages named in $(1) that are missing.
define install-missing
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "$@: all Debian packages present"; fi
endef

# The end-to-end tests rerun in the user-namespace mode: what depends on
# who owns a file or a process (landing, the workers' access, the
# self-test's socket, Pages, IP groups, geo, logs, rollback, self-update).
USERNS_E2E := ^(TestPublishServes|TestBadVersionRollsBack|TestReloadFailureRestoresBackup|TestCrashDuringApply|TestBlockedCIDR|TestHTTPSRoute|TestPagesServeAndSwitch|TestLargeIPGroupPushedWithoutReload|TestGeoMatchThroughAgent|TestLogRotationAccessLogsExactlyOnce|TestPublishOverWebSocket|TestUpdateEndToEnd|TestBasicAuthPagesAPIProxy)$$

.PHONY: all build deps bench-deps test vet demo bench clean

all: build

build:
	$(GOBUILD) -o bin/openflare-agent .

# Idempotent: installs only what is missing.
deps:
	$(call install-missing,$(DEB_PACKAGES))
	@command -v go >/dev/null || { echo "Go is not installed (expected at /usr/local/go/bin)"; exit 1; }
	go mod download

vet:
	go vet ./...
	# The armv7, armv6 and mips builds have a 32-bit int: a constant that fits
	# only in 64 bits breaks their test builds, which only cross-test runs.
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 go vet ./...

test: vet
	# -count=1: the end-to-end tests build the agent binary themselves, which
	# the test cache cannot see.
	go test -race -count=1 -timeout 14m ./...
	# The template policy's reader against the real nginx, on generated
	# configs beyond the committed corpus (agent/policy/testdata/fuzz): a
	# failure there names the text the two read differently.
	go test -run=NONE -fuzz=FuzzLexerMatchesNginx -fuzztime=30s ./agent/policy
	# As root the run above has nginx's master as root and its workers as
	# another user (production); the core of the end-to-end suite runs
	# once more in a one-uid user namespace (what non-root developers get),
	# without the race detector, which the run above already had: the whole
	# suite twice would take make test past its 15 minutes on two cores.
	if [ "$$(id -u)" = 0 ]; then \
		OPENFLARE_NSTEST_MODE=userns go test -count=1 -timeout 10m -run '$(USERNS_E2E)' ./testing/e2e; \
	fi

demo: deps build
	go run ./testing/demo

# Figures measured on this machine (a few minutes: it idles the agent for
# a minute and runs load through nginx).
bench-deps: deps
	$(call install-missing,$(BENCH_DEB_PACKAGES))

bench: bench-deps build cross
	go run ./testing/bench
	go run ./testing/applybench
	# 200 agent processes (no nginx) against one control plane: traffic at
	# rest, the return after the server stopped for 20 s and for 90 s,
	# every WebSocket dropped, a publish's fan-out (about 3 minutes).
	go run ./testing/fleet -agent bin/openflare-agent
	# Per-request cost of the WAF through nginx: off, empty, a 100 000-entry
	# IP group, geo_match over full-size databases, all nine security_check
	# flags on a 4 KiB query; then the worst-case requests of every node
	# type, with inputs at nginx's limits.
	go run ./testing/wafbench
	# What the WAF catches, and what it costs, against ModSecurity with the
	# OWASP Core Rule Set, on one request corpus through two real nginx.
	go run ./testing/wafcorpus -json bin/wafcorpus.json
	# Pages extraction and the geo snapshot's compile under the agent's own
	# runtime settings (GOGC 50, a 32 MiB memory limit), so their peak RSS
	# is the agent's.
	GOGC=50 GOMEMLIMIT=32MiB go test -run=NONE -bench=Extract100MiB -benchtime=2x ./agent/pages
	GOGC=50 GOMEMLIMIT=32MiB go test -run=NONE -bench=CompileFullSize -benchtime=3x ./agent/geosnap

clean:
	rm -rf bin dist .demo

include cross/cross.mk
