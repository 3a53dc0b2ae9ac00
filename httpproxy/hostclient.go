package httpproxy

import (
	"bufio"
	"crypto/tls"
	"math"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/config"
	"ballast/tlsconf"
	"ballast/upstream"
)

const (
	backendBufferSize = 16 << 10 // response header limit from a backend, per exchange (acquireReader)
	deadlineRefresh   = time.Second
)

// newHostClient builds the keep-alive connection pool of one backend. The proxy uses it only
// as a pool of connections (AcquireConn/ReleaseConn) and writes and reads the messages itself,
// so that it controls deadlines, retries and cancellation; the fields that shape messages are
// still set so the client is safe to use with Do as well.
func newHostClient(pc *config.Pool, b *upstream.Backend) *fasthttp.HostClient {
	connect := config.Or(pc.Timeouts.Connect.Duration, config.DefaultConnectTimeout)
	idle := config.Or(pc.Timeouts.Idle.Duration, config.DefaultBackendIdle)
	d := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	// Without pool tls, tc is nil.
	tc, tlsErr := backendTLS(pc, b)
	maxConns := b.MaxConns() // the backend's own, else the pool's
	if maxConns <= 0 {
		maxConns = math.MaxInt32
	} else {
		// Hedge losers and aborted streams close their connections a little after their
		// slot is released, so leave the pool some slack above max_conns.
		maxConns = 2*maxConns + 16
	}
	return &fasthttp.HostClient{
		Addr: b.Address,
		Dial: func(addr string) (net.Conn, error) {
			if tlsErr != nil {
				return nil, tlsErr // never fall back to cleartext
			}
			c, err := d.Dial("tcp", addr)
			if err != nil {
				return nil, err
			}
			if tc != nil {
				return handshake(c, tc, connect)
			}
			return newDeadlineConn(c), nil
		},
		MaxConns:            maxConns,
		MaxIdleConnDuration: idle,
		// Ballast decides every retry itself (forward, hedged); fasthttp must never re-send.
		MaxIdemponentCallAttempts: 1,
		RetryIfErr:                neverRetry,
		DisablePathNormalizing:    true,
		NoDefaultUserAgentHeader:  true,
		StreamResponseBody:        true,
		ConnPoolStrategy:          fasthttp.LIFO,
	}
}

// The buffered readers and writers of backend connections are shared by all backends, taken
// for one exchange and put back: fasthttp's HostClient keeps a pool per backend, which with
// thousands of backends holds two 16 KiB buffers for each (refilled after every collection),
// and hands out a buffer last touched that backend's previous request ago, out of the cache.
var (
	backendReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, backendBufferSize) }}
	backendWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, backendBufferSize) }}
)

// acquireReader returns a shared buffered reader reading conn.
func acquireReader(conn net.Conn) *bufio.Reader {
	br := backendReaders.Get().(*bufio.Reader)
	br.Reset(conn)
	return br
}

// releaseReader puts br back, dropping what it still buffers and its connection.
func releaseReader(br *bufio.Reader) {
	br.Reset(nil)
	backendReaders.Put(br)
}

// acquireWriter returns a shared buffered writer writing to conn.
func acquireWriter(conn net.Conn) *bufio.Writer {
	bw := backendWriters.Get().(*bufio.Writer)
	bw.Reset(conn)
	return bw
}

// releaseWriter puts bw back, dropping anything it did not flush and its connection.
func releaseWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	backendWriters.Put(bw)
}

// neverRetry keeps fasthttp from re-sending a request on its own: whether a request may be
// sent again depends on what the backend may have received, which only the proxy tracks.
func neverRetry(*fasthttp.Request, int, error) (resetTimeout, retry bool) { return false, false }

// backendTLS is the client TLS configuration for HTTP/1.1 to backend b of a pool with tls
// (ALPN http/1.1), or nil when the pool has none. An error (a CA or client certificate file
// that cannot be read) makes every dial fail rather than fall back to cleartext; the HTTP/2
// engine's attacher reports it and refuses the configuration.
func backendTLS(pc *config.Pool, b *upstream.Backend) (*tls.Config, error) {
	if pc.TLS == nil {
		return nil, nil
	}
	return tlsconf.Backend(pc.TLS, b.Address, []string{tlsconf.ALPNHTTP1})
}

// handshake runs the client TLS handshake on a fresh backend connection within timeout.
// TLS connections are read and written through crypto/tls, without the raw-I/O fast path.
func handshake(c net.Conn, cfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	tc := tls.Client(c, cfg)
	_ = c.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return tc, nil
}
