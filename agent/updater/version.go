package updater

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a release version: up to four numeric components and an
// optional pre-release ("1.4.0-rc.1"). Build metadata ("+...") is ignored,
// as semantic versioning says.
type Version struct {
	nums []uint64
	pre  []string
}

// ParseVersion reads a tag or build version after stripping one leading "v"
// (PROTOCOL 10). Anything else, such as "dev" or "e2e-test", is an error: a
// version that cannot be ordered is never taken for a newer one.
func ParseVersion(s string) (Version, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexByte(t, '+'); i >= 0 {
		t = t[:i]
	}
	core, pre, hasPre := strings.Cut(t, "-")
	parts := strings.Split(core, ".")
	if core == "" || len(parts) > 4 {
		return Version{}, fmt.Errorf("version %q: want 1 to 4 dot-separated numbers", s)
	}
	var v Version
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return Version{}, fmt.Errorf("version %q: %q is not a number", s, p)
		}
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return Version{}, fmt.Errorf("version %q: %w", s, err)
		}
		v.nums = append(v.nums, n)
	}
	if hasPre {
		for id := range strings.SplitSeq(pre, ".") {
			if id == "" || strings.Trim(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-") != "" {
				return Version{}, fmt.Errorf("version %q: bad pre-release %q", s, pre)
			}
			v.pre = append(v.pre, id)
		}
	}
	return v, nil
}

// Compare returns -1, 0 or +1 as a is older than, the same as, or newer
// than b. Missing components count as 0 ("1.2" is "1.2.0"); a pre-release
// is older than its release, and pre-release identifiers compare as
// semantic versioning orders them.
func Compare(a, b Version) int {
	for i := range max(len(a.nums), len(b.nums)) {
		x, y := at(a.nums, i), at(b.nums, i)
		if x != y {
			return cmp(x < y)
		}
	}
	switch {
	case len(a.pre) == 0 && len(b.pre) == 0:
		return 0
	case len(a.pre) == 0:
		return 1
	case len(b.pre) == 0:
		return -1
	}
	for i := range min(len(a.pre), len(b.pre)) {
		if c := comparePre(a.pre[i], b.pre[i]); c != 0 {
			return c
		}
	}
	switch {
	case len(a.pre) < len(b.pre):
		return -1
	case len(a.pre) > len(b.pre):
		return 1
	}
	return 0
}

func at(nums []uint64, i int) uint64 {
	if i < len(nums) {
		return nums[i]
	}
	return 0
}

func cmp(less bool) int {
	if less {
		return -1
	}
	return 1
}

// comparePre orders one pre-release identifier: numbers numerically and
// below words, words by ASCII.
func comparePre(x, y string) int {
	nx, errX := strconv.ParseUint(x, 10, 64)
	ny, errY := strconv.ParseUint(y, 10, 64)
	switch {
	case errX == nil && errY == nil:
		if nx == ny {
			return 0
		}
		return cmp(nx < ny)
	case errX == nil:
		return -1
	case errY == nil:
		return 1
	}
	return strings.Compare(x, y)
}

func sameVersion(a, b string) bool {
	va, errA := ParseVersion(a)
	vb, errB := ParseVersion(b)
	if errA != nil || errB != nil {
		return strings.TrimSpace(a) == strings.TrimSpace(b)
	}
	return Compare(va, vb) == 0
}
