package l4

import (
	"net/netip"
	"sync"

	"ballast/balance"
)

const persistShards = 64

// persistTable remembers, per pool and client address, the backend (by ID) its last
// connection used and until when (LVS -p). It is sharded by source hash with a mutex per shard,
// and bounded: a full shard first drops its expired entries, then stops remembering new clients.
type persistTable struct {
	perShard int
	shards   [persistShards]persistShard
}

type persistShard struct {
	mu sync.Mutex
	m  map[persistKey]persistEntry
}

// persistKey names the pool, not the route, so that what clients remember survives a reload.
type persistKey struct {
	pool string
	src  netip.Addr
}

type persistEntry struct {
	backend string
	until   int64 // unix nanoseconds
}

func newPersistTable(limit int) *persistTable {
	t := &persistTable{perShard: max(1, limit/persistShards)}
	for i := range t.shards {
		t.shards[i].m = make(map[persistKey]persistEntry)
	}
	return t
}

func (t *persistTable) shard(src netip.Addr) *persistShard {
	return &t.shards[balance.SourceHash(src)%persistShards]
}

// get returns the backend ID remembered for src in pool, if it has not expired at now.
func (t *persistTable) get(pool string, src netip.Addr, now int64) (string, bool) {
	s := t.shard(src)
	s.mu.Lock()
	e, ok := s.m[persistKey{pool, src}]
	s.mu.Unlock()
	if !ok || now >= e.until {
		return "", false
	}
	return e.backend, true
}

// put remembers id for src in pool until until.
func (t *persistTable) put(pool string, src netip.Addr, id string, until int64, now int64) {
	s := t.shard(src)
	k := persistKey{pool, src}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[k]; !ok && len(s.m) >= t.perShard {
		for k2, e := range s.m {
			if now >= e.until {
				delete(s.m, k2)
			}
		}
		if len(s.m) >= t.perShard {
			return
		}
	}
	s.m[k] = persistEntry{id, until}
}

// len counts the remembered clients, for tests.
func (t *persistTable) len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
