package httpcore

import (
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"

	"ballast/accesslog"
	"ballast/config"
	"ballast/upstream"
)

// Core is the HTTP side of one Ballast instance: the installed Table, the access log, the
// per-backend status counters, the per-client connection counts of each listener. Every HTTP
// engine of the instance serves from the same Core, so limits, budgets, counters and log
// lines add up whichever HTTP version a client speaks.
type Core struct {
	logger *slog.Logger
	table  atomic.Pointer[Table]
	access accesslog.Switch

	mu        sync.Mutex // guards attachers, conns and closed; never taken per request
	attachers []Attacher
	conns     map[string]*connCounts // by listener name; kept across reloads
	closed    bool
}

// Attacher gives the backends of one pool what an engine keeps per backend (keep-alive
// connections, transports) in the engine's own upstream slot. Swap calls it for every pool
// before the new table serves; an error refuses the configuration.
type Attacher func(pc *config.Pool, pool *upstream.Pool) error

// New returns a Core with no table; logger receives the error log (nil discards it).
func New(logger *slog.Logger) *Core {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	startCoarseClock()
	return &Core{logger: logger, conns: map[string]*connCounts{}}
}

// Attach registers an engine's Attacher; engines call it once, before the first Swap.
func (c *Core) Attach(a Attacher) {
	c.mu.Lock()
	c.attachers = append(c.attachers, a)
	c.mu.Unlock()
}

// Swap builds the table of cfg over pools, has every engine attach its per-backend state,
// opens the access log cfg asks for and installs them. On error the running table stays.
func (c *Core) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	t, err := build(c, cfg, pools, c.table.Load())
	if err != nil {
		return err
	}
	c.mu.Lock()
	attachers := c.attachers
	c.mu.Unlock()
	for i := range cfg.Pools {
		pc := &cfg.Pools[i]
		pool := pools[pc.Name]
		if pool == nil {
			continue
		}
		for _, a := range attachers {
			if err := a(pc, pool); err != nil {
				return err
			}
		}
	}
	if err := c.access.Set(cfg.Logging); err != nil {
		return err
	}
	c.table.Store(t)
	return nil
}

// Table is the installed table, nil before the first Swap.
func (c *Core) Table() *Table { return c.table.Load() }

// ReopenAccessLog reopens the access log file (SIGUSR1, after logrotate moved it).
func (c *Core) ReopenAccessLog() error { return c.access.Reopen() }

// Responses returns b's responses by status class: index 1..5 are the classes, 0 the requests
// that got no valid response, over every HTTP engine.
func (c *Core) Responses(b *upstream.Backend) [6]uint64 {
	var out [6]uint64
	if s, _ := b.Attachment(statusSlot).(*statusCounts); s != nil {
		for i := range out {
			out[i] = s[i].Load()
		}
	}
	return out
}

// PoolCounters returns how many requests of the named pool were retried on another backend
// and how many hedged copies were sent, since the pool first appeared.
func (c *Core) PoolCounters(pool string) (retries, hedges uint64) {
	t := c.table.Load()
	if t == nil {
		return 0, 0
	}
	if p := t.Pool(pool); p != nil {
		return p.counters.retries.Load(), p.counters.hedges.Load()
	}
	return 0, 0
}

// Close ends the core: the access log is closed and the clocks of the last core stop. Engines
// must have stopped serving.
func (c *Core) Close() {
	c.mu.Lock()
	closed := c.closed
	c.closed = true
	c.mu.Unlock()
	if closed {
		return
	}
	_ = c.access.Set(config.Logging{})
	stopCoarseClock()
}

// Logger is the error log.
func (c *Core) Logger() *slog.Logger { return c.logger }

// connCounts are one listener's open connections per client address (max_conns_per_client).
type connCounts struct {
	mu     sync.Mutex // taken on accept and close only
	counts map[netip.Addr]int
}

// AdmitConn counts a new client connection from peer on the listener against its
// max_conns_per_client, and reports ok false when it is over (the engine closes it at once,
// HAProxy's tcp-request connection reject). Trusted proxies are not limited: they carry many
// clients. A connection counts once however many requests or streams it carries; one that
// was counted is given back with ReleaseConn when it closes.
func (c *Core) AdmitConn(listener string, peer netip.Addr) (ok, counted bool) {
	t := c.table.Load()
	if t == nil || t.pol == nil {
		return true, false
	}
	l := t.listeners[listener]
	if l == nil || l.maxConnsPerClient <= 0 || t.pol.trusts(peer) {
		return true, false
	}
	c.mu.Lock()
	cc := c.conns[listener]
	if cc == nil {
		cc = &connCounts{counts: map[netip.Addr]int{}}
		c.conns[listener] = cc
	}
	c.mu.Unlock()
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.counts[peer] >= l.maxConnsPerClient {
		return false, false
	}
	cc.counts[peer]++
	return true, true
}

// ReleaseConn gives back the place of a connection AdmitConn counted.
func (c *Core) ReleaseConn(listener string, peer netip.Addr) {
	c.mu.Lock()
	cc := c.conns[listener]
	c.mu.Unlock()
	if cc == nil {
		return
	}
	cc.mu.Lock()
	if n, ok := cc.counts[peer]; ok {
		if n <= 1 {
			delete(cc.counts, peer)
		} else {
			cc.counts[peer] = n - 1
		}
	}
	cc.mu.Unlock()
}
