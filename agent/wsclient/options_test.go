package wsclient

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.DialTimeout != 10*time.Second || o.ReadDeadline != 75*time.Second ||
		o.WriteTimeout != 5*time.Second || o.MaxFrame != 1<<20 || o.MaxMessage != 32<<20 || o.Log == nil || o.Stats == nil {
		t.Errorf("defaults = %+v", o)
	}
	if got := o.interval(); got != DefaultInterval {
		t.Errorf("interval without Interval = %s", got)
	}
	o = Options{DialTimeout: 20 * time.Second, Interval: func() time.Duration { return 0 }}.withDefaults()
	if o.ReadDeadline != 2*time.Minute {
		t.Errorf("read deadline for a 20 s request timeout = %s, want 6 × 20 s", o.ReadDeadline)
	}
	if got := o.interval(); got != DefaultInterval {
		t.Errorf("interval for a zero Interval() = %s", got)
	}
}

func TestRedact(t *testing.T) {
	inner := errors.New("server said secret-token")
	err := redact(inner, "secret-token")
	if strings.Contains(err.Error(), "secret-token") || !errors.Is(err, inner) {
		t.Errorf("redact = %q", err)
	}
	if redact(ErrHalfOpen, "secret-token") != ErrHalfOpen {
		t.Error("an error without the token must pass unchanged")
	}
	if redact(nil, "x") != nil || redact(inner, "") != inner {
		t.Error("nil error or empty token must pass unchanged")
	}
}
