package e2e

import (
	"crypto/tls"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/benchkit"
	"openflare/testing/controlplane"
	"openflare/testing/testsupport"
)

// certPairs is the number of certificates of the large versions below.
const certPairs = 500

// A version of 1 000 routes over 500 certificate pairs, more than the whole
// E4 reply could weigh before support files streamed to disk (8 MiB at
// memory_limit 32 MiB), applies within the 48 MiB the agent keeps, and
// nginx serves every name with its own certificate (SNI); so does a
// version of 100 routes over the same 500 certificates. The apply times
// are logged, not judged.
func TestManyCertificatesHTTPSInBoundedMemory(t *testing.T) {
	cp := controlPlane(t)
	o := origin(t, "big")
	// Real chains carry intermediates: one chain of four, with the long
	// name lists CDN certificates have, makes each .crt about 18 KiB.
	var chain strings.Builder
	for k := range 4 {
		hosts := make([]string, 150)
		for h := range hosts {
			hosts[h] = fmt.Sprintf("intermediate-%d-name-%03d.chain.test", k, h)
		}
		c, _ := controlplane.SelfSignedCert(uint64(900_000+k), hosts...)
		chain.WriteString(c)
	}
	// Certificate i covers the names d(2i) and d(2i+1); SelfSignedCert's
	// serial number is id+1, which tells which one nginx chose.
	domain := func(n int) string { return fmt.Sprintf("d%d.big.test", n) }
	var support []protocol.SupportFile
	for i := range certPairs {
		id := uint64(i + 1)
		leaf, key := controlplane.SelfSignedCert(id, domain(2*i), domain(2*i+1))
		support = append(support, controlplane.CertFiles(id, leaf+chain.String(), key)...)
	}
	var size int
	for _, f := range support {
		size += len(f.Content)
	}
	if size <= 8<<20 {
		t.Fatalf("the certificates weigh %d bytes: no more than the old E4 cap", size)
	}
	// routes spreads the 1 000 names over n routes, each with its share of
	// the certificates.
	routes := func(n int) controlplane.Source {
		var src controlplane.Source
		per := 2 * certPairs / n
		for r := range n {
			route := proxyRoute(uint64(r+1), domain(r*per), o)
			route.Domains, route.DomainCertIDs = nil, nil
			for d := r * per; d < (r+1)*per; d++ {
				route.Domains = append(route.Domains, domain(d))
				route.DomainCertIDs = append(route.DomainCertIDs, uint64(d/2+1))
			}
			route.EnableHTTPS, route.RedirectHTTP = true, true
			src.Routes = append(src.Routes, route)
		}
		src.OpenResty = noErrorPages
		return src
	}

	v1 := publish(t, cp, controlplane.Source{Routes: []controlplane.Route{proxyRoute(1, "small.test", o)}})
	n := newNode(t, cp, map[string]any{"memory_limit": "32MiB"})
	n.bin = plainAgentBinary(t)
	n.start()
	pid := n.cmd.Process.Pid
	waitApplyLog(t, cp, v1.Version, protocol.ResultSuccess)
	waitServes(t, "small.test", "/", "origin-ok big")

	for _, routeCount := range []int{1000, 100} {
		v := publish(t, cp, routes(routeCount), support...)
		began := time.Now()
		rec, err := cp.WaitApplyLog(ctxFor(t, 5*time.Minute), func(r protocol.ApplyLogRecord) bool { return r.Version == v.Version })
		if err != nil || rec.Result != protocol.ResultSuccess {
			t.Fatalf("%d routes: apply log %+v, %v\n%s", routeCount, rec, err, n.tail())
		}
		t.Logf("%d routes, %d certificate pairs (%.1f MiB): applied %v after publishing (heartbeat every 300 ms); VmHWM %.1f MiB, VmRSS %.1f MiB",
			routeCount, certPairs, float64(size)/(1<<20), time.Since(began).Round(time.Millisecond), float64(benchkit.StatusKiB(pid, "VmHWM:"))/1024, float64(benchkit.StatusKiB(pid, "VmRSS:"))/1024)
		// A sample of the names, first and last included, each answered
		// with its own certificate.
		for _, d := range []int{0, 1, 2, 333, 517, 998, 999} {
			host := domain(d)
			serial := big.NewInt(int64(d/2 + 2))
			var got reply
			testsupport.WaitFor(t, 30*time.Second, "https://"+host, func() bool {
				got = request("GET", "https", host, "/x", "")
				return got.status == 200
			})
			if got.body != "origin-ok big /x" {
				t.Fatalf("https://%s/x: %q", host, got.body)
			}
			c, err := tls.Dial("tcp", "127.0.0.1:443", &tls.Config{InsecureSkipVerify: true, ServerName: host})
			if err != nil {
				t.Fatalf("%s: %v", host, err)
			}
			leaf := c.ConnectionState().PeerCertificates[0]
			c.Close()
			if leaf.SerialNumber.Cmp(serial) != 0 || leaf.VerifyHostname(host) != nil {
				t.Fatalf("%s served certificate %v (%v), want serial %v", host, leaf.SerialNumber, leaf.DNSNames, serial)
			}
		}
		if r := get(domain(517), "/y"); r.status != 301 || r.header.Get("Location") != "https://"+domain(517)+"/y" {
			t.Fatalf("http: %d %v", r.status, r.header)
		}
	}
	if hwm := benchkit.StatusKiB(pid, "VmHWM:"); hwm > rssCeilingKiB {
		t.Fatalf("peak RSS %.1f MiB, over %d MiB", float64(hwm)/1024, rssCeilingKiB>>10)
	}
}
