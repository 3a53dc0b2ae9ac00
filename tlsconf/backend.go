package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"ballast/config"
)

// Backend is the client configuration for connections to the backend at address (host:port)
// of a pool with tls t. nextProtos is the ALPN list to offer (nil for HTTP/1.1 only). The
// server name verified and sent as SNI is t.ServerName, else the backend's host.
func Backend(t *config.BackendTLS, address string, nextProtos []string) (*tls.Config, error) {
	if t == nil {
		return nil, errors.New("tlsconf: no tls section")
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	c := &tls.Config{
		ServerName:         host,
		NextProtos:         nextProtos,
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: t.InsecureSkipVerify, // only when written: config has no default for it
		ClientSessionCache: tls.NewLRUClientSessionCache(64),
	}
	if t.ServerName != "" {
		c.ServerName = t.ServerName
	}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("tls ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca %s: no PEM certificate in it", t.CA)
		}
		c.RootCAs = pool
	}
	if t.Cert != "" {
		kp, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate %s / key %s: %w", t.Cert, t.Key, err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c, nil
}
