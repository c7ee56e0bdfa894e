package wsclient

import (
	"fmt"
	"net/url"
	"strings"

	"openflare/agent/protocol"
)

// URL derives the WebSocket URL from server_url (PROTOCOL 3.1): http→ws,
// https→wss (ws and wss kept), path prefix kept, "/api/v1/agent/ws" appended,
// query and fragment dropped.
func URL(serverURL string) (string, error) {
	ws, _, err := endpoints(serverURL)
	return ws, err
}

// endpoints returns the WebSocket URL and the Origin sent with the handshake.
// golang.org/x/net/websocket insists on an Origin; upstream sends the server
// URL, so the same base with an http(s) scheme is used.
func endpoints(serverURL string) (wsURL, origin string, err error) {
	u, err := url.Parse(strings.TrimSpace(serverURL))
	if err != nil {
		return "", "", fmt.Errorf("parse server_url: %w", err)
	}
	var wsScheme, httpScheme string
	switch u.Scheme {
	case "http", "ws":
		wsScheme, httpScheme = "ws", "http"
	case "https", "wss":
		wsScheme, httpScheme = "wss", "https"
	default:
		return "", "", fmt.Errorf("server_url scheme %q not supported (want http, https, ws or wss)", u.Scheme)
	}
	if u.Host == "" {
		return "", "", fmt.Errorf("server_url %q has no host", u.Redacted())
	}
	base := url.URL{Host: u.Host, Path: strings.TrimRight(u.Path, "/")}
	if u.RawPath != "" {
		// Keep the caller's escaping of the prefix (e.g. %2F) intact.
		base.RawPath = strings.TrimRight(u.RawPath, "/")
	}
	// Userinfo, query and fragment are dropped: the handshake never uses them
	// and they must not leak into logs or error strings.
	o := base
	o.Scheme = httpScheme
	w := base
	w.Scheme = wsScheme
	w.Path += protocol.PathWebSocket
	if w.RawPath != "" {
		w.RawPath += protocol.PathWebSocket
	}
	return w.String(), o.String(), nil
}
