// Package testcert writes self-signed certificates for tests: one place for what the TLS,
// HTTP/2 and server tests each used to generate themselves.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// New returns such a certificate (see Write) in memory, for a tls.Config.
func New(t testing.TB, dns ...string) tls.Certificate {
	t.Helper()
	der, key := generate(t, 1, dns)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Write writes dir/name.pem and dir/name.key: a self-signed ECDSA certificate for 127.0.0.1 and
// the given DNS names, valid for an hour either side of now, usable by a server, by a client
// (mTLS) and as its own CA, with the given serial (tests tell a reloaded certificate by it).
func Write(t testing.TB, dir, name string, serial int64, dns ...string) (certFile, keyFile string) {
	t.Helper()
	der, key := generate(t, serial, dns)
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// generate makes the certificate of New and Write.
func generate(t testing.TB, serial int64, dns []string) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              dns,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}
