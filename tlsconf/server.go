package tlsconf

import (
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"

	"ballast/config"
)

// ALPN protocol IDs a TLS listener offers, HTTP/2 first (RFC 7301, RFC 9113 §3.2).
const (
	ALPNH2    = "h2"
	ALPNHTTP1 = "http/1.1"
)

// Server serves one listener's TLS: the certificates and policy of its latest configuration.
// The tls.Config it hands to each handshake is swapped whole by Install, so a reload takes
// effect for new connections while established ones keep theirs. Session tickets stay valid
// across reloads: their keys belong to the outer Config, which never changes.
type Server struct {
	cur   atomic.Pointer[tls.Config]
	outer *tls.Config
}

// NewServer serves the certificates of c (from Build).
func NewServer(c *tls.Config) *Server {
	s := &Server{}
	s.cur.Store(c)
	s.outer = &tls.Config{
		NextProtos:         []string{ALPNH2, ALPNHTTP1},
		MinVersion:         tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return s.cur.Load(), nil },
	}
	return s
}

// Config is the tls.Config to give tls.Server for every accepted connection.
func (s *Server) Config() *tls.Config { return s.outer }

// Install makes c (from Build) serve new handshakes.
func (s *Server) Install(c *tls.Config) { s.cur.Store(c) }

// Build reads a listener's certificate files and policy. The error names the files that
// failed.
func Build(t *config.TLS) (*tls.Config, error) {
	if t == nil {
		return nil, errors.New("tlsconf: no tls section")
	}
	def, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("tls certificate %s / key %s: %w", t.Cert, t.Key, err)
	}
	certs := []tls.Certificate{def}
	for _, c := range t.Certificates {
		kp, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("tls certificate %s / key %s: %w", c.Cert, c.Key, err)
		}
		certs = append(certs, kp)
	}
	minVersion := t.TLSVersion()
	if minVersion == 0 {
		minVersion = tls.VersionTLS12
	}
	// With several certificates and no GetCertificate, crypto/tls picks the first one whose
	// names match the client's SNI (and whose key the client supports), else certs[0]: the
	// default.
	return &tls.Config{
		Certificates: certs,
		NextProtos:   []string{ALPNH2, ALPNHTTP1},
		MinVersion:   minVersion,
		CipherSuites: t.CipherSuites(),
	}, nil
}
