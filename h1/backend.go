//go:build linux

package h1

import (
	"ballast/config"
	"ballast/evloop"
	"ballast/evloop/tlsconn"
	"ballast/httpcore"
	"ballast/upstream"
)

// backendConn is one connection to a backend, owned by the shard that opened it: in use by
// one exchange, or idle in the shard's list for its backend (registered all the while, so
// that a backend closing an idle connection is noticed at once, without a peek).
type backendConn struct {
	evloop.FD
	timer  evloop.Timer
	sh     *shard
	b      *upstream.Backend
	st     *backendState // b's, kept here: the request path looks it up once
	a      *attempt      // the attempt it serves, while active
	h2     *h2bStream    // set: a stream of an HTTP/2 connection, not a socket (h2backend.go)
	in     []byte        // a response head split across reads
	scan   int
	state  uint8
	tphase uint8
	served int
	gen    uint32
	// aprev and anext link every backend connection of the shard (shutdown closes them all).
	aprev, anext *backendConn
	ps           *httpcore.Pool // the pool whose keep-alive rules apply while idle
	// Over TLS (backendtls.go): the configuration it was made with (and the pool's tls
	// section last found to match it), the handshake in progress, then the established
	// connection its I/O goes through.
	tlsv   *backendTLS
	tlsFor *config.BackendTLS
	hs     *tlsconn.Conn
	tls    *tlsconn.Conn
}

// States of a backend connection.
const (
	bcFree uint8 = iota
	bcConnecting
	bcActive
	bcIdle
	bcHandshaking // TLS, off the shard (backendtls.go)
)

// Timer phases.
const (
	bNone     uint8 = iota
	bConnect        // timeouts.connect
	bResponse       // timeouts.response: to the response head, then backend inactivity
	bIdle           // timeouts.idle of a pooled connection
)

// Registered, Shard, Read and Write are the socket's, the HTTP/2 stream's (h2backend.go), or
// through crypto/tls to a backend reached over TLS (backendtls.go).
func (bc *backendConn) Registered() bool     { return bc.h2 != nil || bc.FD.Registered() }
func (bc *backendConn) Shard() *evloop.Shard { return bc.sh.s }

func (bc *backendConn) Read(p []byte) (int, error) {
	if bc.h2 != nil {
		return bc.h2.read(p)
	}
	if bc.tls != nil {
		return bc.tls.Read(p)
	}
	return bc.FD.Read(p)
}

func (bc *backendConn) Write(p []byte) (int, error) {
	if bc.h2 != nil {
		return bc.h2.write(p)
	}
	if bc.tls != nil {
		return bc.tls.Write(p)
	}
	return bc.FD.Write(p)
}

func (bc *backendConn) arm(phase uint8, at int64) {
	bc.tphase = phase
	bc.Shard().Arm(&bc.timer, at)
}

// Event makes progress on the exchange the connection serves, or notices that an idle one
// was closed by the backend.
func (bc *backendConn) Event(ev evloop.Events) {
	if !bc.Registered() {
		return
	}
	bc.sh.now = bc.Shard().Now()
	switch bc.state {
	case bcConnecting:
		if bc.Ready&(evloop.Writable|evloop.Hangup) != 0 {
			bc.state = bcActive
			bc.a.connected(bc.ConnectResult())
		}
	case bcIdle:
		if ev&(evloop.Readable|evloop.Hangup) != 0 && !bc.quietTLS(ev) {
			bc.close() // closed by the backend, or bytes nobody asked for
		}
	case bcActive:
		a, gen := bc.a, bc.gen
		ex := a.ex
		if a.sent < len(a.wire) && bc.Ready&evloop.Writable != 0 {
			a.send()
		} else if a == ex.a && ex.stream && !ex.reqDone && (!ex.resp.started || ex.duplex()) && len(ex.up) > 0 && bc.Ready&evloop.Writable != 0 {
			ex.pumpBody()
		}
		if bc.gen != gen || bc.a != a {
			return
		}
		if ex.resp.started && ex.tunnelling() {
			ex.tunnelEvent()
			return
		}
		if bc.Ready&evloop.Readable != 0 {
			a.readResponse()
		}
	}
}

// Expire handles the connection's timer.
func (bc *backendConn) Expire(now int64) {
	if !bc.Registered() {
		return
	}
	bc.sh.now = now
	switch bc.tphase {
	case bConnect:
		bc.sh.st.connectFailures.Add(1)
		bc.a.failed(httpcore.Connect, errConnectTimeout)
	case bResponse:
		a := bc.a
		if a == nil {
			return
		}
		if a.ex.resp.started && a == a.ex.a {
			a.ex.responseFailed() // the backend went quiet in the middle of the body
			return
		}
		a.failed(httpcore.Timeout, nil)
	case bIdle:
		bc.close()
	case bHandshake:
		bc.handshakeTimeout()
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "connect timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

var errConnectTimeout error = timeoutError{}

func (bc *backendConn) releaseIn() {
	if bc.in != nil {
		bc.sh.s.PutBuf(bc.in)
		bc.in = nil
	}
}

// close closes the connection (taking it out of its idle list) and frees its record.
func (bc *backendConn) close() {
	if !bc.Registered() {
		return
	}
	sh := bc.sh
	if bc.h2 != nil {
		bc.closeH2()
		return
	}
	if bc.state == bcIdle {
		sh.unlinkIdle(bc)
	}
	bc.Shard().Stop(&bc.timer)
	bc.closeTLS()
	bc.FD.Close()
	bc.releaseIn()
	sh.unlinkAll(bc)
	sh.st.backendConns.Add(-1)
	sh.freeBackend(bc)
}

// linkAll and unlinkAll keep the shard's list of its backend connections.
func (sh *shard) linkAll(bc *backendConn) {
	bc.aprev, bc.anext = nil, sh.backends
	if bc.anext != nil {
		bc.anext.aprev = bc
	}
	sh.backends = bc
}

func (sh *shard) unlinkAll(bc *backendConn) {
	if bc.aprev != nil {
		bc.aprev.anext = bc.anext
	} else if sh.backends == bc {
		sh.backends = bc.anext
	}
	if bc.anext != nil {
		bc.anext.aprev = bc.aprev
	}
	bc.aprev, bc.anext = nil, nil
}

func (sh *shard) newBackend(b *upstream.Backend) *backendConn {
	var bc *backendConn
	if n := len(sh.freeB); n > 0 {
		bc = sh.freeB[n-1]
		sh.freeB = sh.freeB[:n-1]
	} else {
		bc = &backendConn{sh: sh}
		bc.timer.Init(bc)
	}
	bc.b, bc.st = b, stateOf(b)
	return bc
}

func (sh *shard) freeBackend(bc *backendConn) {
	gen := bc.gen + 1
	*bc = backendConn{sh: sh, gen: gen, timer: bc.timer}
	if len(sh.freeB) < maxFree {
		sh.freeB = append(sh.freeB, bc)
	}
}

// takeIdle returns the most recently used idle connection to the backend of st on this
// shard, or nil.
func (sh *shard) takeIdle(st *backendState) *backendConn {
	si := &st.shards[sh.id]
	n := len(si.conns)
	if n == 0 {
		return nil
	}
	bc := si.conns[n-1]
	si.conns[n-1] = nil
	si.conns = si.conns[:n-1]
	bc.state = bcActive
	// The idle timer stays where it is: the request's response timer moves it later, which
	// costs a store, where stopping and re-arming it would relink the wheel's list through
	// other connections' (cold) timers on every request.
	bc.tphase = bNone
	bc.served++
	return bc
}

// putIdle keeps bc for the next request to its backend, within keepalive.max_idle (per
// shard: the pool's share of it; 0 keeps none, a new connection per request, as the
// configuration reference says: the loader fills the default when the key is left out) and
// keepalive.max_requests, for timeouts.idle.
func (sh *shard) putIdle(bc *backendConn, ps *httpcore.Pool) {
	if bc.h2 != nil { // a stream: it ends with its exchange
		bc.close()
		return
	}
	si := &bc.st.shards[sh.id]
	n := len(sh.e.shards)
	if ps.MaxRequests > 0 && bc.served+1 >= ps.MaxRequests || len(si.conns) >= (ps.MaxIdle+n-1)/n || sh.e.stopping.Load() {
		bc.close()
		return
	}
	if bc.tls != nil && bc.Ready&evloop.Readable != 0 && !bc.quietTLS(0) {
		bc.close() // crypto/tls held more than the response: a close_notify, stray bytes
		return
	}
	bc.a, bc.state, bc.ps, bc.scan = nil, bcIdle, ps, 0
	si.conns = append(si.conns, bc)
	bc.arm(bIdle, sh.now+int64(config.Or(ps.Conf.Timeouts.Idle.Duration, config.DefaultBackendIdle)))
	if bc.Ready&(evloop.Readable|evloop.Hangup) != 0 {
		bc.close() // it spoke out of turn, or went away, already
	}
}

// unlinkIdle takes an idle connection out of its backend's stack wherever it is (the backend
// closed it, or it timed out): a scan of a few entries, off the request path.
func (sh *shard) unlinkIdle(bc *backendConn) {
	si := &bc.st.shards[sh.id]
	for i, c := range si.conns {
		if c == bc {
			last := len(si.conns) - 1
			copy(si.conns[i:], si.conns[i+1:])
			si.conns[last] = nil
			si.conns = si.conns[:last]
			break
		}
	}
	bc.state = bcActive
}

// closeIdle closes every idle connection of this shard to the backend of st.
func (sh *shard) closeIdle(st *backendState) {
	if st == nil {
		return
	}
	for si := &st.shards[sh.id]; len(si.conns) > 0; {
		si.conns[len(si.conns)-1].close()
	}
}
