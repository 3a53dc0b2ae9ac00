package config

import (
	"crypto/tls"
	"fmt"
	"strings"
)

// Backend protocols of a pool (pools[].protocol).
const (
	BackendHTTP1 = "http1"
	BackendH2    = "h2"
	BackendH2C   = "h2c"
)

// DefaultTLSMinVersion is the oldest TLS version a listener accepts unless told otherwise.
const DefaultTLSMinVersion = "1.2"

var (
	backendProtocols = []string{BackendHTTP1, BackendH2, BackendH2C}
	tlsVersions      = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}
)

// TLSVersion is min_version as a crypto/tls constant; validation guarantees it is known.
func (t *TLS) TLSVersion() uint16 { return tlsVersions[t.MinVersion] }

// CipherSuites is ciphers as crypto/tls IDs; nil (Go's secure default list) when none are
// written. Validation guarantees every name is one of tls.CipherSuites().
func (t *TLS) CipherSuites() []uint16 {
	var ids []uint16
	for _, name := range t.Ciphers {
		for _, cs := range tls.CipherSuites() {
			if cs.Name == name && oneOf(name, tls12Suites()) {
				ids = append(ids, cs.ID)
			}
		}
	}
	return ids
}

// tlsDefaults fills a listener's TLS policy and a pool's backend protocol.
func (d *decoder) tlsDefaults(c *Config) {
	for i := range c.Listeners {
		if t := c.Listeners[i].TLS; t != nil && t.MinVersion == "" {
			t.MinVersion = DefaultTLSMinVersion
		}
	}
	for i := range c.Pools {
		if pl := &c.Pools[i]; pl.Protocol == "" && !c.L4Pool(pl.Name) {
			pl.Protocol = BackendHTTP1
		}
	}
}

// validateListenerTLS checks a listener's tls and h2c keys.
func (d *decoder) validateListenerTLS(l Listener, p string, fail func(path, format string, args ...any)) {
	if l.H2C && l.TLS != nil {
		fail(p+".h2c", "h2c is HTTP/2 in cleartext; a TLS listener negotiates h2 by ALPN already: leave out h2c")
	}
	t := l.TLS
	if t == nil {
		return
	}
	if (t.Cert == "") != (t.Key == "") {
		fail(p+".tls", "set both cert and key (PEM files), or leave out tls")
	} else if t.Cert == "" {
		fail(p+".tls", "tls needs cert and key (PEM files): the default certificate")
	}
	for j, c := range t.Certificates {
		if c.Cert == "" || c.Key == "" {
			fail(fmt.Sprintf("%s.tls.certificates[%d]", p, j), "each certificate needs cert and key (PEM files)")
		}
	}
	if _, ok := tlsVersions[t.MinVersion]; !ok {
		fail(p+".tls.min_version", "unknown TLS version %q (valid: 1.2, 1.3)", t.MinVersion)
	}
	names := tls12Suites()
	for j, name := range t.Ciphers {
		if !oneOf(name, names) {
			fail(fmt.Sprintf("%s.tls.ciphers[%d]", p, j), "unknown or insecure cipher suite %q (valid: %s)", name, strings.Join(names, ", "))
		}
	}
	if len(t.Ciphers) > 0 && t.MinVersion == "1.3" {
		fail(p+".tls.ciphers", "ciphers choose TLS 1.2 suites; with min_version 1.3 they do nothing (TLS 1.3 suites are not configurable)")
	}
}

// validateBackendTLS checks a pool's protocol and tls keys.
func (d *decoder) validateBackendTLS(pl *Pool, p string, l4 bool, fail func(path, format string, args ...any)) {
	if l4 {
		if pl.Protocol != "" {
			fail(p+".protocol", "protocol is the HTTP version spoken to backends; pool %q serves tcp/udp listeners", pl.Name)
		}
		if pl.TLS != nil {
			fail(p+".tls", "tls to backends applies to http pools; pool %q serves tcp/udp listeners", pl.Name)
		}
		return
	}
	if !oneOf(pl.Protocol, backendProtocols) {
		fail(p+".protocol", "unknown backend protocol %q (valid: %s)", pl.Protocol, strings.Join(backendProtocols, ", "))
	}
	switch {
	case pl.Protocol == BackendH2 && pl.TLS == nil:
		fail(p+".tls", "protocol h2 speaks HTTP/2 over TLS: add tls (e.g. tls: {ca: /etc/ballast/ca.pem}), or use h2c for cleartext")
	case pl.Protocol == BackendH2C && pl.TLS != nil:
		fail(p+".tls", "protocol h2c is cleartext HTTP/2: leave out tls, or use protocol h2")
	}
	if t := pl.TLS; t != nil && (t.Cert == "") != (t.Key == "") {
		fail(p+".tls", "a client certificate needs both cert and key (PEM files)")
	}
	if pl.Health.Type == "grpc" && pl.Protocol == BackendHTTP1 {
		fail(p+".health_check.type", "grpc checks speak HTTP/2: set the pool's protocol to h2 or h2c")
	}
}

// tls12Suites names Go's secure TLS 1.2 cipher suites, the ones ciphers may choose from.
func tls12Suites() []string {
	var names []string
	for _, cs := range tls.CipherSuites() {
		for _, v := range cs.SupportedVersions {
			if v == tls.VersionTLS12 {
				names = append(names, cs.Name)
				break
			}
		}
	}
	return names
}
