# cross/cross.mk: release binaries for edge hardware, their sizes, and
# running them under qemu-user. Included by the top-level Makefile, whose
# VERSION, COMMIT and LDFLAGS it uses. See cross/README.md.

CROSS_DIST := dist

# Leaf packages whose unit tests also run as 32-bit ARM under qemu-arm-static.
# Packages that need nginx or user namespaces are left out: their tests
# re-exec into namespaces, which qemu-user cannot do. The tests that start
# host tools (tar, xz, 7zz, mmdblookup) do so through testing/hostexec,
# which starts again a fork that qemu-user left stuck before execve; its own
# tests run here too, for the /proc reading under the emulator.
CROSS_ARM_PKGS := ./internal/... ./agent/config ./agent/state ./agent/render \
	./agent/ipgroups ./agent/observability ./agent/backoff ./testing/hostexec
# Crash tests that re-exec their own test binary: without binfmt_misc the
# kernel cannot run an ARM binary directly (exec format error).
CROSS_ARM_SKIP := ^(TestTornWriteSafety|TestCrashSafety)$$

.PHONY: cross size cross-test cross-test-binaries cross-test-arm-units package

cross:
	LDFLAGS='$(LDFLAGS)' TAGS='$(RELEASE_TAGS)' sh cross/build.sh $(CROSS_DIST)

size: cross
	@sh cross/size.sh $(CROSS_DIST)

cross-test: cross-test-binaries cross-test-arm-units

# The release binaries under qemu-user: -version, check, end-to-end runs.
cross-test-binaries: cross
	OPENFLARE_CROSS_TEST=1 OPENFLARE_CROSS_DIST='$(CURDIR)/$(CROSS_DIST)' \
		go test -count=1 -timeout 10m -v ./testing/crosstest

# The leaf packages' unit tests as ARMv7. -trimpath reuses the standard
# library the armv7 release build compiled.
cross-test-arm-units: cross
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 go test -count=1 -timeout 10m -trimpath \
		-exec 'qemu-arm-static -cpu cortex-a7' -skip '$(CROSS_ARM_SKIP)' $(CROSS_ARM_PKGS)

# The Debian (.deb) and OpenWrt (.ipk) packages of the release binaries, in
# dist/packages, versioned from git describe (cross/version.sh). See
# cross/README.md.
PACKAGE_VERSION = $(shell sh cross/version.sh '$(VERSION)')

package: cross
	sh cross/package.sh $(CROSS_DIST) '$(PACKAGE_VERSION)'
