package stall

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// slowReader returns one byte per read after waiting gap.
type slowReader struct {
	gap  time.Duration
	left int
}

func (s *slowReader) Read(b []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.gap)
	s.left--
	b[0] = 'x'
	return 1, nil
}

func TestSlowButMovingCompletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, w := Watch(context.Background(), time.Second)
		defer w.Stop()
		// 100 bytes, one every 0.9 s: 90 s in all, ninety times the period.
		n, err := io.Copy(io.Discard, w.Reader(&slowReader{gap: 900 * time.Millisecond, left: 100}))
		if err != nil || n != 100 {
			t.Fatalf("copied %d bytes: %v", n, err)
		}
		if ctx.Err() != nil {
			t.Fatalf("context ended: %v", context.Cause(ctx))
		}
	})
}

func TestStallCancelsWithCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, w := Watch(context.Background(), time.Second)
		defer w.Stop()
		w.Reader(&slowReader{gap: 500 * time.Millisecond, left: 3}).Read(make([]byte, 1))
		<-ctx.Done()
		err := Cause(ctx, ctx.Err())
		if !errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), "nothing received for 1s") {
			t.Fatalf("cause %v", err)
		}
	})
}

func TestCauseKeepsPlainErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	want := errors.New("connection reset")
	if got := Cause(ctx, want); got != want {
		t.Errorf("Cause of a plain cancellation: %v, want %v", got, want)
	}
	dctx, dcancel := context.WithTimeoutCause(context.Background(), time.Nanosecond, errors.New("download took longer than 2h"))
	defer dcancel()
	<-dctx.Done()
	if got := Cause(dctx, want); got.Error() != "download took longer than 2h" {
		t.Errorf("Cause of a deadline: %v", got)
	}
}
