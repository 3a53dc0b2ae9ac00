package httpcore

import (
	"hash/maphash"
	"math"
	"net/textproto"
	"sync"
	"sync/atomic"
	"time"

	"ballast/config"
)

// limiter is a per-route token-bucket rate limiter keyed by client address, header or
// cookie. Buckets live in shards (one mutex each, never a global lock) and refill lazily
// when their key is seen again, from a coarse millisecond clock; there is no goroutine or
// timer per key. Each shard holds at most perShard buckets in least-recently-used order: a
// full shard evicts the bucket seen longest ago, so a client that keeps asking (a throttled
// one above all) keeps its bucket while a churn of fresh keys evicts each other, and memory is
// bounded by max_keys whatever the number of clients. Small limits use fewer shards, so that a
// shard's share of max_keys stays meaningful.
type limiter struct {
	conf     config.RateLimit
	name     []byte // the header or cookie name
	perMilli float64
	burst    float64
	perShard int
	seed     maphash.Seed
	shards   []limiterShard
}

// maxShards bounds the shards of one limiter; minPerShard is the least share of max_keys a
// shard holds before the limiter uses fewer shards.
const (
	maxShards   = 64
	minPerShard = 64
)

type limiterShard struct {
	mu         sync.Mutex
	index      map[uint64]int32
	slots      []bucket
	head, tail int32 // most and least recently used slot; -1 when empty
	_          [32]byte
}

type bucket struct {
	key        uint64
	tokens     float64
	last       int64 // coarse ms of the last refill
	prev, next int32
}

func newLimiter(rl *config.RateLimit) *limiter {
	l := &limiter{conf: *rl, perMilli: rl.Rate / 1000, burst: float64(rl.Burst), seed: maphash.MakeSeed()}
	switch rl.Key {
	case config.RateKeyHeader:
		l.name = []byte(textproto.CanonicalMIMEHeaderKey(rl.Name))
	case config.RateKeyCookie:
		l.name = []byte(rl.Name)
	}
	keys := max(rl.MaxKeys, 1)
	n := min(maxShards, max(1, keys/minPerShard))
	l.perShard = max(keys/n, 1)
	l.shards = make([]limiterShard, n)
	for i := range l.shards {
		l.shards[i] = limiterShard{index: make(map[uint64]int32), head: -1, tail: -1}
	}
	coarseMillis() // start the clock now, not on the first request
	return l
}

// allow takes a token for key; when there is none it returns false and the whole seconds
// until one will be there (for Retry-After).
func (l *limiter) allow(key []byte) (bool, int) {
	h := maphash.Bytes(l.seed, key)
	s := &l.shards[h%uint64(len(l.shards))]
	now := coarseMillis()
	s.mu.Lock()
	i, ok := s.index[h]
	var b *bucket
	if !ok {
		i = s.take(l.perShard)
		b = &s.slots[i]
		*b = bucket{key: h, tokens: l.burst, last: now, prev: -1, next: -1}
		s.index[h] = i
	} else {
		b = &s.slots[i]
		s.unlink(i)
		if d := now - b.last; d > 0 {
			b.tokens = min(l.burst, b.tokens+float64(d)*l.perMilli)
			b.last = now
		}
	}
	s.pushFront(i)
	allowed := b.tokens >= 1
	if allowed {
		b.tokens--
	}
	tokens := b.tokens
	s.mu.Unlock()
	if allowed {
		return true, 0
	}
	wait := int(math.Ceil((1 - tokens) / l.perMilli / 1000))
	return false, max(wait, 1)
}

// take returns a free slot: a new one while the shard has room, else the least recently used
// one, evicted. s.mu is held.
func (s *limiterShard) take(limit int) int32 {
	if len(s.slots) < limit {
		s.slots = append(s.slots, bucket{})
		return int32(len(s.slots) - 1)
	}
	i := s.tail
	s.unlink(i)
	delete(s.index, s.slots[i].key)
	return i
}

func (s *limiterShard) unlink(i int32) {
	b := &s.slots[i]
	if b.prev >= 0 {
		s.slots[b.prev].next = b.next
	} else {
		s.head = b.next
	}
	if b.next >= 0 {
		s.slots[b.next].prev = b.prev
	} else {
		s.tail = b.prev
	}
	b.prev, b.next = -1, -1
}

func (s *limiterShard) pushFront(i int32) {
	b := &s.slots[i]
	b.prev, b.next = -1, s.head
	if s.head >= 0 {
		s.slots[s.head].prev = i
	}
	s.head = i
	if s.tail < 0 {
		s.tail = i
	}
}

// size is the number of buckets held, for tests.
func (l *limiter) size() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.index)
		s.mu.Unlock()
	}
	return n
}

// key returns the bytes that identify the request's client for this limiter, built in x.tmp.
func (l *limiter) key(req Request, x *Exchange) []byte {
	switch l.conf.Key {
	case config.RateKeyHeader:
		if v := req.Peek(l.name); len(v) > 0 {
			x.tmp = append(append(x.tmp[:0], 'h'), v...)
			return x.tmp
		}
	case config.RateKeyCookie:
		if v := req.Cookie(l.name); len(v) > 0 {
			x.tmp = append(append(x.tmp[:0], 'c'), v...)
			return x.tmp
		}
	}
	x.tmp = x.client.AppendTo(append(x.tmp[:0], 'a'))
	return x.tmp
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
