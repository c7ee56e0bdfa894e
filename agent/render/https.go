package render

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"strconv"

	"openflare/agent/protocol"
)

// certGroup is the domains served with one certificate.
type certGroup struct {
	certID  uint64
	domains []string
}

// partition is how a route's domains split over HTTP and HTTPS servers.
type partition struct {
	httpOnly []string    // domains without a certificate
	groups   []certGroup // in order of each id's first appearance
}

// certStore parses each shipped <id>.crt at most once per render, however
// many routes or groups use it.
type certStore struct {
	files  map[string]protocol.SupportFile
	parsed map[uint64]certEntry
}

type certEntry struct {
	cert *x509.Certificate
	err  error
}

func newCertStore(files map[string]protocol.SupportFile) *certStore {
	return &certStore{files: files, parsed: make(map[uint64]certEntry)}
}

var errNoCertificateBlock = errors.New("no CERTIFICATE PEM block")

// lookup returns the parsed leaf certificate, ok=false when <id>.crt is not
// among the support files.
func (s *certStore) lookup(id uint64) (*x509.Certificate, bool, error) {
	if e, done := s.parsed[id]; done {
		return e.cert, true, e.err
	}
	f, ok := s.files[strconv.FormatUint(uint64(id), 10)+".crt"]
	if !ok {
		return nil, false, nil
	}
	e := certEntry{}
	pemText, err := io.ReadAll(content(&f))
	if e.err = err; err == nil {
		e.cert, e.err = parseLeaf(pemText)
	}
	s.parsed[id] = e
	return e.cert, true, e.err
}

// parseLeaf returns the first certificate of a PEM bundle (the leaf, as in a
// fullchain file), skipping any other block types.
func parseLeaf(data []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errNoCertificateBlock
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

// partitionDomains applies PROTOCOL 5.2's HTTPS partition and checks that
// every certificate exists, parses and covers its domains.
func partitionDomains(r *route, certs *certStore) (partition, error) {
	if !r.EnableHTTPS {
		return partition{httpOnly: r.Domains}, nil
	}
	var p partition
	index := make(map[uint64]int)
	for i, d := range r.Domains {
		var id uint64
		if i < len(r.DomainCertIDs) {
			id = r.DomainCertIDs[i]
		}
		if id == 0 {
			p.httpOnly = append(p.httpOnly, d)
			continue
		}
		gi, ok := index[id]
		if !ok {
			gi = len(p.groups)
			index[id] = gi
			p.groups = append(p.groups, certGroup{certID: id})
		}
		p.groups[gi].domains = append(p.groups[gi].domains, d)
	}
	if len(p.groups) == 0 {
		// The server's own wording, kept so operators see one message.
		return partition{}, fmt.Errorf("路由 %s 未配置证书", r.displayName())
	}
	for _, g := range p.groups {
		cert, ok, err := certs.lookup(g.certID)
		if !ok {
			return partition{}, fmt.Errorf("route %s certificate %d does not exist", r.displayName(), g.certID)
		}
		if err != nil {
			return partition{}, fmt.Errorf("site %s certificate validation failed: certificate %d: %w", r.displayName(), g.certID, err)
		}
		for _, d := range g.domains {
			if cert.VerifyHostname(d) != nil {
				return partition{}, fmt.Errorf("site %s certificate validation failed: certificate does not cover domain %s", r.displayName(), d)
			}
		}
	}
	return p, nil
}
