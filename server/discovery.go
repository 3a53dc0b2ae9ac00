package server

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"ballast/config"
	"ballast/discovery"
	"ballast/upstream"
)

// firstAnswerWait bounds the first resolution of a new pull source (DNS, file), which a start
// or a reload waits for so that a discovered pool has its backends when it starts serving.
const firstAnswerWait = 5 * time.Second

// discoveryPlane runs the pools' discovery sources (package discovery): one Syncer per pool
// with a discovery section, fed by a poller goroutine for DNS and file sources or by the fleet
// for fleet sources, applying each set to the pool in force. It serves no listener.
type discoveryPlane struct {
	logger *slog.Logger
	ctx    context.Context // the server's

	mu      sync.Mutex
	sources map[string]*poolSource // by pool name, in force
	pending map[string]*poolSource // prepared for a configuration not installed yet
}

type poolSource struct {
	key    string // what the source is: a changed key restarts it
	syncer *discovery.Syncer
	puller discovery.Puller // nil for fleet sources
	cancel context.CancelFunc
	fleet  bool
	next   time.Duration // the wait after the first answer
}

func newDiscoveryPlane(ctx context.Context, logger *slog.Logger) *discoveryPlane {
	return &discoveryPlane{ctx: ctx, logger: logger, sources: map[string]*poolSource{}}
}

func sourceKey(pc config.Pool) string {
	d := pc.Discovery
	k := fmt.Sprintf("file=%s fleet=%v max=%d", d.File, d.Fleet, d.MaxBackends)
	if d.DNS != nil {
		k += fmt.Sprintf(" dns=%+v", *d.DNS)
	}
	return k
}

// prepare makes the Syncers of cfg's discovered pools: the running ones whose source did not
// change are kept, new ones get their first answer now (bounded by firstAnswerWait, in
// parallel), so that buildPools can give every pool its discovered backends (extend).
func (p *discoveryPlane) prepare(cfg *config.Config) {
	p.mu.Lock()
	pending := map[string]*poolSource{}
	var fresh []*poolSource
	for _, pc := range cfg.Pools {
		if pc.Discovery == nil {
			continue
		}
		key := sourceKey(pc)
		if cur := p.sources[pc.Name]; cur != nil && cur.key == key {
			pending[pc.Name] = cur
			continue
		}
		ps := newPoolSource(pc, key, p.logger)
		pending[pc.Name] = ps
		if ps.puller != nil {
			fresh = append(fresh, ps)
		}
	}
	p.mu.Unlock()
	// The first answers, without the lock: the admin plane reads the sources in force meanwhile.
	ctx, cancel := context.WithTimeout(p.ctx, firstAnswerWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, ps := range fresh {
		wg.Go(func() { ps.next = ps.syncer.PollOnce(ctx, ps.puller) })
	}
	wg.Wait()
	p.mu.Lock()
	p.pending = pending
	p.mu.Unlock()
}

func newPoolSource(pc config.Pool, key string, logger *slog.Logger) *poolSource {
	d := pc.Discovery
	ps := &poolSource{key: key}
	switch {
	case d.DNS != nil:
		n := d.DNS
		ps.puller = &discovery.DNS{Name: n.Name, Type: n.Type, Port: n.Port, Resolvers: n.Resolvers,
			MinTTL: n.MinTTL.Duration, MaxTTL: n.MaxTTL.Duration, Timeout: n.Timeout.Duration, Max: d.MaxBackends}
	case d.File != "":
		ps.puller = &discovery.File{Path: d.File, Max: d.MaxBackends}
	default:
		ps.fleet = true
	}
	src := "fleet"
	if s, ok := ps.puller.(interface{ String() string }); ok {
		src = s.String()
	}
	ps.syncer = discovery.NewSyncer(pc.Name, src, d.MaxBackends, logger)
	return ps
}

// extend appends the pool's discovered backends to its spec (a prepared configuration's).
func (p *discoveryPlane) extend(pool string, spec upstream.Spec) upstream.Spec {
	p.mu.Lock()
	ps := p.pending[pool]
	if ps == nil {
		ps = p.sources[pool]
	}
	p.mu.Unlock()
	if ps != nil {
		spec.Backends = ps.syncer.Extend(spec.Backends)
	}
	return spec
}

// install moves every Syncer to the new pools, starts the new sources and stops the ones cfg
// no longer has.
func (p *discoveryPlane) install(cfg *config.Config, pools map[string]*upstream.Pool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := p.pending
	if next == nil {
		next = map[string]*poolSource{}
	}
	p.pending = nil
	for name, ps := range p.sources {
		if next[name] != ps {
			ps.cancel()
		}
	}
	for _, pc := range cfg.Pools {
		ps := next[pc.Name]
		if ps == nil {
			continue
		}
		var ids []string
		for _, b := range pc.Backends {
			ids = append(ids, b.ID())
		}
		ps.syncer.SetStatic(ids)
		ps.syncer.SetPool(pools[pc.Name])
		if ps.cancel == nil {
			ctx, cancel := context.WithCancel(p.ctx)
			ps.cancel = cancel
			go ps.syncer.Run(ctx)
			if ps.puller != nil {
				go func() {
					select { // the first answer came in prepare
					case <-ctx.Done():
						return
					case <-time.After(ps.next):
					}
					ps.syncer.Poll(ctx, ps.puller)
				}()
			}
		}
	}
	p.sources = next
}

// abort drops what prepare made for a configuration that was not installed.
func (p *discoveryPlane) abort() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = nil
}

// fleetSyncers are the Syncers of the pools discovered from the fleet, by pool name: of the
// prepared configuration, or of the one in force.
func (p *discoveryPlane) fleetSyncers(prepared bool) map[string]*discovery.Syncer {
	p.mu.Lock()
	defer p.mu.Unlock()
	src := p.sources
	if prepared && p.pending != nil {
		src = p.pending
	}
	out := map[string]*discovery.Syncer{}
	for name, ps := range src {
		if ps.fleet {
			out[name] = ps.syncer
		}
	}
	return out
}

// Discovery is every discovered pool's state, for the admin plane.
func (p *discoveryPlane) Discovery() []discovery.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]discovery.Status, 0, len(p.sources))
	for _, ps := range p.sources {
		out = append(out, ps.syncer.Status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pool < out[j].Pool })
	return out
}
