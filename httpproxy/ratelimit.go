package httpproxy

import (
	"hash/maphash"
	"math"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/config"
)

// limiter is a per-route token-bucket rate limiter keyed by client address, header or
// cookie. Buckets live in a sharded map (one mutex per shard, never a global lock) and refill
// lazily when their key is seen again, from a coarse millisecond clock; there is no goroutine
// or timer per key. Each shard holds at most maxPerShard buckets: a full shard first forgets
// the buckets that have refilled completely (forgetting them changes nothing), at most once
// per second, and otherwise evicts an arbitrary bucket, which at worst gives that key a fresh
// burst. Memory is bounded by max_keys whatever the number of clients.
type limiter struct {
	conf        config.RateLimit
	perMilli    float64 // tokens per millisecond
	burst       float64
	fullAfter   int64 // ms after which an idle bucket is full again
	maxPerShard int
	seed        maphash.Seed
	shards      [limiterShards]limiterShard
}

const limiterShards = 64

type limiterShard struct {
	mu        sync.Mutex
	buckets   map[uint64]bucket
	lastSweep int64
	_         [40]byte // keep neighbouring shards' mutexes off one cache line
}

type bucket struct {
	tokens float64
	last   int64 // coarse ms of the last refill
}

func newLimiter(rl *config.RateLimit) *limiter {
	l := &limiter{conf: *rl, perMilli: rl.Rate / 1000, burst: float64(rl.Burst), seed: maphash.MakeSeed()}
	l.fullAfter = int64(math.Ceil(l.burst / l.perMilli))
	l.maxPerShard = max(rl.MaxKeys/limiterShards, 1)
	for i := range l.shards {
		l.shards[i].buckets = make(map[uint64]bucket)
	}
	coarseMillis() // start the clock now, not on the first request
	return l
}

// allow takes a token for key; when there is none it returns false and the whole seconds
// until one will be there (for Retry-After).
func (l *limiter) allow(key []byte) (bool, int) {
	h := maphash.Bytes(l.seed, key)
	s := &l.shards[h%limiterShards]
	now := coarseMillis()
	s.mu.Lock()
	b, ok := s.buckets[h]
	if !ok {
		if len(s.buckets) >= l.maxPerShard {
			s.makeRoom(now, l.fullAfter, l.maxPerShard)
		}
		b = bucket{tokens: l.burst, last: now}
	} else if d := now - b.last; d > 0 {
		b.tokens = min(l.burst, b.tokens+float64(d)*l.perMilli)
		b.last = now
	}
	allowed := b.tokens >= 1
	if allowed {
		b.tokens--
	}
	s.buckets[h] = b
	s.mu.Unlock()
	if allowed {
		return true, 0
	}
	wait := int(math.Ceil((1 - b.tokens) / l.perMilli / 1000))
	return false, max(wait, 1)
}

// makeRoom frees one place in a full shard; s.mu is held.
func (s *limiterShard) makeRoom(now, fullAfter int64, limit int) {
	if now-s.lastSweep >= 1000 {
		s.lastSweep = now
		for k, b := range s.buckets {
			if now-b.last >= fullAfter {
				delete(s.buckets, k)
			}
		}
	}
	if len(s.buckets) < limit {
		return
	}
	for k := range s.buckets { // map order is arbitrary: evict whichever comes first
		delete(s.buckets, k)
		break
	}
}

// size is the number of buckets held, for tests.
func (l *limiter) size() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.buckets)
		s.mu.Unlock()
	}
	return n
}

// key returns the bytes that identify the request's client for this limiter, in st.tmp.
func (l *limiter) key(ctx *fasthttp.RequestCtx, st *reqState) []byte {
	h := &ctx.Request.Header
	switch l.conf.Key {
	case config.RateKeyHeader:
		if v := h.Peek(l.conf.Name); len(v) > 0 {
			st.tmp = append(append(st.tmp[:0], 'h'), v...)
			return st.tmp
		}
	case config.RateKeyCookie:
		if v := h.Cookie(l.conf.Name); len(v) > 0 {
			st.tmp = append(append(st.tmp[:0], 'c'), v...)
			return st.tmp
		}
	}
	st.tmp = st.client.AppendTo(append(st.tmp[:0], 'a'))
	return st.tmp
}

// rateLimit answers 429 with Retry-After when the request's key has no token left.
func (ls *listenerState) rateLimit(ctx *fasthttp.RequestCtx, t *table, x *exchange, l *limiter) bool {
	ok, wait := l.allow(l.key(ctx, &x.pol))
	if ok {
		return true
	}
	ls.refuse(ctx, t, x, fasthttp.StatusTooManyRequests, "ballast: too many requests\n")
	ctx.Response.Header.Set("Retry-After", strconv.Itoa(wait))
	return false
}

// coarseMillis is a millisecond clock advanced every 10 ms by one goroutine, started when the
// first rate limit is configured; refilling buckets needs no finer time.
var (
	coarseMs     atomic.Int64
	coarseMsOnce sync.Once
)

func coarseMillis() int64 {
	coarseMsOnce.Do(func() {
		start := time.Now()
		coarseMs.Store(1)
		go func() {
			for now := range time.Tick(10 * time.Millisecond) {
				coarseMs.Store(now.Sub(start).Milliseconds() + 1)
			}
		}()
	})
	return coarseMs.Load()
}

// connLimiter counts each client address's open connections on one listener, to enforce
// listeners[].max_conns_per_client. Trusted proxies are not limited: they carry many clients.
type connLimiter struct {
	ls     *listenerState
	mu     sync.Mutex // taken on accept and close only, never per request
	counts map[netip.Addr]int
}

// limitListener wraps ln so that every Accept checks the listener's current limit; with no
// limit configured the connection is handed over as is.
type limitListener struct {
	net.Listener
	cl *connLimiter
}

// limitConns wraps ln with the listener's per-client connection limit.
func (ls *listenerState) limitConns(ln net.Listener) net.Listener {
	return limitListener{Listener: ln, cl: &connLimiter{ls: ls, counts: map[netip.Addr]int{}}}
}

func (l limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c, ok := l.cl.admit(c); ok {
			return c, nil
		}
	}
}

// admit counts c against its client's limit; a connection over it is closed at once
// (HAProxy's tcp-request connection reject).
func (cl *connLimiter) admit(c net.Conn) (net.Conn, bool) {
	t := cl.ls.proxy.table.Load()
	if t.pol == nil {
		return c, true
	}
	lp := t.pol.listeners[cl.ls.name]
	if lp == nil || lp.maxConnsPerClient <= 0 {
		return c, true
	}
	ip := clientAddr(c.RemoteAddr())
	if t.pol.trusts(ip) {
		return c, true
	}
	cl.mu.Lock()
	if cl.counts[ip] >= lp.maxConnsPerClient {
		cl.mu.Unlock()
		_ = c.Close()
		return nil, false
	}
	cl.counts[ip]++
	cl.mu.Unlock()
	return &countedConn{Conn: c, cl: cl, ip: ip}, true
}

func (cl *connLimiter) release(ip netip.Addr) {
	cl.mu.Lock()
	if cl.counts[ip]--; cl.counts[ip] <= 0 {
		delete(cl.counts, ip)
	}
	cl.mu.Unlock()
}

// countedConn gives its place back when closed (once).
type countedConn struct {
	net.Conn
	cl     *connLimiter
	ip     netip.Addr
	closed atomic.Bool
}

func (c *countedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.cl.release(c.ip)
	}
	return c.Conn.Close()
}

// CloseWrite half-closes the connection, which the tunnel relies on.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
