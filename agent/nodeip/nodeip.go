// Package nodeip finds the address a node reports as "ip" when agent.json
// does not set node_ip (PROTOCOL 12.4): a public address from an echo
// service, else the best local interface address. Results are cached, and
// the whole detection has a time budget so a beat is never held up long.
package nodeip

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// DefaultServices are asked in order; the first answers JSON {"ip":...}, the
// others plain text.
var DefaultServices = []string{
	"https://realip.cc",
	"https://ifconfig.me",
	"https://api.ip.sb/ip",
	"https://icanhazip.com",
}

// Detector caches a detected address.
type Detector struct {
	Services []string
	Budget   time.Duration // for one whole detection (default 5 s)
	TTL      time.Duration // cache lifetime (default 10 min)
	Client   *http.Client
	// Interfaces lists local addresses; nil means the host's interfaces.
	Interfaces func() ([]netip.Addr, error)

	mu      sync.Mutex
	ip      string
	expires time.Time
}

// New returns a detector with the PROTOCOL defaults.
func New() *Detector {
	return &Detector{Services: DefaultServices, Budget: 5 * time.Second, TTL: 10 * time.Minute}
}

// Detect returns the cached address or detects a new one. It returns "" only
// when nothing usable exists; the server then uses the connection's peer.
func (d *Detector) Detect(ctx context.Context) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ip != "" && time.Now().Before(d.expires) {
		return d.ip
	}
	budget := d.Budget
	if budget <= 0 {
		budget = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	ip := d.fromServices(ctx)
	if ip == "" {
		ip = d.fromInterfaces()
	}
	ttl := d.TTL
	if ttl <= 0 {
		ttl = 10 * time.Minute
	}
	d.ip, d.expires = ip, time.Now().Add(ttl)
	return ip
}

func (d *Detector) fromServices(ctx context.Context) string {
	client := d.Client
	if client == nil {
		client = http.DefaultClient
	}
	for _, svc := range d.Services {
		if ctx.Err() != nil {
			return ""
		}
		if ip := ask(ctx, client, svc); ip.IsValid() && public(ip) {
			return ip.String()
		}
	}
	return ""
}

func ask(ctx context.Context, client *http.Client, url string) netip.Addr {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return netip.Addr{}
	}
	req.Header.Set("User-Agent", "curl/8")
	resp, err := client.Do(req)
	if err != nil {
		return netip.Addr{}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return netip.Addr{}
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	text := strings.TrimSpace(string(body))
	var j struct {
		IP string `json:"ip"`
	}
	if strings.HasPrefix(text, "{") && json.Unmarshal(body, &j) == nil {
		text = strings.TrimSpace(j.IP)
	}
	ip, err := netip.ParseAddr(text)
	if err != nil {
		return netip.Addr{}
	}
	return ip.Unmap()
}

// fromInterfaces picks a local IPv4: public before private; loopback and
// link-local never.
func (d *Detector) fromInterfaces() string {
	list := d.Interfaces
	if list == nil {
		list = hostAddrs
	}
	addrs, err := list()
	if err != nil {
		return ""
	}
	var private netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if !a.Is4() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() {
			continue
		}
		if public(a) {
			return a.String()
		}
		if !private.IsValid() {
			private = a
		}
	}
	if private.IsValid() {
		return private.String()
	}
	return ""
}

func public(a netip.Addr) bool {
	return a.IsGlobalUnicast() && !a.IsPrivate() && !a.IsLoopback() && !a.IsLinkLocalUnicast()
}

func hostAddrs() ([]netip.Addr, error) {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, ia := range ifaddrs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}
