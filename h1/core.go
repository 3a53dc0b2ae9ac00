package h1

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/accesslog"
	"ballast/balance"
	"ballast/config"
	"ballast/upstream"
)

// This file is the engine's one boundary to HTTP semantics: where a parsed request is routed,
// its forwarded head is given the forwarding-header rules, a backend is picked, the outcome of
// an attempt decides what happens next, the response head gets its rules and the access-log
// line is written. The rest of the package is framing and I/O. What is here is the minimal
// implementation (routes by listener, host and path prefix; upstream.Pool; the replay rules of
// package httpproxy); the protocol-neutral core (package httpcore) replaces it, and nothing
// outside this file changes when it does.
//
// The boundary's operations, all called on a shard's goroutine, none allocating on the
// keep-alive path:
//
//	(*table).route        request head → pool, or an answer of Ballast's own
//	(*poolState).forward  forwarding-header rules on the request head
//	(*poolState).key      the balancer's hash key
//	(*poolState).acquire  pick a backend (or wait in the backlog: upstream.Ticket)
//	(*poolState).decide   after a failed attempt: fresh connection, another backend, or fail
//	(*poolState).hedge    whether a hedged copy goes out now (hedged, tryAcquire)
//	(*table).respond      response-header rules
//	(*poolState).release  the attempt's outcome to the pool and the counters
//	(*table).logAccess    the access-log line

// table is one immutable configuration: routes resolved to pool states. An exchange keeps the
// table it started with, so a Swap never changes a request already running.
type table struct {
	routes    []route
	listeners map[string]*config.Listener
	access    bool
	needPath  bool
}

type route struct {
	listener string
	host     []byte // lower case, no port; empty = any
	prefix   []byte
	ps       *poolState
}

// poolState is what a request needs to know about its pool, prepared once per table.
type poolState struct {
	name           string
	pool           *upstream.Pool
	needsKey       bool
	carp           bool
	hashSource     string
	hashName       string
	attempts       int
	nonIdempotent  bool
	hedgeDelay     time.Duration // 0: no hedging
	maxHedges      int
	respTimeout    time.Duration
	connectTimeout time.Duration
	backendIdle    time.Duration
	include5xx     bool
	maxIdle        int // per backend and shard
	maxRequests    int
	budget         *retryBudget
	counters       *poolCounters
}

type poolCounters struct{ retries, hedges atomic.Uint64 }

// backendSlot is the engine's attachment slot on upstream backends: per-shard idle
// connections and the status counters.
var backendSlot = upstream.NewSlot()

// backendState is what the engine keeps per backend, attached to it so that it survives
// reloads.
type backendState struct {
	shards   []shardIdle
	statuses [6]atomic.Uint64
	// resolved caches the address of a backend named by host name (resolved off the shard).
	resolved atomic.Pointer[resolvedAddr]
}

// resolvedAddr is a host name's address and the shard clock reading it is good until.
type resolvedAddr struct {
	ap    netip.AddrPort
	until int64
}

// dnsTTL is how long a resolved backend address is used before it is looked up again.
const dnsTTL = int64(30 * time.Second)

// shardIdle is one shard's idle connections to a backend, touched by that shard only, as a
// stack (the most recently used on top: taking and returning one touches no other
// connection's record); padded so that two shards never share a cache line.
type shardIdle struct {
	conns []*backendConn
	_     [40]byte
}

func stateOf(b *upstream.Backend) *backendState {
	s, _ := b.Attachment(backendSlot).(*backendState)
	return s
}

func buildTable(cfg *config.Config, pools map[string]*upstream.Pool, prev *table, shards int) (*table, error) {
	if cfg == nil {
		return nil, errors.New("h1: nil config")
	}
	t := &table{listeners: map[string]*config.Listener{}, access: cfg.Logging.Access}
	for i := range cfg.Listeners {
		t.listeners[cfg.Listeners[i].Name] = &cfg.Listeners[i]
	}
	states := map[string]*poolState{}
	for i := range cfg.Pools {
		pc := &cfg.Pools[i]
		if pool := pools[pc.Name]; pool != nil {
			states[pc.Name] = newPoolState(pc, pool, prev, shards)
		}
	}
	for _, r := range cfg.Routes {
		ps := states[r.Pool]
		if ps == nil {
			return nil, fmt.Errorf("h1: route %s%s uses pool %q, which is not configured", r.Host, r.PathPrefix, r.Pool)
		}
		if r.Listener != "" && t.listeners[r.Listener] == nil {
			return nil, fmt.Errorf("h1: route %s%s names unknown listener %q", r.Host, r.PathPrefix, r.Listener)
		}
		host := strings.ToLower(r.Host)
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		t.routes = append(t.routes, route{listener: r.Listener, host: []byte(host), prefix: []byte(r.PathPrefix), ps: ps})
		t.needPath = t.needPath || r.PathPrefix != ""
	}
	return t, nil
}

func newPoolState(pc *config.Pool, pool *upstream.Pool, prev *table, shards int) *poolState {
	ps := &poolState{
		name:           pc.Name,
		pool:           pool,
		hashSource:     pc.HashKey.Source,
		hashName:       pc.HashKey.Name,
		attempts:       min(max(pc.Retries.Attempts, 1), config.MaxAttempts),
		nonIdempotent:  pc.Retries.NonIdempotent,
		hedgeDelay:     pc.Hedge.Delay.Duration,
		maxHedges:      min(pc.Hedge.MaxHedges, config.MaxHedges),
		respTimeout:    config.Or(pc.Timeouts.Response.Duration, config.DefaultResponseTimeout),
		connectTimeout: config.Or(pc.Timeouts.Connect.Duration, config.DefaultConnectTimeout),
		backendIdle:    config.Or(pc.Timeouts.Idle.Duration, config.DefaultBackendIdle),
		include5xx:     pc.Outlier.Include5xx,
		maxRequests:    pc.KeepAlive.MaxRequests,
	}
	if ps.hedgeDelay > 0 && ps.maxHedges <= 0 {
		ps.maxHedges = config.DefaultMaxHedges
	}
	maxIdle := pc.KeepAlive.MaxIdle
	if maxIdle <= 0 {
		maxIdle = config.DefaultMaxIdle
	}
	ps.maxIdle = (maxIdle + shards - 1) / shards
	if a, err := balance.Lookup(pc.Balancer); err == nil {
		ps.needsKey = a.Caps.NeedsKey
		ps.carp = a.Name == "carp"
	}
	if prev != nil { // the budget and counters belong to the pool's name across reloads
		for _, r := range prev.routes {
			if r.ps.name == pc.Name {
				ps.budget, ps.counters = r.ps.budget, r.ps.counters
				break
			}
		}
	}
	if ps.budget == nil || ps.budget.ratio != pc.Retries.Budget {
		ps.budget = newRetryBudget(pc.Retries.Budget)
	}
	if ps.counters == nil {
		ps.counters = new(poolCounters)
	}
	pool.Attach(backendSlot, func(*upstream.Backend) any {
		return &backendState{shards: make([]shardIdle, shards)}
	})
	return ps
}

// answer is a response of Ballast's own: status, message, and whether the connection must
// close after it (the request's framing can no longer be trusted).
type answer struct {
	status int
	msg    string
	close  bool
	allow  bool // add Allow (405 to CONNECT)
	retry  bool // add Retry-After: 1 (503 from the backlog)
}

// route returns the pool of the first route for listener, host and normalised path, or the
// answer (404) when none matches.
func (t *table) route(listener string, host, path []byte) (*poolState, answer) {
	for i := range t.routes {
		r := &t.routes[i]
		if r.listener != "" && r.listener != listener {
			continue
		}
		if len(r.host) > 0 && !hostEqual(host, r.host) {
			continue
		}
		if !bytes.HasPrefix(path, r.prefix) {
			continue
		}
		return r.ps, answer{}
	}
	return nil, answer{status: fasthttp.StatusNotFound, msg: "ballast: no route\n"}
}

// hostEqual compares a Host header (any case, optional port) with a lower-case route host.
func hostEqual(hdr, want []byte) bool {
	if i := bytes.LastIndexByte(hdr, ':'); i >= 0 && bytes.IndexByte(hdr[i:], ']') < 0 {
		hdr = hdr[:i]
	}
	if len(hdr) != len(want) {
		return false
	}
	for i := range hdr {
		c := hdr[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

// forward applies the forwarding-header rules to a request head about to go to a backend of
// ps: hop-by-hop fields out (and the ones Connection names; Connection and Upgrade stay for
// a protocol switch), HTTP/1.0 with a Host sent as HTTP/1.1 (the backend keeps its
// connection), X-Forwarded-For and Forwarded appended, X-Forwarded-Proto and -Host set.
// scratch is the caller's buffer, returned grown.
func (ps *poolState) forward(h *fasthttp.RequestHeader, client netip.Addr, tls, upgrade bool, scratch []byte) []byte {
	sc := scanHeaders(h.All())
	stripHopByHop(h, sc.hop, upgrade)
	h.ResetConnectionClose()
	if len(h.Host()) > 0 && bytes.Equal(h.Protocol(), http10) {
		h.SetProtocolBytes(http11)
	}
	return addForwardingHeaders(h, sc, client, tls, scratch)
}

// key is the request's hash key for the pool's balancer.
func (ps *poolState) key(h *fasthttp.RequestHeader, client netip.Addr) uint64 {
	if !ps.needsKey {
		return 0
	}
	switch ps.hashSource {
	case "source_ip":
		return balance.HashSourceIP(client)
	case "header":
		if v := h.Peek(ps.hashName); len(v) > 0 {
			return balance.HashHeader(v)
		}
		return rand.Uint64()
	case "cookie":
		if v := h.Cookie(ps.hashName); len(v) > 0 {
			return balance.HashCookie(v)
		}
		return rand.Uint64()
	}
	if ps.carp {
		return balance.CARPURLHash(h.RequestURI())
	}
	return balance.HashURI(h.RequestURI(), false)
}

// tryAcquire picks a backend only if one can take the request now (a hedged copy, or a retry
// beside running copies: neither is worth a wait in the backlog).
func (ps *poolState) tryAcquire(key uint64, tried balance.Tried) *upstream.Backend {
	b, err := ps.pool.TryAcquire(key, tried)
	if err != nil {
		return nil
	}
	return b
}

// hedge reports whether another copy of a request may be sent now (hedge.max_hedges not
// reached and the retry budget not spent), counting it.
func (ps *poolState) hedge(sent int, now int64) bool {
	if sent >= ps.maxHedges || !ps.budget.spend(now/int64(time.Second)) {
		return false
	}
	ps.counters.hedges.Add(1)
	return true
}

// hedged reports whether a request is hedged: hedge.delay set, idempotent, a body that can be
// sent again.
func (ps *poolState) hedged(idem, streamed, upgrade bool) bool {
	return ps.hedgeDelay > 0 && idem && !streamed && !upgrade
}

// acquire picks a backend with a reserved slot, or queues the request in t (g hears the
// grant), or fails (answer).
func (ps *poolState) acquire(key uint64, tried balance.Tried, t *upstream.Ticket, g upstream.Granted) (*upstream.Backend, bool, answer) {
	b, queued, err := ps.pool.AcquireAsync(key, tried, t, g)
	if err != nil {
		return nil, false, acquireAnswer(err)
	}
	return b, queued, answer{}
}

func acquireAnswer(err error) answer {
	switch {
	case errors.Is(err, upstream.ErrQueueFull):
		return answer{status: fasthttp.StatusServiceUnavailable, msg: "ballast: backlog queue full\n", retry: true}
	case errors.Is(err, upstream.ErrQueueTimeout):
		return answer{status: fasthttp.StatusServiceUnavailable, msg: "ballast: timed out in the backlog queue\n", retry: true}
	case errors.Is(err, upstream.ErrNoBackend):
		return answer{status: fasthttp.StatusServiceUnavailable, msg: "ballast: no backend available\n"}
	}
	return answer{status: fasthttp.StatusServiceUnavailable, msg: "ballast: " + err.Error() + "\n"}
}

// outcome is what the engine tells the core about one failed attempt.
type outcome struct {
	class      errClass
	reused     bool // the connection came from the idle pool
	idempotent bool // RFC 9110 §9.2.2
	untouched  bool // the request can be sent again whole (nothing of a streamed body consumed)
}

// decision is what the core says to do after a failed attempt.
type decision uint8

const (
	decideFail  decision = iota // answer the client with the class's status
	decideFresh                 // the keep-alive race: same pool, a fresh connection
	decideRetry                 // another backend
)

// decide applies the replay rules: a request any byte of which reached a backend socket is
// sent again only if idempotent; a keep-alive race (a pooled connection that failed) is
// retried on a fresh connection up to twice without counting as an attempt; other
// failures go to another backend within retries.attempts and the pool's retry budget.
func (ps *poolState) decide(o outcome, try, stale int, now int64) decision {
	if !o.untouched {
		return decideFail
	}
	fresh := o.reused && (o.class == errStale || o.class == errClosed && o.idempotent)
	if stale < 2 && fresh {
		return decideFresh
	}
	retryable := false
	switch o.class {
	case errConnect:
		retryable = true
	case errStale:
		retryable = ps.nonIdempotent || o.idempotent
	case errClosed:
		retryable = o.idempotent
	}
	if try < ps.attempts && retryable && ps.budget.spend(now/int64(time.Second)) {
		ps.counters.retries.Add(1)
		return decideRetry
	}
	return decideFail
}

// failed reports whether an attempt counts as the backend's failure for outlier detection.
func (ps *poolState) failed(class errClass, reused, eof bool, status int) bool {
	switch class {
	case errClient, errClientTimeout, errCancelled, errStale:
		return false
	case errNone:
		return ps.include5xx && status >= 500
	case errClosed:
		return !reused || !eof // a pooled connection closed as the request went out: the race
	}
	return true
}

// release ends an attempt's hold on b: its status class counted (0: no response) and the slot
// back to the pool with the latency and the outcome.
func (ps *poolState) release(b *upstream.Backend, status int, latency time.Duration, failed bool) {
	c := status / 100
	if c < 1 || c > 5 {
		c = 0
	}
	if s := stateOf(b); s != nil {
		s.statuses[c].Add(1)
	}
	ps.pool.Release(b, latency, failed)
}

// respMode says how the engine frames the response for its client, for respond.
type respMode struct {
	chunk   bool // the body is re-framed as chunked (it was delimited by the backend's close)
	unchunk bool // a chunked body goes to an HTTP/1.0 client delimited by the close
	upgrade bool // a 101: Upgrade stays (Connection: upgrade is m.conn)
	conn    []byte
}

var (
	connClose     = []byte("close")
	connKeepAlive = []byte("keep-alive")
	connUpgrade   = []byte("upgrade")
)

// respond writes the client's response head to dst from a backend's response head raw (status
// line to blank line, read by checkResponse into r): the status line as HTTP/1.1, every field
// as the backend wrote it except the hop-by-hop ones (RFC 9110 §7.6.1) and those Connection
// names, Transfer-Encoding when m re-frames the body, then X-Ballast-Backend when the
// listener exposes backends and the Connection field m asks for. Line ends become CRLF.
func (t *table) respond(dst, raw []byte, r *respHead, m respMode, listener string, b *upstream.Backend) []byte {
	eol := bytes.IndexByte(raw, '\n')
	dst = append(dst, "HTTP/1.1"...)
	dst = append(dst, bytes.TrimSuffix(raw[8:eol], []byte{'\r'})...)
	dst = append(dst, '\r', '\n')
	for p := raw[eol+1:]; len(p) > 0; {
		eol = bytes.IndexByte(p, '\n')
		line := bytes.TrimSuffix(p[:eol], []byte{'\r'})
		p = p[eol+1:]
		if len(line) == 0 {
			break
		}
		name := line[:bytes.IndexByte(line, ':')]
		if hopByHopName(name) && !(m.upgrade && asciiEqualFold(name, "upgrade")) || m.unchunk && asciiEqualFold(name, "transfer-encoding") || listed(r, name) {
			continue
		}
		dst = append(dst, line...)
		dst = append(dst, '\r', '\n')
	}
	if m.chunk {
		dst = append(dst, "Transfer-Encoding: chunked\r\n"...)
	}
	if l := t.listeners[listener]; l != nil && l.ExposeBackend && b != nil {
		dst = append(dst, keyBackend...)
		dst = append(dst, ": "...)
		dst = append(dst, b.ID...)
		dst = append(dst, '\r', '\n')
	}
	if m.conn != nil {
		dst = append(dst, "Connection: "...)
		dst = append(dst, m.conn...)
		dst = append(dst, '\r', '\n')
	}
	return append(dst, '\r', '\n')
}

// hopByHopName reports a field of hopByHop, in any case.
func hopByHopName(name []byte) bool {
	for _, h := range hopByHop {
		if len(name) == len(h) && bytes.EqualFold(name, s2b(h)) {
			return true
		}
	}
	return false
}

// listed reports a field the response's Connection names, except the framing and routing
// fields a peer must not remove this way.
func listed(r *respHead, name []byte) bool {
	for _, tok := range r.conn[:r.nconn] {
		if bytes.EqualFold(tok, name) {
			return !asciiEqualFold(name, "content-length") && !asciiEqualFold(name, "transfer-encoding") && !asciiEqualFold(name, "trailer")
		}
	}
	return false
}

// lineSink takes access-log lines to write off the shard.
type lineSink interface {
	add(l *accesslog.Log, e *accesslog.Entry)
}

// logAccess writes one access-log line (through the shard's writer).
func (t *table) logAccess(to lineSink, l *accesslog.Log, e *accesslog.Entry) {
	if t.access && l != nil {
		to.add(l, e)
	}
}

// errClass says what went wrong with one attempt; it decides the status and the retry.
type errClass uint8

const (
	errNone          errClass = iota
	errConnect                // the backend could not be reached: never received the request
	errStale                  // a pooled connection was found closed before any byte was sent
	errClosed                 // the connection closed or reset after the request was (partly) sent
	errTimeout                // no response head within the response timeout
	errBadGateway             // anything else on the backend side (a malformed response...)
	errClient                 // reading the request body from the client failed
	errClientTimeout          // the client sent its request body too slowly
	errCancelled              // abandoned (the client went away, shutdown)
)

func (c errClass) status() int {
	switch c {
	case errTimeout:
		return fasthttp.StatusGatewayTimeout
	case errClient:
		return fasthttp.StatusBadRequest
	case errClientTimeout:
		return fasthttp.StatusRequestTimeout
	}
	return fasthttp.StatusBadGateway
}

func (c errClass) String() string {
	switch c {
	case errConnect:
		return "backend connect failed"
	case errStale:
		return "backend closed an idle connection"
	case errClosed:
		return "backend closed the connection before responding"
	case errTimeout:
		return "backend response timeout"
	case errBadGateway:
		return "bad response from backend"
	case errClient:
		return "client request body failed"
	case errClientTimeout:
		return "client request body too slow"
	case errCancelled:
		return "cancelled"
	}
	return "ok"
}

// idempotent reports whether a request with this method may be sent twice (RFC 9110 §9.2.2).
func idempotent(method []byte) bool {
	switch string(method) {
	case "GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE":
		return true
	}
	return false
}

// budgetMinPerSecond is the retries a pool may always spend per second.
const budgetMinPerSecond = 5

// retryBudget caps retries at ratio × requests over the current and the previous second, plus
// a floor (Envoy's retry budget); atomics only, approximate under races.
type retryBudget struct {
	ratio     float64
	sec       atomic.Int64
	curReqs   atomic.Int64
	curSpent  atomic.Int64
	prevReqs  atomic.Int64
	prevSpent atomic.Int64
}

func newRetryBudget(ratio float64) *retryBudget { return &retryBudget{ratio: max(ratio, 0)} }

func (b *retryBudget) roll(now int64) {
	s := b.sec.Load()
	if s == now || now < s || !b.sec.CompareAndSwap(s, now) {
		return
	}
	if now == s+1 {
		b.prevReqs.Store(b.curReqs.Swap(0))
		b.prevSpent.Store(b.curSpent.Swap(0))
	} else {
		b.curReqs.Store(0)
		b.curSpent.Store(0)
		b.prevReqs.Store(0)
		b.prevSpent.Store(0)
	}
}

// request counts one client request at second now.
func (b *retryBudget) request(now int64) {
	b.roll(now)
	b.curReqs.Add(1)
}

func (b *retryBudget) spend(now int64) bool {
	if b.ratio == 0 {
		return false
	}
	b.roll(now)
	allowed := int64(b.ratio*float64(b.curReqs.Load()+b.prevReqs.Load())) + 2*budgetMinPerSecond
	if b.curSpent.Load()+b.prevSpent.Load() >= allowed {
		return false
	}
	b.curSpent.Add(1)
	return true
}
