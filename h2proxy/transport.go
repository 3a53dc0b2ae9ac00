//lint:file-ignore SA1019 issue 11 builds the HTTP/2 plane on golang.org/x/net/http2, deprecated since v0.62 in favour of net/http's own HTTP/2 (http.Server.Protocols, HTTP2Config); moving is a follow-up.

package h2proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"ballast/config"
	"ballast/tlsconf"
	"ballast/upstream"
)

// backendSlot is this plane's attachment slot on upstream backends.
var backendSlot = upstream.NewSlot()

// backendState is what the HTTP/2 plane keeps per backend: its transport, swapped whole when
// a reload changes how the pool reaches its backends.
type backendState struct {
	t atomic.Pointer[transport]
	// tls1 is the pool's tls when the backend was first attached: the HTTP/1 plane's
	// connections to it keep that (see httpcore.Bridge). After a reload that changes it,
	// all of the backend's requests take http.Transport, which follows.
	tls1 tlsKey
}

type tlsKey struct {
	tls    config.BackendTLS
	hasTLS bool
}

// transport is one way to reach one backend.
type transport struct {
	key    transportKey // what it was built from
	rt     http.RoundTripper
	scheme string // of the outgoing URL: https for TLS and for h2c (http2.Transport's rule)
	// http1: requests without a body go through the bridge (the HTTP/1 engine's
	// connections to the backend, with the same tls) instead of rt.
	http1 bool
	close func()
}

// transportKey is what a backend's transport depends on; a reload that changes it rebuilds it.
type transportKey struct {
	protocol string
	tls      config.BackendTLS
	hasTLS   bool
	connect  time.Duration
	idle     time.Duration
	maxIdle  int
}

func keyOf(pc *config.Pool) transportKey {
	k := transportKey{protocol: pc.Protocol, connect: pc.Timeouts.Connect.Duration, idle: pc.Timeouts.Idle.Duration, maxIdle: pc.KeepAlive.MaxIdle}
	if pc.TLS != nil {
		k.tls, k.hasTLS = *pc.TLS, true
	}
	return k
}

// attachTransports gives every backend of pool (and every one added later) a transport for
// pc, rebuilding those built for a different protocol or tls (httpcore.Attacher).
func attachTransports(pc *config.Pool, pool *upstream.Pool) error {
	key := keyOf(pc)
	// Build once for the backends there now, so a bad CA or client certificate refuses the
	// reload instead of failing requests.
	for _, b := range pool.Backends() {
		if _, err := newTransport(key, b.Address); err != nil {
			return err
		}
	}
	pool.Attach(backendSlot, func(b *upstream.Backend) any {
		s := &backendState{tls1: tlsKey{key.tls, key.hasTLS}}
		t, err := newTransport(key, b.Address)
		if err == nil {
			s.t.Store(t)
		}
		return s
	})
	for _, b := range pool.Backends() {
		s := stateOf(b)
		if s == nil {
			continue
		}
		if old := s.t.Load(); old == nil || old.key != key {
			t, err := newTransport(key, b.Address)
			if err != nil {
				return err
			}
			t.http1 = t.http1 && s.tls1 == (tlsKey{key.tls, key.hasTLS})
			s.t.Store(t)
			if old != nil {
				old.close()
			}
		}
	}
	return nil
}

func stateOf(b *upstream.Backend) *backendState {
	s, _ := b.Attachment(backendSlot).(*backendState)
	return s
}

// newTransport builds the transport for one backend address.
func newTransport(k transportKey, address string) (*transport, error) {
	connect := config.Or(k.connect, config.DefaultConnectTimeout)
	dialer := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, "tcp", address) // the backend's address, whatever the URL
	}
	var tc *tls.Config
	if k.hasTLS {
		var protos []string
		if k.protocol == config.BackendH2 {
			protos = []string{tlsconf.ALPNH2}
		}
		var err error
		if tc, err = tlsconf.Backend(&k.tls, address, protos); err != nil {
			return nil, err
		}
	}
	switch k.protocol {
	case config.BackendH2, config.BackendH2C:
		h2 := &http2.Transport{
			TLSClientConfig: tc,
			AllowHTTP:       k.protocol == config.BackendH2C,
			ReadIdleTimeout: PingAfter,
			PingTimeout:     PingTimeout,
			IdleConnTimeout: config.Or(k.idle, config.DefaultBackendIdle),
		}
		h2.DialTLSContext = func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil || k.protocol == config.BackendH2C {
				return c, err
			}
			tconn := tls.Client(c, cfg)
			hctx, cancel := context.WithTimeout(ctx, connect)
			defer cancel()
			if err := tconn.HandshakeContext(hctx); err != nil {
				_ = c.Close()
				return nil, err
			}
			if p := tconn.ConnectionState().NegotiatedProtocol; p != tlsconf.ALPNH2 {
				_ = c.Close()
				return nil, fmt.Errorf("backend %s did not negotiate h2 (ALPN %q)", address, p)
			}
			return tconn, nil
		}
		return &transport{key: k, rt: h2, scheme: "https", close: h2.CloseIdleConnections}, nil
	case config.BackendHTTP1, "":
		t := &http.Transport{
			DialContext:           dial,
			TLSClientConfig:       tc,
			TLSHandshakeTimeout:   connect,
			MaxIdleConnsPerHost:   max(k.maxIdle, 1),
			IdleConnTimeout:       config.Or(k.idle, config.DefaultBackendIdle),
			DisableCompression:    true, // pass bodies as they are
			ForceAttemptHTTP2:     false,
			ExpectContinueTimeout: 0,
		}
		t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1 only
		scheme := "http"
		if tc != nil {
			scheme = "https"
		}
		return &transport{key: k, rt: t, scheme: scheme, http1: true, close: t.CloseIdleConnections}, nil
	}
	return nil, fmt.Errorf("unknown backend protocol %q", k.protocol)
}
