package backend

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Header names carrying the backend's name. Ballast's proxy sets X-Ballast-Backend itself when
// expose_backend is on, so the name is also sent under a header the proxy leaves alone.
const (
	HeaderBackend = "X-Ballast-Backend"
	HeaderName    = "X-Backend-Name"
	// HeaderSeq carries a traced request's index (the load generator's Options.Trace).
	HeaderSeq = "X-Ballast-Seq"
)

var (
	keyBackend = []byte(HeaderBackend)
	keyName    = []byte(HeaderName)
	keySeq     = []byte(HeaderSeq)
	textPlain  = []byte("text/plain")
)

// maxCredit bounds how far behind the real clock a queued request's virtual start may be. On
// this shared 2-core machine stalls of a few hundred milliseconds happen (a 100 ms cap lost
// 18 % of a 3 s run once); a second covers them, while a stopped process is still not repaid.
const maxCredit = time.Second

// Stats are a Server's counters, summed over its backends.
type Stats struct {
	Conns     int64 // connections accepted
	Requests  int64 // requests received
	Completed int64 // responses sent (including 500s)
	Errors    int64 // 500s sent by ErrorRate
	Resets    int64 // connections reset by ResetRate
	InService int64 // requests holding a worker now
	Waiting   int64 // requests waiting in a FIFO now
	Direct    int64 // requests that found a worker free (the rest queued): saturation check
}

type counters struct {
	conns, requests, completed, errors, resets, inService, waiting, direct atomic.Int64
}

// Server is one or more emulated backends sharing a lifetime.
type Server struct {
	insts     []*instance
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	st        counters

	connMu sync.Mutex
	conns  map[net.Conn]struct{}

	trace atomic.Pointer[tracer] // StartTrace
}

// Arrival is one traced request as a backend saw it.
type Arrival struct {
	// Seq is the request's HeaderSeq, -1 when it carried none.
	Seq     int64
	Backend string
	// Arrived is when the handler got the request; Started when its service began (virtual
	// start, which a queued request may place before the real moment it got its worker); Done
	// when the service ended and the response was handed to the server to write.
	Arrived, Started, Done time.Time
	// Service is the service time the request asked for or drew.
	Service time.Duration
	// Queued says it waited for a worker; FreshConn that it was the first request on its
	// connection (the proxy opened that connection for it).
	Queued, FreshConn bool
}

type tracer struct {
	mu  sync.Mutex
	out []Arrival
}

// StartTrace starts recording every request (Trace returns them); it drops what an earlier
// trace recorded. Tracing costs a lock and an allocation per request.
func (s *Server) StartTrace() { s.trace.Store(&tracer{}) }

// StopTrace stops recording (and drops the records).
func (s *Server) StopTrace() { s.trace.Store(nil) }

// Trace returns the requests recorded since StartTrace, in the order their service ended.
func (s *Server) Trace() []Arrival {
	t := s.trace.Load()
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.out)
}

// instance is one backend: one listener, one FIFO of K workers.
type instance struct {
	s      *Server
	cfg    Config
	name   []byte
	body   []byte
	ln     net.Listener
	srv    *fasthttp.Server
	fifo   *fifo
	timers []*time.Timer // per worker slot, reused so that waiting allocates nothing
	base   time.Time
	served atomic.Uint64 // requests received, numbering them for Fails
	rngMu  sync.Mutex
	smp    *sampler

	// onStart, set only by tests before serving, runs when a request takes its worker.
	onStart func(*fasthttp.RequestCtx)
}

// Validate reports whether c is usable, after defaults.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// Listen starts one backend on addr (host:port; port 0 picks a free one).
func Listen(addr string, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return Serve(ln, cfg), nil
}

// Serve starts one backend on ln, which the Server then owns. It panics if cfg is invalid
// (see Config.Validate), since that is a programming error.
func Serve(ln net.Listener, cfg Config) *Server {
	c, err := cfg.withDefaults()
	if err != nil {
		panic(err)
	}
	s := newServer()
	s.start(ln, c, c.Name)
	return s
}

// ListenPorts starts one backend per port from..to on host, each named NAME-PORT, for the
// many-backends scenario. Every backend gets its own K workers and its own random stream.
func ListenPorts(host string, from, to int, cfg Config) (*Server, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if from < 1 || to > 65535 || from > to {
		return nil, fmt.Errorf("backend: bad port range %d-%d", from, to)
	}
	s := newServer()
	for p := from; p <= to; p++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			s.Close()
			return nil, err
		}
		pc := c
		pc.Seed = c.Seed + uint64(p-from)
		s.start(ln, pc, c.Name+"-"+strconv.Itoa(p))
	}
	return s, nil
}

func newServer() *Server {
	return &Server{done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
}

func (s *Server) start(ln net.Listener, c Config, name string) {
	in := &instance{
		s:      s,
		cfg:    c,
		name:   []byte(name),
		body:   makeBody(c.Body),
		ln:     ln,
		fifo:   newFIFO(c.Workers),
		timers: make([]*time.Timer, c.Workers),
		base:   time.Now(),
		smp:    newSampler(c),
	}
	for i := range in.timers {
		in.timers[i] = time.NewTimer(time.Hour)
		in.timers[i].Stop()
	}
	in.srv = &fasthttp.Server{
		Handler:               in.handle,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		ConnState:             s.connState,
		Logger:                quiet{},
	}
	s.insts = append(s.insts, in)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = in.srv.Serve(ln)
	}()
}

// makeBody returns n bytes: a recognisable filler ending in a newline.
func makeBody(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = "ballast."[i%8]
	}
	if n > 0 {
		b[n-1] = '\n'
	}
	return b
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

func (s *Server) connState(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateNew:
		s.st.conns.Add(1)
		s.connMu.Lock()
		s.conns[c] = struct{}{}
		s.connMu.Unlock()
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		s.connMu.Lock()
		delete(s.conns, c)
		s.connMu.Unlock()
	}
}

// Addr is the address of the first (usually only) backend.
func (s *Server) Addr() string { return s.insts[0].ln.Addr().String() }

// Addrs lists every backend's address, in port order for ListenPorts.
func (s *Server) Addrs() []string {
	out := make([]string, len(s.insts))
	for i, in := range s.insts {
		out[i] = in.ln.Addr().String()
	}
	return out
}

// Names lists every backend's name, in the order of Addrs.
func (s *Server) Names() []string {
	out := make([]string, len(s.insts))
	for i, in := range s.insts {
		out[i] = string(in.name)
	}
	return out
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	return Stats{
		Conns:     s.st.conns.Load(),
		Requests:  s.st.requests.Load(),
		Completed: s.st.completed.Load(),
		Errors:    s.st.errors.Load(),
		Resets:    s.st.resets.Load(),
		InService: s.st.inService.Load(),
		Waiting:   s.st.waiting.Load(),
		Direct:    s.st.direct.Load(),
	}
}

// Close stops every backend: listeners are closed, requests in service are answered at once,
// and open connections are closed. It waits for the accept loops to end.
func (s *Server) Close() error {
	var errs []error
	s.closeOnce.Do(func() {
		close(s.done)
		for _, in := range s.insts {
			if err := in.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
		s.connMu.Lock()
		for c := range s.conns {
			_ = c.Close()
		}
		s.connMu.Unlock()
		s.wg.Wait()
	})
	return errors.Join(errs...)
}

// now is the virtual clock: nanoseconds since the backend started, monotonic.
func (in *instance) now() int64 { return int64(time.Since(in.base)) }

// serviceTime reads ?wait=SECONDS or ?ms=MILLISECONDS, else draws from the distribution.
func (in *instance) serviceTime(ctx *fasthttp.RequestCtx) time.Duration {
	if len(ctx.URI().QueryString()) > 0 {
		args := ctx.QueryArgs()
		if v := args.Peek("wait"); len(v) > 0 {
			if f, err := fasthttp.ParseUfloat(v); err == nil {
				return time.Duration(f * float64(time.Second))
			}
		}
		if v := args.Peek("ms"); len(v) > 0 {
			if f, err := fasthttp.ParseUfloat(v); err == nil {
				return time.Duration(f * float64(time.Millisecond))
			}
		}
	}
	if in.cfg.Dist == DistFixed {
		return in.cfg.Service
	}
	in.rngMu.Lock()
	d := in.smp.draw()
	in.rngMu.Unlock()
	return d
}

// roll reports whether an event of probability p happens to this request.
func (in *instance) roll(p float64) bool {
	if p <= 0 {
		return false
	}
	in.rngMu.Lock()
	x := in.smp.rng.Float64()
	in.rngMu.Unlock()
	return x < p
}

// Fails reports whether request number n (from 0, in arrival order) of a backend with this
// seed is answered 500 at ErrorRate rate. It is a fixed hash of seed and n, not a draw, so a
// test knows which requests fail, and where the failure runs are, before it sends them.
func Fails(seed uint64, rate float64, n uint64) bool {
	if rate <= 0 {
		return false
	}
	z := seed*0x9e3779b97f4a7c15 + n + 1 // splitmix64 over (seed, n)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11)/(1<<53) < rate
}

func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close with RST, as a crashed backend would
	}
}

func noHijack(net.Conn) {}

func (in *instance) handle(ctx *fasthttp.RequestCtx) {
	tr := in.s.trace.Load()
	st := &in.s.st
	st.requests.Add(1)
	index := in.served.Add(1) - 1
	if in.roll(in.cfg.ResetRate) {
		st.resets.Add(1)
		resetConn(ctx.Conn())
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(noHijack)
		return
	}
	d := in.serviceTime(ctx)

	// A request that found its worker free starts on arrival. One that had to queue starts
	// when the earliest worker became free in virtual time, even if the real clock is later
	// (timers fire late, the machine stalls): the backend was saturated all along, so it owes
	// the time (fifo.acquire; the credit is capped).
	slot, arrival, start, queued := in.fifo.acquire(&st.waiting, in.now, int64(d))
	st.inService.Add(1)
	if in.onStart != nil {
		in.onStart(ctx)
	}
	if !queued {
		st.direct.Add(1)
	}
	deadline := start + int64(d)
	in.wait(slot, deadline)
	st.inService.Add(-1)
	in.fifo.release(slot, in.now())
	if tr != nil {
		in.record(tr, ctx, arrival, start, d, queued)
	}

	h := &ctx.Response.Header
	h.SetContentTypeBytes(textPlain)
	h.SetCanonical(keyBackend, in.name)
	h.SetCanonical(keyName, in.name)
	if Fails(in.cfg.Seed, in.cfg.ErrorRate, index) {
		st.errors.Add(1)
		ctx.SetStatusCode(fasthttp.StatusInternalServerError)
	}
	ctx.Response.SetBodyRaw(in.body)
	st.completed.Add(1)
}

// record adds one request to the trace.
func (in *instance) record(tr *tracer, ctx *fasthttp.RequestCtx, arrival, start int64, d time.Duration, queued bool) {
	a := Arrival{Seq: -1, Backend: string(in.name), Service: d, Queued: queued, FreshConn: ctx.ConnRequestNum() == 1,
		Arrived: in.base.Add(time.Duration(arrival)), Started: in.base.Add(time.Duration(start)), Done: time.Now()}
	if v := ctx.Request.Header.PeekBytes(keySeq); len(v) > 0 {
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			a.Seq = n
		}
	}
	tr.mu.Lock()
	tr.out = append(tr.out, a)
	tr.mu.Unlock()
}

// wait blocks until the real clock passes deadline (virtual ns) or the server closes.
func (in *instance) wait(slot int, deadline int64) {
	rem := time.Duration(deadline - in.now())
	if rem <= 0 {
		return
	}
	if in.cfg.Spin {
		rem -= time.Millisecond // sleep's granularity; spin through the rest
	}
	if rem > 0 {
		t := in.timers[slot]
		t.Reset(rem)
		select {
		case <-t.C:
		case <-in.s.done:
			t.Stop()
			return
		}
	}
	for in.cfg.Spin && in.now() < deadline {
		runtime.Gosched()
	}
}
