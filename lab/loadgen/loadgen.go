package loadgen

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/lab/hdr"
)

// HeaderBackend is the response header the split per backend is counted from.
const HeaderBackend = "X-Ballast-Backend"

// Options describe one run. URL and C are required, and N or Duration (or both: the first
// reached ends the run).
type Options struct {
	URL         string        // http://host[:port]/path[?query]
	N           int64         // requests to send; 0 means until Duration
	C           int           // concurrent workers, one connection each
	KeepAlive   bool          // reuse connections (ab -k)
	Duration    time.Duration // time limit; 0 means until N
	URLSuffixes []string      // request i gets URLSuffixes[i mod len] (see JoinSuffix)
	Method      string        // default GET
	Headers     []string      // "Name: value"; a Host header replaces the URL's host
	Body        []byte        // request body, sent with Content-Length
	// Progress, when set, is called about every 200 ms from one goroutine with the number of
	// finished requests, and once more at the end.
	Progress func(done int64)
	// DialTimeout bounds each connection attempt (default 5 s).
	DialTimeout time.Duration
	// Trace records every request's timeline in Result.Trace and sends its index in the
	// HeaderSeq request header, so that a server can tell the requests apart (the lab's
	// emulated backends record their side). It costs an allocation per request.
	Trace bool
}

// HeaderSeq carries a traced request's index (Options.Trace).
const HeaderSeq = "X-Ballast-Seq"

// Event is one traced request's timeline, in nanoseconds since Result.Begin.
type Event struct {
	Index int64
	// Start is when a worker took the request's index, before any connect; Sent when its last
	// byte was written; Done when its response was read (or the attempt failed).
	Start, Sent, Done int64
	// Fresh says the request went out on a connection dialed for it.
	Fresh bool
	OK    bool
	// Backend is the X-Ballast-Backend header of the response.
	Backend string
}

// Result holds a run's figures. Its JSON form has exactly the keys ballast bench --json prints.
type Result struct {
	Requests      int64            `json:"requests"`
	Failed        int64            `json:"failed"`
	Non2xx        int64            `json:"non2xx"`
	Seconds       float64          `json:"seconds"`
	ThroughputRPS float64          `json:"throughput_rps"`
	P50Ms         float64          `json:"p50_ms"`
	P90Ms         float64          `json:"p90_ms"`
	P99Ms         float64          `json:"p99_ms"`
	MaxMs         float64          `json:"max_ms"`
	TTFBP50Ms     float64          `json:"ttfb_p50_ms"`
	Split         map[string]int64 `json:"split"`

	P999Ms    float64        `json:"-"`
	Bytes     int64          `json:"-"` // bytes received, headers included
	BodyBytes int64          `json:"-"` // length of the last response body (ab's "Document Length")
	Conns     int64          `json:"-"` // connections opened
	Status    map[int]int64  `json:"-"` // responses per status code
	Latency   *hdr.Histogram `json:"-"` // ns, successful responses (any status)
	TTFB      *hdr.Histogram `json:"-"` // ns, successful responses
	Options   Options        `json:"-"`
	// Begin is when the clock started; Trace (Options.Trace) lists every request by index.
	Begin time.Time `json:"-"`
	Trace []Event   `json:"-"`
}

// target is the parsed URL: where to dial and the serialised requests.
type target struct {
	addr string
	reqs [][]byte
}

func prepare(o Options) (*target, error) {
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("loadgen: only http:// URLs are supported, not %q", o.URL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("loadgen: no host in %q", o.URL)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	suffixes := o.URLSuffixes
	if len(suffixes) == 0 {
		suffixes = []string{""}
	}
	t := &target{addr: addr}
	for _, s := range suffixes {
		b, err := buildRequest(o, JoinSuffix(o.URL, s))
		if err != nil {
			return nil, err
		}
		t.reqs = append(t.reqs, b)
	}
	return t, nil
}

// buildRequest serialises one request.
func buildRequest(o Options, full string) ([]byte, error) {
	u, err := url.Parse(full)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	// The request line and Host are set by hand so that a Host header from the user does not
	// turn the request line into an absolute URI.
	var req fasthttp.Request
	req.UseHostHeader = true
	req.Header.SetRequestURI(u.RequestURI())
	req.Header.SetHost(u.Host)
	method := o.Method
	if method == "" {
		method = fasthttp.MethodGet
	}
	req.Header.SetMethod(method)
	req.Header.SetUserAgent("ballast-bench")
	req.Header.Set("Accept", "*/*")
	for _, h := range o.Headers {
		k, v, ok := strings.Cut(h, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("loadgen: bad header %q (want \"Name: value\")", h)
		}
		if strings.EqualFold(k, "Host") {
			req.UseHostHeader = true
			req.Header.SetHost(v)
			continue
		}
		req.Header.Set(k, v)
	}
	if !o.KeepAlive {
		req.SetConnectionClose()
	}
	if len(o.Body) > 0 {
		req.SetBody(o.Body)
	}
	var buf bytes.Buffer
	if _, err := req.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	return buf.Bytes(), nil
}

// countingConn counts the bytes read from its connection.
type countingConn struct {
	net.Conn
	n int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n += int64(n)
	return n, err
}

// worker is one closed-loop client with its own connection and figures.
type worker struct {
	run     *runner
	cc      countingConn
	br      *bufio.Reader
	resp    fasthttp.Response
	lat     hdr.Histogram
	ttfb    hdr.Histogram
	split   map[string]*int64
	status  map[int]int64
	reqs    int64
	failed  int64
	non2xx  int64
	conns   int64
	bodyLen int64

	mu   sync.Mutex // guards conn against the canceller
	conn net.Conn

	trace   []Event // Options.Trace
	scratch []byte  // the traced request being written

	_    [64]byte // keep done off the previous fields' cache line
	done atomic.Int64
}

type runner struct {
	o      Options
	t      *target
	dialer net.Dialer
	next   atomic.Int64
	// dispatch serialises "take the next index and write its request" when requests differ
	// (-R), so they reach the server in index order as ab's single loop sends them; without it,
	// requests started at the same instant by different workers arrive shuffled, and a
	// schedule like seed 001's wait list no longer lines up with the balancer's order.
	dispatch sync.Mutex
	stop     atomic.Bool
	deadline time.Time // zero without Duration
	begin    time.Time
	workers  []*worker
	head     bool // the method is HEAD
}

var keyBackend = []byte(HeaderBackend)

// sentHook, when a test sets it, hears the index of every request right after it was written.
var sentHook func(i int64)

// Run drives the server at o.URL and returns the figures. It returns an error only when the
// options are unusable; failed requests are counted, not returned.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.C <= 0 {
		return nil, errors.New("loadgen: concurrency must be at least 1")
	}
	if o.N <= 0 && o.Duration <= 0 {
		return nil, errors.New("loadgen: need a request count or a duration")
	}
	if o.N > 0 && int64(o.C) > o.N {
		o.C = int(o.N)
	}
	t, err := prepare(o)
	if err != nil {
		return nil, err
	}
	r := &runner{o: o, t: t, head: strings.EqualFold(o.Method, fasthttp.MethodHead)}
	r.dialer.Timeout = o.DialTimeout
	if r.dialer.Timeout <= 0 {
		r.dialer.Timeout = 5 * time.Second
	}
	for range o.C {
		w := &worker{run: r, split: map[string]*int64{}, status: map[int]int64{}}
		w.br = bufio.NewReaderSize(&w.cc, 16<<10)
		r.workers = append(r.workers, w)
	}

	// With keep-alive every worker connects before the clock starts, as wrk does, so that the
	// run measures requests rather than handshakes and each worker holds one connection.
	finished := make(chan struct{})
	started := make(chan struct{})
	var ready, wg sync.WaitGroup
	for _, w := range r.workers {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			if o.KeepAlive {
				w.dial()
			}
			ready.Done()
			<-started
			w.loop()
		}()
	}
	ready.Wait()
	begin := time.Now()
	r.begin = begin
	if o.Duration > 0 {
		r.deadline = begin.Add(o.Duration)
	}
	close(started)
	watched := make(chan struct{})
	go func() {
		r.watch(ctx, finished)
		close(watched)
	}()
	wg.Wait()
	elapsed := time.Since(begin)
	close(finished)
	<-watched // so that the last progress report below is the last one
	if o.Progress != nil {
		o.Progress(r.doneCount())
	}
	return r.result(elapsed), nil
}

func (r *runner) doneCount() int64 {
	var n int64
	for _, w := range r.workers {
		n += w.done.Load()
	}
	return n
}

// watch ends the run at the deadline or on cancellation, and reports progress.
func (r *runner) watch(ctx context.Context, finished chan struct{}) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var deadline <-chan time.Time
	if !r.deadline.IsZero() {
		tm := time.NewTimer(time.Until(r.deadline))
		defer tm.Stop()
		deadline = tm.C
	}
	for {
		select {
		case <-finished:
			return
		case <-tick.C:
			if r.o.Progress != nil {
				r.o.Progress(r.doneCount())
			}
			continue
		case <-ctx.Done():
		case <-deadline:
		}
		r.stop.Store(true)
		for _, w := range r.workers {
			w.mu.Lock()
			if w.conn != nil {
				_ = w.conn.SetDeadline(time.Now()) // interrupt requests in flight
			}
			w.mu.Unlock()
		}
		<-finished
		return
	}
}

func (w *worker) setConn(c net.Conn) {
	w.mu.Lock()
	if w.conn != nil {
		_ = w.conn.Close()
	}
	w.conn = c
	w.mu.Unlock()
	if c != nil {
		w.cc.Conn = c
		w.br.Reset(&w.cc)
		if w.run.stop.Load() {
			_ = c.SetDeadline(time.Now()) // the canceller may have missed this one
		}
	}
}

func (w *worker) loop() {
	r := w.run
	defer w.setConn(nil)
	ordered := len(r.t.reqs) > 1
	for !r.stop.Load() {
		if ordered {
			r.dispatch.Lock()
		}
		i := r.next.Add(1) - 1
		if r.o.N > 0 && i >= r.o.N {
			if ordered {
				r.dispatch.Unlock()
			}
			return
		}
		req := r.t.reqs[i%int64(len(r.t.reqs))]
		var ev Event
		if r.o.Trace {
			ev = Event{Index: i, Start: int64(time.Since(r.begin)), Fresh: w.conn == nil}
			req = w.withSeq(req, i)
		}
		start, ok := w.send(req)
		if r.o.Trace {
			ev.Sent = int64(time.Since(r.begin))
		}
		if sentHook != nil {
			sentHook(i)
		}
		if ordered {
			r.dispatch.Unlock()
		}
		if ok {
			ok = w.receive(start)
		}
		if !ok && r.stop.Load() {
			return // cut off by the end of the run: not a finished request
		}
		if r.o.Trace {
			ev.Done, ev.OK = int64(time.Since(r.begin)), ok
			if ok {
				ev.Backend = string(w.resp.Header.PeekBytes(keyBackend))
			}
			w.trace = append(w.trace, ev)
		}
		w.reqs++
		w.done.Add(1)
		if !ok {
			w.failed++
		}
	}
}

// withSeq returns req with the HeaderSeq header carrying i, in the worker's scratch buffer.
func (w *worker) withSeq(req []byte, i int64) []byte {
	end := bytes.Index(req, []byte("\r\n\r\n"))
	if end < 0 {
		return req
	}
	b := append(w.scratch[:0], req[:end+2]...)
	b = append(b, HeaderSeq...)
	b = append(b, ": "...)
	b = strconv.AppendInt(b, i, 10)
	b = append(b, "\r\n"...)
	b = append(b, req[end+2:]...)
	w.scratch = b
	return b
}

// dial connects the worker; it reports success.
func (w *worker) dial() bool {
	c, err := w.run.dialer.Dial("tcp", w.run.t.addr)
	if err != nil {
		return false
	}
	w.conns++
	w.setConn(c)
	return true
}

// send writes one request, connecting first if needed; it reports when and whether it went out.
func (w *worker) send(req []byte) (time.Time, bool) {
	if w.conn == nil && !w.dial() {
		return time.Time{}, false
	}
	start := time.Now()
	if _, err := w.conn.Write(req); err != nil {
		w.setConn(nil)
		return start, false
	}
	return start, true
}

// receive reads the response to the request sent at start; it reports whether one came back.
func (w *worker) receive(start time.Time) bool {
	if _, err := w.br.Peek(1); err != nil {
		w.setConn(nil)
		return false
	}
	first := time.Since(start)
	w.resp.Reset()
	w.resp.SkipBody = w.run.head // a response to HEAD has headers only
	if err := w.resp.Read(w.br); err != nil {
		w.setConn(nil)
		return false
	}
	w.lat.Record(int64(time.Since(start)))
	w.ttfb.Record(int64(first))
	code := w.resp.StatusCode()
	if code < 200 || code > 299 {
		w.non2xx++
	}
	w.status[code]++
	if name := w.resp.Header.PeekBytes(keyBackend); len(name) > 0 {
		// A lookup by string(bytes) does not allocate; an increment through it would.
		if c := w.split[string(name)]; c != nil {
			*c++
		} else {
			w.split[string(name)] = &[]int64{1}[0]
		}
	}
	w.bodyLen = int64(len(w.resp.Body()))
	if !w.run.o.KeepAlive || w.resp.ConnectionClose() {
		w.setConn(nil)
	}
	return true
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

func (r *runner) result(elapsed time.Duration) *Result {
	res := &Result{
		Seconds: elapsed.Seconds(),
		Split:   map[string]int64{},
		Status:  map[int]int64{},
		Latency: &hdr.Histogram{},
		TTFB:    &hdr.Histogram{},
		Options: r.o,
		Begin:   r.begin,
	}
	for _, w := range r.workers {
		res.Trace = append(res.Trace, w.trace...)
		res.Requests += w.reqs
		res.Failed += w.failed
		res.Non2xx += w.non2xx
		res.Conns += w.conns
		res.Bytes += w.cc.n
		if w.bodyLen > 0 {
			res.BodyBytes = w.bodyLen
		}
		res.Latency.Merge(&w.lat)
		res.TTFB.Merge(&w.ttfb)
		for k, v := range w.split {
			res.Split[k] += *v
		}
		for k, v := range w.status {
			res.Status[k] += v
		}
	}
	if res.Seconds > 0 {
		res.ThroughputRPS = float64(res.Requests) / res.Seconds
	}
	res.P50Ms = ms(res.Latency.Quantile(0.50))
	res.P90Ms = ms(res.Latency.Quantile(0.90))
	res.P99Ms = ms(res.Latency.Quantile(0.99))
	res.P999Ms = ms(res.Latency.Quantile(0.999))
	res.MaxMs = ms(res.Latency.Max())
	res.TTFBP50Ms = ms(res.TTFB.Quantile(0.50))
	slices.SortFunc(res.Trace, func(a, b Event) int { return cmp.Compare(a.Index, b.Index) })
	return res
}
