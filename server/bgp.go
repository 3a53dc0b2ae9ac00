package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"ballast/admin"
	"ballast/bgp"
	"ballast/config"
	"ballast/upstream"
)

// bgpPlane makes the server one of several active directors behind routers (config.BGP,
// docs/scale-out.md). It binds no socket. It runs a bgp.Speaker to the routers and, every
// bgpInterval and after each pool change, announces each director VIP that has a usable real
// server in the director's own table (bgp.Decide) and withdraws the others; on shutdown it
// withdraws everything first and waits withdraw_wait before the other planes stop (withdraw).
// With flow_sync, the directors share the flows they place (bgpflows.go).
type bgpPlane struct {
	logger *slog.Logger
	xdp    *xdpPlane

	mu       sync.Mutex // guards everything below
	cfg      *config.BGP
	vips     []bgpListener
	sp       *bgp.Speaker
	sync     *bgpFlowSync
	draining bool
	lastErr  string
	routes   []bgp.Route // what the speaker was last given

	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	stopped bool
}

// bgpListener is one director listener: its VIP address and its pool.
type bgpListener struct {
	name, pool string
	addr       netip.Addr
}

// bgpInterval is how often the plane looks at the directors' tables without a pool change
// (next hops resolved late, say).
const bgpInterval = 100 * time.Millisecond

func newBGPPlane(logger *slog.Logger, xdp *xdpPlane) *bgpPlane {
	return &bgpPlane{logger: logger, xdp: xdp, kick: make(chan struct{}, 1)}
}

func (p *bgpPlane) Name() string                               { return "bgp" }
func (p *bgpPlane) Listeners(*config.Config) []config.Listener { return nil }
func (p *bgpPlane) Serve(listener string, _ Socket) error {
	return fmt.Errorf("bgp plane: listener %s has no socket", listener)
}

// clusterSeed is the directors' Maglev seed: bgp.cluster_seed, or 0 without bgp.
func clusterSeed(cfg *config.Config) uint32 {
	if cfg.BGP == nil {
		return 0
	}
	return uint32(cfg.BGP.ClusterSeed)
}

// Swap starts the speaker with the first configuration that has bgp and follows a reload's
// director listeners and withdraw_wait; the session keys need a restart.
func (p *bgpPlane) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return errors.New("bgp plane: shut down")
	}
	b := cfg.BGP
	if b == nil {
		if p.cfg != nil {
			return errors.New("bgp: removing the bgp section needs a restart")
		}
		return nil
	}
	if p.cfg != nil {
		if fixed := bgpFixedChanged(p.cfg, b); fixed != "" {
			return fmt.Errorf("bgp: %s changed; restart to change it", fixed)
		}
	}
	vips := bgpListeners(cfg)
	if p.cfg == nil {
		if err := p.start(b); err != nil {
			return err
		}
	}
	bc := *b
	p.cfg, p.vips = &bc, vips
	if p.sync != nil {
		p.sync.swap()
	}
	p.poke()
	return nil
}

func (p *bgpPlane) start(b *config.BGP) error {
	c := bgp.Config{
		ASN: uint32(b.ASN), RouterID: netip.MustParseAddr(b.RouterID), ListenPort: int32(b.ListenPort),
		HoldTime: b.HoldTime.Duration, BFDInterval: b.BFDInterval.Duration, BFDMultiplier: b.BFDMultiplier,
		MED: uint32(b.MED), Logger: p.logger,
	}
	for _, s := range b.Communities {
		x, _ := config.ParseCommunity(s)
		c.Communities = append(c.Communities, x)
	}
	for _, pc := range b.Peers {
		c.Peers = append(c.Peers, bgp.Peer{Addr: netip.MustParseAddr(pc.Address), ASN: uint32(pc.ASN), BFD: pc.BFD})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sp, err := bgp.Start(ctx, c)
	if err != nil {
		return err
	}
	if b.FlowSync != nil {
		if p.sync, err = newBGPFlowSync(p, b.FlowSync); err != nil {
			_ = sp.Close()
			return fmt.Errorf("bgp: flow sync: %w", err)
		}
	}
	p.sp = sp
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go p.follow()
	p.logger.Info("bgp: speaker started", "asn", b.ASN, "router_id", b.RouterID, "peers", len(b.Peers))
	return nil
}

// bgpFixedChanged names the first bgp key a reload cannot change, or "".
func bgpFixedChanged(a, b *config.BGP) string {
	switch {
	case a.ASN != b.ASN || a.RouterID != b.RouterID || a.ListenPort != b.ListenPort:
		return "bgp.asn, router_id or listen_port"
	case !slices.Equal(a.Peers, b.Peers):
		return "bgp.peers"
	case a.HoldTime != b.HoldTime || a.BFDInterval != b.BFDInterval || a.BFDMultiplier != b.BFDMultiplier:
		return "bgp.hold_time or the BFD timers"
	case !slices.Equal(a.Communities, b.Communities) || a.MED != b.MED:
		return "bgp.communities or med"
	case a.ClusterSeed != b.ClusterSeed || a.SecondChance != b.SecondChance:
		return "bgp.cluster_seed or second_chance"
	case (a.FlowSync == nil) != (b.FlowSync == nil) || (a.FlowSync != nil && (!slices.Equal(a.FlowSync.Peers, b.FlowSync.Peers) || a.FlowSync.Port != b.FlowSync.Port)):
		return "bgp.flow_sync"
	}
	return ""
}

func bgpListeners(cfg *config.Config) []bgpListener {
	var out []bgpListener
	for _, l := range cfg.Listeners {
		ap, err := netip.ParseAddrPort(l.Address)
		if !l.IsDirector() || err != nil {
			continue
		}
		bl := bgpListener{name: l.Name, addr: ap.Addr()}
		for _, r := range cfg.Routes {
			if r.Listener == "" || r.Listener == l.Name {
				bl.pool = r.Pool
				break
			}
		}
		out = append(out, bl)
	}
	return out
}

// poke asks the follower to decide again (a pool changed, a reload).
func (p *bgpPlane) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// follow decides and announces every bgpInterval and on each poke until Shutdown.
func (p *bgpPlane) follow() {
	defer close(p.done)
	t := time.NewTicker(bgpInterval)
	defer t.Stop()
	for {
		p.decide()
		select {
		case <-t.C:
		case <-p.kick:
		case <-p.stop:
			return
		}
	}
}

// decide gives the speaker bgp.Decide's routes for the directors' state now.
func (p *bgpPlane) decide() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sp == nil {
		return
	}
	usable := p.xdp.usableByListener()
	vips := make([]bgp.VIP, 0, len(p.vips))
	for _, bl := range p.vips {
		n, ok := usable[bl.name]
		vips = append(vips, bgp.VIP{Addr: bl.addr, Listener: bl.name, Pool: bl.pool, Usable: n, Attached: ok})
	}
	routes := bgp.Decide(vips, p.draining)
	if slices.Equal(routes, p.routes) && p.lastErr == "" {
		return
	}
	if err := p.sp.Set(routes); err != nil {
		if err.Error() != p.lastErr {
			p.logger.Error("bgp: announcing", "error", err)
		}
		p.lastErr = err.Error()
	} else {
		p.lastErr = ""
	}
	p.routes = routes
}

// withdraw runs before the other planes stop: every route is withdrawn, and the director
// keeps forwarding for withdraw_wait (within ctx) while the routers move the flows away.
func (p *bgpPlane) withdraw(ctx context.Context) {
	p.mu.Lock()
	if p.sp == nil || p.draining {
		p.mu.Unlock()
		return
	}
	p.draining = true
	wait := p.cfg.WithdrawWait.Duration
	p.mu.Unlock()
	p.decide()
	p.logger.Info("bgp: routes withdrawn; forwarding while the routers move the flows", "withdraw_wait", wait.String())
	select {
	case <-time.After(wait):
	case <-ctx.Done():
	}
}

// Shutdown withdraws (if withdraw did not), ends the sessions with a Cease and stops the
// flow sync.
func (p *bgpPlane) Shutdown(context.Context) error {
	p.mu.Lock()
	if p.stopped || p.sp == nil {
		p.stopped = true
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	close(p.stop)
	sp, fs := p.sp, p.sync
	p.mu.Unlock()
	<-p.done
	err := sp.Close()
	if fs != nil {
		fs.close()
	}
	return err
}

// BGPStatus is what `ballast ctl bgp`, the status page and /metrics show; nil without bgp.
func (p *bgpPlane) BGPStatus() *admin.BGPView {
	p.mu.Lock()
	sp, b, fs := p.sp, p.cfg, p.sync
	v := &admin.BGPView{Draining: p.draining, Error: p.lastErr}
	p.mu.Unlock()
	if sp == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v.Status = sp.Status(ctx)
	v.WithdrawWait = b.WithdrawWait.Duration.String()
	v.BFDTimers = fmt.Sprintf("%v × %d", b.BFDInterval.Duration, b.BFDMultiplier)
	v.ClusterSeed = uint32(b.ClusterSeed)
	if fs != nil {
		v.FlowSync = fs.status()
	}
	return v
}

// usableByListener is each director listener's count of usable real servers, by listener
// name, from the directors' own tables; a listener missing is not served by a director.
func (p *xdpPlane) usableByListener() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for _, id := range p.dirs {
		u, err := id.d.Usable()
		if err != nil {
			continue
		}
		for name, vb := range id.vips {
			if n, ok := u[vb.vip]; ok {
				out[name] = n
			}
		}
	}
	return out
}
