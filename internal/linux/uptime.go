package linux

import (
	"bytes"
	"errors"
	"fmt"
)

var errBadUptime = errors.New("first field is not a non-negative number of seconds")

// parseUptime returns the whole seconds of the first field of /proc/uptime
// ("350735.47 234388.90"); the fraction is dropped.
func parseUptime(b []byte) (uint64, error) {
	line, _ := nextLine(b)
	f, _ := nextField(line)
	if i := bytes.IndexByte(f, '.'); i >= 0 {
		f = f[:i]
	}
	v, ok := parseUint(f)
	if !ok {
		return 0, errBadUptime
	}
	return v, nil
}

// Uptime reads the seconds since boot from <proc>/uptime.
func (r *Reader) Uptime() (uint64, error) {
	b, err := r.read(r.uptimePath)
	if err != nil {
		return 0, err
	}
	v, err := parseUptime(b)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", r.uptimePath, err)
	}
	return v, nil
}
