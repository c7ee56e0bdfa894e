// Package download reads the body of one long download (a new agent
// binary, a GeoIP database, a Pages package) within its bounds: a stall
// watchdog rather than one deadline, from the request on, so a slow but
// moving transfer over a router's uplink gets through and a dead one does
// not hold its loop; a cap on the size; and, when the source announced
// one, the exact size. A body that stops short of its Content-Length or of
// the announced size, or runs past either or the cap, is an error: a
// truncated file must never be mistaken for a complete one, even before
// its digest is checked. The caller's client opens the connection.
package download

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"openflare/internal/stall"
)

// ErrSize is matched by the error of a download whose length breaks its
// Limits: over the cap, other than announced, or cut short.
var ErrSize = errors.New("download of the wrong length")

// Limits bound one download.
type Limits struct {
	// Max is the cap: a larger Content-Length is refused before the body
	// is read, and the body is never read past it.
	Max int64
	// Want is the size the source announced (a release's asset size,
	// E7's package_size), which the body must have; 0 when unknown.
	Want int64
	// Stall ends the download once nothing arrived for this long, the
	// wait for the response headers included.
	Stall time.Duration
}

// Transfer is one download under way: the response, whose status and
// headers are the caller's to judge, and its watchdog.
type Transfer struct {
	*http.Response
	lim   Limits
	ctx   context.Context
	watch *stall.Watchdog
}

// Get sends req, a GET, through c under the watchdog. A 200 response whose
// Content-Length breaks lim is refused before its body is read; any other
// status is the caller's to handle, its body still under the watchdog (an
// error body that stalls must not hold the loop either). The caller closes
// the Transfer.
func Get(c *http.Client, req *http.Request, lim Limits) (*Transfer, error) {
	ctx, watch := stall.Watch(req.Context(), lim.Stall)
	resp, err := c.Do(req.WithContext(ctx))
	if err != nil {
		err = stall.Cause(ctx, err)
		watch.Stop()
		return nil, err
	}
	t := &Transfer{Response: resp, lim: lim, ctx: ctx, watch: watch}
	if resp.StatusCode != http.StatusOK {
		return t, nil
	}
	// The announced size first: where it is also the cap (a Pages
	// package), a longer body is one the server got wrong.
	switch cl := resp.ContentLength; {
	case lim.Want > 0 && cl > lim.Want:
		err = sizeErrorf("Content-Length %d, over the announced %d bytes", cl, lim.Want)
	case lim.Want > 0 && cl >= 0 && cl < lim.Want:
		err = sizeErrorf("Content-Length %d, short of the announced %d bytes", cl, lim.Want)
	case cl > lim.Max:
		err = sizeErrorf("%d bytes announced, the cap is %d", cl, lim.Max)
	}
	if err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Copy streams the body into w and returns the bytes written. Each read
// that brings bytes puts the watchdog back.
func (t *Transfer) Copy(w io.Writer) (int64, error) {
	limit, want, cl := t.lim.Max, t.lim.Want, t.ContentLength
	n, err := io.Copy(w, io.LimitReader(t.watch.Reader(t.Body), limit+1))
	switch {
	case err != nil && t.ctx.Err() != nil:
		return n, fmt.Errorf("after %d bytes: %w", n, stall.Cause(t.ctx, err))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return n, sizeErrorf("truncated download after %d bytes: %w", n, err)
	case err != nil:
		return n, fmt.Errorf("download failed after %d bytes: %w", n, err)
	case n > limit:
		return n, sizeErrorf("larger than the cap of %d bytes", limit)
	case cl >= 0 && n != cl:
		return n, sizeErrorf("truncated download: %d of %d bytes", n, cl)
	case want > 0 && n != want:
		return n, sizeErrorf("%d bytes, not the announced %d", n, want)
	}
	return n, nil
}

// Close ends the transfer: the body and the watchdog.
func (t *Transfer) Close() {
	t.Body.Close()
	t.watch.Stop()
}

// sizeError is a length error: its message is its own, and it matches
// ErrSize.
type sizeError struct{ err error }

func sizeErrorf(format string, a ...any) error {
	return &sizeError{fmt.Errorf(format, a...)}
}

func (e *sizeError) Error() string        { return e.err.Error() }
func (e *sizeError) Unwrap() error        { return e.err }
func (e *sizeError) Is(target error) bool { return target == ErrSize }
