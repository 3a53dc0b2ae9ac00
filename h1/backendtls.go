//go:build linux

package h1

import (
	"crypto/tls"
	"errors"
	"time"

	"ballast/config"
	"ballast/evloop"
	"ballast/evloop/tlsconn"
	"ballast/httpcore"
	"ballast/tlsconf"
	"ballast/upstream"
)

// Backends over TLS (a pool's tls): once the shard's non-blocking connect completes, the
// client handshake runs in a goroutine of its own over a duplicate of the descriptor in the
// runtime's poller (package evloop/tlsconn), bounded by timeouts.connect; the connection
// then comes back to its shard, where every record is read and written through crypto/tls
// on the shard's descriptor (backendConn's Read, Write and ShutdownWrite below), pooled,
// kept alive and retried exactly as a plain one. A handshake that fails or times out is a
// connect failure: nothing of the request was sent, so it may go to another backend
// whatever its method.
//
// The client configuration (tlsconf.Backend: server name, roots, client certificate, ALPN
// http/1.1, a session cache) is built per backend when its pool is attached, off the
// shards, so that a CA or certificate that cannot be read refuses the configuration; a
// reload that changes the pool's tls builds a new one beside the old (tlsSet), a connection
// takes the one of its exchange's table (so a reload refused after the attach weakens
// nothing), and idle connections made under another tls are not reused. The session cache
// lives with the configuration: a backend's new connections resume the sessions its earlier
// ones were given (Stats.BackendTLSResumed).

// maxBackendHandshakes bounds the backend TLS handshakes in progress in an engine, each a
// goroutine and two descriptors for up to timeouts.connect: past it a new connection fails
// as a connect failure (Stats.BackendTLSRefused) instead of starting one more.
const maxBackendHandshakes = 1024

// backendTLS is how one backend is reached over TLS: the pool's tls section it was built
// from and the client configuration (its session cache with it), or the error building it
// gave. A connection keeps the one it was made with (backendConn.tlsv). h2 is the ALPN it
// offers: h2 for pools with protocol h2 (h2backend.go), http/1.1 otherwise.
type backendTLS struct {
	key config.BackendTLS
	h2  bool
	cfg *tls.Config
	err error
}

// bHandshake is the timer phase of a backend connection's TLS handshake: timeouts.connect.
const bHandshake = bIdle + 1

var (
	errBackendHandshakes = errors.New("too many backend TLS handshakes in progress")
	errHandshakeTimeout  = errors.New("backend TLS handshake timed out (timeouts.connect)")
	errNoBackendTLS      = errors.New("no TLS configuration attached for the backend")
)

// newBackendTLS builds the client configuration for backend address of a pool with tls t,
// offering ALPN h2 (h2) or http/1.1.
func newBackendTLS(t *config.BackendTLS, address string, h2 bool) *backendTLS {
	alpn := []string{tlsconf.ALPNHTTP1}
	if h2 {
		alpn = []string{tlsconf.ALPNH2}
	}
	cfg, err := tlsconf.Backend(t, address, alpn)
	return &backendTLS{key: *t, h2: h2, cfg: cfg, err: err}
}

// tlsSet is the ways one backend is reached over TLS, newest first: one per distinct tls
// section of the pool configurations attached lately (maxTLSSet), so that a connection takes
// the one of its exchange's table (a reload that was refused after the engine attached, or
// requests still on the previous table, keep what they were configured with).
type tlsSet struct{ list []*backendTLS }

// maxTLSSet bounds a backend's tlsSet: the installed table's, the previous ones', and those
// of reloads that were refused.
const maxTLSSet = 4

// find returns the entry built from t offering h2 (or http/1.1), nil when there is none.
func (s *tlsSet) find(t *config.BackendTLS, h2 bool) *backendTLS {
	if s == nil {
		return nil
	}
	for _, bt := range s.list {
		if bt.key == *t && bt.h2 == h2 {
			return bt
		}
	}
	return nil
}

// addTLS makes bt the newest entry of st's set (nil adds nothing), copied on write: the
// shards read the set without a lock.
func (st *backendState) addTLS(bt *backendTLS) {
	if bt == nil {
		return
	}
	old := st.tls.Load()
	list := []*backendTLS{bt}
	if old != nil {
		for _, o := range old.list {
			if (o.key != bt.key || o.h2 != bt.h2) && len(list) < maxTLSSet {
				list = append(list, o)
			}
		}
	}
	st.tls.Store(&tlsSet{list: list})
}

// tlsFor builds the client configuration of every backend of pc's pool there now (an error,
// a file that cannot be read, refuses the configuration before anything changed) and returns
// what each backend gets: for a pool with tls, the one built (ALPN http/1.1, or h2 for
// protocol h2; a backend that has one for the same tls and protocol keeps it, and its
// session cache), or one built when a backend is added later (discovery, the runtime API:
// an error then fails its connections rather than falling back to cleartext); nil for a
// pool without tls.
func tlsFor(pc *config.Pool, pool *upstream.Pool) (func(*upstream.Backend) *backendTLS, error) {
	if pc.TLS == nil {
		return func(*upstream.Backend) *backendTLS { return nil }, nil
	}
	key, h2 := *pc.TLS, pc.Protocol == config.BackendH2
	build := func(b *upstream.Backend) *backendTLS {
		if st := stateOf(b); st != nil {
			if cur := st.tls.Load().find(&key, h2); cur != nil && cur.err == nil {
				return cur // the same tls: the configuration and its session cache stay
			}
		}
		return newBackendTLS(&key, b.Address, h2)
	}
	built := map[*upstream.Backend]*backendTLS{}
	for _, b := range pool.Backends() {
		bt := build(b)
		if bt.err != nil {
			return nil, bt.err
		}
		built[b] = bt
	}
	return func(b *upstream.Backend) *backendTLS {
		if bt := built[b]; bt != nil {
			return bt
		}
		return build(b)
	}, nil
}

// established: the connection's TCP connect completed. The request goes out at once, or,
// to a backend reached over TLS, after the handshake.
func (a *attempt) established() {
	bc := a.bc
	want := a.ex.ps.Conf.TLS
	if want == nil || bc.h2 != nil { // an HTTP/2 stream: its connection did the handshake (h2backendtls.go)
		a.send()
		return
	}
	sh := a.ex.sh
	bt := bc.st.tls.Load().find(want, false)
	if bt == nil { // not reached: the engine attaches every pool before its table serves
		sh.st.connectFailures.Add(1)
		a.failed(httpcore.Connect, errNoBackendTLS)
		return
	}
	bc.tlsv, bc.tlsFor = bt, want
	if bt.err != nil {
		sh.st.connectFailures.Add(1)
		a.failed(httpcore.Connect, bt.err)
		return
	}
	e := sh.e
	if e.backendHandshakes.Add(1) > e.maxBackendHandshakes.Load() {
		e.backendHandshakes.Add(-1)
		sh.st.backendTLSRefused.Add(1)
		sh.st.connectFailures.Add(1)
		a.failed(httpcore.Connect, errBackendHandshakes)
		return
	}
	tc, err := tlsconn.Client(bc.Fd, bt.cfg)
	if err != nil {
		e.backendHandshakes.Add(-1)
		sh.st.connectFailures.Add(1)
		a.failed(httpcore.Connect, err)
		return
	}
	timeout := a.ex.ps.ConnectTimeout
	bc.hs, bc.state = tc, bcHandshaking
	bc.arm(bHandshake, sh.now+int64(timeout))
	h := &handshakeDone{bc: bc, gen: bc.gen, tc: tc}
	// The shard's timer decides (and cancels the handshake); the goroutine's own deadline,
	// later, only bounds it should the shard be gone.
	go h.run(e, sh.s, timeout+time.Second)
}

// handshakeDone brings a backend connection's handshake back to its shard.
type handshakeDone struct {
	bc  *backendConn
	gen uint32
	tc  *tlsconn.Conn
	err error
}

func (h *handshakeDone) run(e *Engine, s *evloop.Shard, timeout time.Duration) {
	h.err = h.tc.Handshake(timeout)
	e.backendHandshakes.Add(-1)
	s.Post(h)
}

// Run continues on the shard: the request goes out over TLS, or the attempt fails as a
// connect failure; a connection given up on meanwhile (closed: timed out, its request gone)
// only has the handshake's duplicate closed.
func (h *handshakeDone) Run(s *evloop.Shard) {
	bc := h.bc
	if bc.gen != h.gen || bc.hs != h.tc || !bc.Registered() {
		h.tc.Release()
		return
	}
	sh := bc.sh
	sh.now = s.Now()
	bc.hs = nil
	if h.err != nil {
		h.tc.Release()
		sh.st.backendTLSFailures.Add(1)
		sh.st.connectFailures.Add(1)
		sh.e.logger.Warn("backend TLS handshake failed", "backend", bc.b.Address, "err", h.err)
		bc.a.failed(httpcore.Connect, h.err)
		return
	}
	sh.st.backendTLS.Add(1)
	if h.tc.ConnectionState().DidResume {
		sh.st.backendTLSResumed.Add(1)
	}
	bc.tls = h.tc
	h.tc.Attach(&bc.FD)
	bc.state = bcActive
	bc.Ready |= evloop.Readable | evloop.Writable // what came meanwhile was not seen here
	bc.a.send()
}

// handshakeTimeout: timeouts.connect passed in the handshake (a backend that accepts and
// never answers, or stalls in the middle).
func (bc *backendConn) handshakeTimeout() {
	sh := bc.sh
	sh.st.backendTLSFailures.Add(1)
	sh.st.connectFailures.Add(1)
	sh.e.logger.Warn("backend TLS handshake failed", "backend", bc.b.Address, "err", errHandshakeTimeout)
	bc.a.failed(httpcore.Connect, errHandshakeTimeout) // closes bc, which cancels the handshake
}

// closeTLS ends the connection's TLS before its descriptor closes: a handshake in progress
// is cancelled (its goroutine's answer finds the connection gone and closes the duplicate),
// an established connection's buffers go back to the shard.
func (bc *backendConn) closeTLS() {
	if bc.hs != nil {
		bc.hs.Cancel()
		bc.hs = nil
	}
	if bc.tls != nil {
		bc.tls.Release()
		bc.tls = nil
	}
}

// staleTLS reports whether an idle connection was made under another tls than ps's (a
// reload changed it): it is not reused. Pointers first: a table's pool keeps its section.
func (bc *backendConn) staleTLS(ps *httpcore.Pool) bool {
	want := ps.Conf.TLS
	switch {
	case want == bc.tlsFor:
		return false
	case want == nil || bc.tlsv == nil:
		return true
	case *want == bc.tlsv.key:
		bc.tlsFor = want
		return false
	}
	return true
}

// quietTLS reports, for a TLS connection that is to be idle or that the backend spoke on
// while idle, whether crypto/tls read nothing but records of its own (a session ticket, a
// key update): one read, which leaves Readable clear when the socket is drained. A plain
// connection, one the backend closed (close_notify, Hangup) or one with application bytes
// nobody asked for is not quiet.
func (bc *backendConn) quietTLS(ev evloop.Events) bool {
	if bc.tls == nil || ev&evloop.Hangup != 0 {
		return false
	}
	_, err := bc.tls.Read(bc.sh.s.Buf()[:512])
	return err == evloop.ErrAgain
}

// Read, Write and ShutdownWrite are the connection's I/O: the socket's, an HTTP/2 stream's, or through
// crypto/tls to a backend reached over TLS, with the socket's contract (evloop.FD's): a
// short write is followed by one that offers the rest first.

// (Read and Write are in backend.go, beside the HTTP/2 stream's.)

func (bc *backendConn) ShutdownWrite() {
	if bc.tls != nil {
		bc.tls.CloseWrite()
		return
	}
	bc.FD.ShutdownWrite()
}
