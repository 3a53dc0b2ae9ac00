package balance

import (
	"sync"
	"sync/atomic"
)

// vnswrr is Tengine's virtual-node smooth weighted round robin: the SWRR sequence of one period
// (Σw/gcd virtual nodes) is laid out in a table, each picker starts at a random node among the
// first n (random % n, as Tengine does per worker) and walks the table with an atomic cursor.
// The table is built lazily, MaxInit SWRR steps at a time, so a huge pool does not pay for its
// whole table in one request.
//
// Picks read only the built prefix, whose length is published atomically after its entries
// are written; the mutex is taken only to extend the table.
type vnswrr struct {
	tier   []int
	load   Load
	period uint64
	batch  uint64  // max_init after defaulting and clamping
	table  []int32 // backend indexes; entries below built are immutable
	built  atomic.Uint64
	_      [64]byte // keeps the contended cursor off the read-mostly fields' cache line
	cursor atomic.Uint64
	_      [56]byte

	mu  sync.Mutex
	seq *swrrSeq // guarded by mu
}

func buildVNSWRR(bs []Backend, tier []int, o Options) (Picker, error) {
	if o.MaxInit < 0 {
		return nil, &ConfigError{"vnswrr", "max_init must not be negative"}
	}
	if len(tier) == 0 {
		return empty{}, nil
	}
	units, period := schedUnits(bs, tier)
	v := &vnswrr{
		tier:   tier,
		load:   o.load(),
		period: uint64(period),
		batch:  uint64(vnswrrBatch(o.MaxInit, len(tier), period)),
		table:  make([]int32, period),
		seq:    newSWRRSeq(units),
	}
	v.cursor.Store(uint64(intn(o.rand(), len(tier))))
	v.extend(0)
	return v, nil
}

// vnswrrBatch applies Tengine's max_init rules: 0 means the number of servers, more than the
// table holds means the whole table.
func vnswrrBatch(maxInit, servers, period int) int {
	if maxInit == 0 {
		maxInit = servers
	}
	return min(maxInit, period)
}

func (v *vnswrr) Pick(_ uint64, tried Tried) (int, error) {
	pos := (v.cursor.Add(1) - 1) % v.period
	if pos >= v.built.Load() {
		v.extend(pos)
	}
	if i := int(v.table[pos]); !tried.Has(i) && !v.load.Full(i) {
		return i, nil
	}
	// The walk may step up to schedWalk entries on; make sure they are built.
	if last := min(pos+schedWalk-1, v.period-1); last >= v.built.Load() {
		v.extend(last)
	}
	return schedSkip(v.table, pos, &v.cursor, v.tier, &tried, v.load)
}

// extend builds whole batches until the entry at pos exists.
func (v *vnswrr) extend(pos uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	b := v.built.Load()
	for b <= pos && b < v.period {
		end := min(b+v.batch, v.period)
		for j := b; j < end; j++ {
			v.table[j] = int32(v.tier[v.seq.step()])
		}
		b = end
		v.built.Store(b)
	}
	if b == v.period {
		v.seq = nil // the sequence state is not needed once the table is complete
	}
}

// Built reports how many virtual nodes exist and how many the complete table has; tests and
// the status page use it to show the lazy build.
func (v *vnswrr) Built() (built, total int) {
	return int(v.built.Load()), int(v.period)
}
