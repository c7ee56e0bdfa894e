package render

import (
	"crypto/ed25519"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

// testCertPEM makes a self-signed Ed25519 certificate for the names. The key
// comes from a fixed seed and Ed25519 signatures are deterministic, so the
// PEM is the same on every run.
func testCertPEM(tb testing.TB, seed byte, names ...string) string {
	tb.Helper()
	key := ed25519.NewKeyFromSeed(bytesOf(seed, ed25519.SeedSize))
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(int64(seed) + 1),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, key.Public(), key)
	if err != nil {
		tb.Fatalf("create certificate: %v", err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func bytesOf(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}
