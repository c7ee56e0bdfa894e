package nginx

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// resolveTimeout bounds one name: about what the C library gives a single
// DNS attempt (resolv.conf's default timeout), so a slow name delays an
// apply by seconds, not minutes.
const resolveTimeout = 5 * time.Second

// ResolveHost looks host up with the system resolver configuration
// (/etc/hosts, then the DNS servers of /etc/resolv.conf), as nginx's
// getaddrinfo does when it loads a config naming the host: the lookup of
// the template policy's origin check (policy.CheckOrigins). It is not
// nginx's own lookup: name services only the C library loads (mDNS,
// systemd-resolved's NSS module) are not consulted.
func ResolveHost(ctx context.Context, host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve origin host %s: %w", host, err)
	}
	// The resolver may hand IPv4 answers back in their mapped IPv6 form.
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	return addrs, nil
}
