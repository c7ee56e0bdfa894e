package controlplane

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"openflare/agent/protocol"
	"openflare/internal/download"
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

// PagesPackage is E8: it streams the project's package into w and returns
// the bytes written. size is E7's package_size, the cap and the exact
// length: a Content-Length other than it is refused before the body is
// read, and the body must be exactly size bytes (errors of the length
// match download.ErrSize). The download has no overall deadline (a
// 100 MiB package over a slow uplink must succeed, an upstream bug), only
// one on making no progress for packageStall, besides ctx.
func (c *Client) PagesPackage(ctx context.Context, project uint64, size int64, w io.Writer) (int64, error) {
	const name = "pages package"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+protocol.PathPagesPrefix+strconv.FormatUint(project, 10)+"/latest/package", nil)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	req.Header.Set("User-Agent", c.agentUA)
	req.Header.Set(protocol.TokenHeader, c.Token())
	t, err := download.Get(c.http, req, download.Limits{Max: size, Want: size, Stall: packageStall})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	defer t.Close()
	if t.StatusCode != http.StatusOK {
		return 0, &Error{Endpoint: name, Status: t.StatusCode, Message: errorMessage(t.Body)}
	}
	n, err := t.Copy(w)
	if err != nil {
		return n, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}
