package controlplane

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"

	"openflare/agent/protocol"
)

// SelfSignedCert makes a throwaway Ed25519 certificate for hosts (DNS names
// or IPs; CN = the first host, serial number id+1), valid from an hour ago for a
// year, and its PKCS#8 key, both PEM with one trailing newline like the
// server ships them. It panics only if the system's randomness fails.
func SelfSignedCert(id uint64, hosts ...string) (certPEM, keyPEM string) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(fmt.Sprintf("controlplane: generate key: %v", err))
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          new(big.Int).SetUint64(uint64(id) + 1),
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(1, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if len(hosts) > 0 {
		tmpl.Subject = pkix.Name{CommonName: hosts[0]}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		panic(fmt.Sprintf("controlplane: create certificate: %v", err))
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		panic(fmt.Sprintf("controlplane: encode key: %v", err))
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
}

// CertFiles names a certificate's support files as the server does:
// "<id>.crt" and "<id>.key", PEM trimmed plus one trailing newline.
func CertFiles(id uint64, certPEM, keyPEM string) []protocol.SupportFile {
	return []protocol.SupportFile{
		{Path: fmt.Sprintf("%d.crt", id), Content: strings.TrimSpace(certPEM) + "\n"},
		{Path: fmt.Sprintf("%d.key", id), Content: strings.TrimSpace(keyPEM) + "\n"},
	}
}
