package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/openflare/openflare-agent/agent/protocol"
	"github.com/openflare/openflare-agent/internal/stall"
)

// PagesMeta is E7: the active deployment of a Pages project.
func (c *Client) PagesMeta(ctx context.Context, project uint64) (protocol.PagesMeta, error) {
	var m protocol.PagesMeta
	err := c.do(ctx, "pages metadata", http.MethodGet, protocol.PathPagesPrefix+strconv.FormatUint(project, 10)+"/latest/hash", nil, &m, CapSmall)
	return m, err
}

// packageStall bounds how long a package download may make no progress: a
// slow uplink is fine, a dead one is not.
const packageStall = 2 * time.Minute

// ErrPackageSize marks a package whose length is not the one announced.
var ErrPackageSize = errors.New("package length differs from the announced size")

// PagesPackage is E8: it streams the project's package into w and returns
// the bytes written. size is E7's package_size: a Content-Length above it
// is refused before the body is read, and the body must be exactly size
// bytes. The download has no overall deadline (a 100 MiB package over a
// slow uplink must succeed, an upstream bug), only one on making no
// progress for packageStall, besides ctx.
func (c *Client) PagesPackage(ctx context.Context, project uint64, size int64, w io.Writer) (int64, error) {
	const name = "pages package"
	// A watchdog instead of a deadline, from the request on (an error
	// body that stalls must not hold the Pages loop either).
	ctx, watch := stall.Watch(ctx, packageStall)
	defer watch.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+protocol.PathPagesPrefix+strconv.FormatUint(project, 10)+"/latest/package", nil)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	req.Header.Set("User-Agent", c.agentUA)
	req.Header.Set(protocol.TokenHeader, c.Token())
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, stall.Cause(ctx, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, &Error{Endpoint: name, Status: resp.StatusCode, Message: errorMessage(resp.Body)}
	}
	if resp.ContentLength > size {
		return 0, fmt.Errorf("%s: Content-Length %d, over the announced %d bytes: %w", name, resp.ContentLength, size, ErrPackageSize)
	}
	n, err := io.Copy(w, watch.Reader(io.LimitReader(resp.Body, size+1)))
	switch {
	case err != nil && ctx.Err() != nil:
		return n, fmt.Errorf("%s: after %d bytes: %w", name, n, stall.Cause(ctx, err))
	case err != nil:
		return n, fmt.Errorf("%s: after %d of %d bytes: %w", name, n, size, err)
	case n != size:
		return n, fmt.Errorf("%s: %d bytes, announced %d: %w", name, min(n, size+1), size, ErrPackageSize)
	}
	return n, nil
}
