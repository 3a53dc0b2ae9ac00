package httpproxy

import (
	"errors"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/sockio"
)

// parkAfter is how long a keep-alive client connection waits for its next request in its own
// goroutine before it is parked in the listener's sockio.Poller: the goroutine ends and
// fasthttp returns the connection's buffers and request context to its pools, so an idle
// connection costs its socket and about a kilobyte instead of a stack and ~25 KiB of
// buffers. A busy connection never waits that long, so parking costs nothing per request;
// the price (a new goroutine and fasthttp's per-connection setup, a few µs) is paid once per
// idle period.
const parkAfter = 250 * time.Millisecond

// errParked ends fasthttp's serving loop of a connection whose idle wait outlasted parkAfter.
// fasthttp drops a keep-alive connection silently when nothing of a next request was read,
// and then calls Close, which parks it (keepConn.Close).
var errParked = errors.New("httpproxy: idle connection parked")

// States of a keepConn. Only the connection's serving goroutine moves it, except that Close
// (which Shutdown may call from elsewhere) moves parking to parked.
const (
	kcActive  int32 = iota // reading or answering a request
	kcDone                 // the handler returned: the next read deadline opens the idle wait
	kcIdle                 // waiting for the next request under the idle timeout
	kcParking              // the wait outlasted parkAfter: Read returned errParked, Close parks
	kcParked               // in the poller, or being woken
)

// keepConn is a plain-HTTP client connection as fasthttp serves it. It tells the idle wait
// between two requests from every other read by its sequence (the handler returned, then
// fasthttp sets the idle deadline, then reads), caps that wait at parkAfter, and turns its
// expiry into errParked. The idle timeout itself still applies: fasthttp's deadline while the
// goroutine waits, the poller's once parked.
type keepConn struct {
	net.Conn // sockio.Conn, or the max_conns_per_client count around one
	rc       syscall.RawConn
	ls       *listenerState

	state     atomic.Int32
	idleUntil time.Time // the idle deadline of the current wait
	requests  int       // served on this connection, across parkings
}

// parkListener hands out keepConns for the listener's poller.
type parkListener struct {
	net.Listener
	ls *listenerState
}

func (l parkListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if k, ok := l.wrap(c); ok {
		return k, nil
	}
	return c, nil
}

// wrap makes c a keepConn if a socket lies under it.
func (l parkListener) wrap(c net.Conn) (*keepConn, bool) {
	if sc := sockConnOf(c); sc != nil && sc.RawConn() != nil {
		return &keepConn{Conn: c, rc: sc.RawConn(), ls: l.ls}, true
	}
	return nil, false
}

// sockConnOf finds the socket under the wrappers of c, or nil.
func sockConnOf(c net.Conn) *sockio.Conn {
	for {
		switch x := c.(type) {
		case *sockio.Conn:
			return x
		case *countedConn:
			c = x.Conn
		case *headConn:
			c = x.Conn
		default:
			return nil
		}
	}
}

// SetReadDeadline opens the idle wait when the handler has returned (fasthttp then sets the
// idle deadline before it waits for the next request), arming parkAfter if that is sooner.
func (k *keepConn) SetReadDeadline(t time.Time) error {
	if !t.IsZero() && k.state.CompareAndSwap(kcDone, kcIdle) {
		k.idleUntil = t
		if w := time.Now().Add(parkAfter); w.Before(t) {
			t = w
		}
		return k.Conn.SetReadDeadline(t)
	}
	if !t.IsZero() {
		k.state.CompareAndSwap(kcIdle, kcActive) // a pipelined request was already buffered
	}
	return k.Conn.SetReadDeadline(t)
}

func (k *keepConn) Read(p []byte) (int, error) {
	n, err := k.Conn.Read(p)
	if k.state.Load() != kcIdle {
		return n, err
	}
	if n > 0 {
		k.state.Store(kcActive)
		return n, err
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && time.Now().Before(k.idleUntil) {
		k.state.Store(kcParking)
		return 0, errParked
	}
	return n, err
}

// Close parks the connection after errParked ended its serving loop, and closes it otherwise.
func (k *keepConn) Close() error {
	if k.state.CompareAndSwap(kcParking, kcParked) {
		_ = k.Conn.SetDeadline(time.Time{}) // the parked wait has no deadline of the runtime's
		if k.ls.poller.Park(k, k.rc, k.idleUntil) {
			k.ls.proxy.parked()
			return nil
		}
	}
	return k.Conn.Close()
}

// CloseWrite half-closes the connection, which the tunnel relies on.
func (k *keepConn) CloseWrite() error {
	if cw, ok := k.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// handleAndPark is the handler of a listener with a poller: after each request on a keepConn
// that was not hijacked (a tunnel), the next idle wait may park the connection. It also
// enforces max_keepalive_requests across parkings, which restart fasthttp's own count.
func (ls *listenerState) handleAndPark(ctx *fasthttp.RequestCtx) {
	ls.handle(ctx)
	k, ok := ctx.Conn().(*keepConn)
	if !ok || ctx.Hijacked() {
		return
	}
	k.requests++
	if (ls.maxRequests > 0 && k.requests >= ls.maxRequests) || ls.proxy.stopping.Load() {
		ctx.SetConnectionClose()
		return
	}
	k.state.Store(kcDone)
}

// wakeWorkerIdle is how long a goroutine that served a woken connection waits for the next
// one before it ends.
const wakeWorkerIdle = time.Second

// wake hands a parked connection that became readable to a waiting worker, or to a new one.
// Workers are reused because a fresh goroutine grows its stack to the request path's depth
// by copying it several times, which costs more than the rest of the wake.
func (ls *listenerState) wake(c net.Conn) {
	select {
	case ls.wakeq <- c:
	default:
		go ls.wakeWorker(c)
	}
}

func (ls *listenerState) wakeWorker(c net.Conn) {
	t := time.NewTimer(wakeWorkerIdle)
	defer t.Stop()
	for {
		ls.serveWoken(c)
		t.Reset(wakeWorkerIdle)
		select {
		case c = <-ls.wakeq:
		case <-t.C:
			return
		}
	}
}

// serveWoken serves a woken connection until it closes or parks again.
func (ls *listenerState) serveWoken(c net.Conn) {
	k := c.(*keepConn)
	if ls.proxy.stopping.Load() {
		_ = k.Conn.Close()
		return
	}
	k.state.Store(kcActive)
	_ = ls.server.ServeConn(k) // closes or parks k when done
}

// A burst of connections that went idle leaves the memory it used while active in the heap:
// free, or held by fasthttp's sync.Pools until the second collection, and returned to the
// system only as the runtime's scavenger gets to it, so the process's RSS stays at the
// burst's high-water mark for minutes. After releaseBurst parkings the proxy collects twice
// and returns the free memory (debug.FreeOSMemory) once the parkings have stopped coming for
// a parkAfter, or after releaseWait if they keep coming. The burst may only have paused, so
// a release is followed by another once releaseBurst/8 more connections have parked (and so
// on while a release finds parkings still coming): how a burst arrives does not decide what
// stays mapped. Releases are spaced by releaseGap, or by releaseCost times the previous
// one's duration when that is longer, so that a proxy whose connections park all the time
// spends at most about 2 % of its time on them: two collections of a small heap cost
// milliseconds.
const (
	releaseBurst = 1024
	releaseWait  = 8 * parkAfter
	releaseGap   = time.Second
	releaseCost  = 50
)

// parked counts one parking and starts a release after a burst of them; one runs at a time.
func (p *Proxy) parked() {
	n, need := p.parkedSince.Add(1), int64(releaseBurst)
	if p.releaseEarly.Load() {
		need = releaseBurst / 8
	}
	if n < need || !p.releasing.CompareAndSwap(false, true) {
		return
	}
	go p.release()
}

// release returns the memory of a burst that went idle, once parkings stop coming.
func (p *Proxy) release() {
	defer p.releasing.Store(false)
	if wait := time.Duration(p.nextRelease.Load() - time.Now().UnixNano()); wait > 0 {
		time.Sleep(wait)
	}
	quiet := false
	for range releaseWait / parkAfter {
		n := p.parkedSince.Load()
		time.Sleep(parkAfter)
		if quiet = p.parkedSince.Load() == n; quiet {
			break
		}
	}
	p.parkedSince.Store(0)
	// Parkings still coming, or the first release of a burst: its rest is released too.
	p.releaseEarly.Store(!quiet || !p.releaseEarly.Load())
	start := time.Now()
	runtime.GC() // the pools' contents move to their victim caches, freed by the next one
	debug.FreeOSMemory()
	took := time.Since(start)
	p.nextRelease.Store(time.Now().Add(max(releaseGap, releaseCost*took)).UnixNano())
	p.releases.Add(1)
}
