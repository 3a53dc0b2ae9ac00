package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"

	"ballast/admin"
	"ballast/config"
	"ballast/director"
	"ballast/upstream"
)

// xdpPlane runs the XDP directors of the listeners with forwarding: one director per
// interface, one VIP per listener, the real servers from the listener's pool. It binds no
// socket (Listeners is empty). Health comes from the pool: the server's health monitor probes
// each backend at its own address (the pool's health_check) and its verdicts, like the runtime
// API's disable, drain and weight, change the pool's snapshot; the plane subscribes to every
// snapshot (upstream.Pool.Subscribe) and rewrites the director's table from the backends' state.
type xdpPlane struct {
	logger *slog.Logger

	mu   sync.Mutex // guards dirs and cancel; held by Swap, sync and Directors
	dirs map[string]*ifaceDirector
	// cancel ends the subscriptions to the pools of the configuration in force.
	cancel []func()

	kick    chan struct{} // a pool changed: sync the tables
	stop    chan struct{}
	done    chan struct{}
	started sync.Once // the follower starts with the first director
	stopped sync.Once
}

// ifaceDirector is the director of one interface and the VIPs it serves.
type ifaceDirector struct {
	iface string
	mode  director.Mode
	d     *director.Director
	vips  map[string]*vipBinding // by listener name
}

// vipBinding ties a VIP to the pool that lists its real servers.
type vipBinding struct {
	listener string
	vip      director.VIP
	pool     *upstream.Pool
	poolName string
	written  []director.Real // what the director was last given
	ids      map[netip.Addr]string
	states   map[netip.Addr]upstream.State // why a Real was Down: disabled, down or ejected
}

func newXDPPlane(logger *slog.Logger) *xdpPlane {
	return &xdpPlane{logger: logger, dirs: map[string]*ifaceDirector{}, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

func (p *xdpPlane) Name() string { return "xdp" }

// Listeners: the director binds no socket; its listeners' addresses are VIPs.
func (p *xdpPlane) Listeners(*config.Config) []config.Listener { return nil }

func (p *xdpPlane) Serve(listener string, _ Socket) error {
	return fmt.Errorf("xdp plane: listener %s has no socket", listener)
}

// wanted is one interface's director as cfg describes it.
type wanted struct {
	mode      director.Mode
	tableSize int
	vips      []*vipBinding
}

func directorConfig(cfg *config.Config, pools map[string]*upstream.Pool) (map[string]*wanted, error) {
	out := map[string]*wanted{}
	conf := map[string]config.Pool{}
	for _, pc := range cfg.Pools {
		conf[pc.Name] = pc
	}
	for _, l := range cfg.Listeners {
		if !l.IsDirector() {
			continue
		}
		mode, err := director.ParseMode(l.Forwarding)
		if err != nil {
			return nil, err
		}
		ap, err := netip.ParseAddrPort(l.Address)
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", l.Name, err)
		}
		pool := ""
		for _, r := range cfg.Routes {
			if r.Listener == "" || r.Listener == l.Name {
				pool = r.Pool
				break
			}
		}
		pc, ok := conf[pool]
		if !ok || pools[pool] == nil {
			return nil, fmt.Errorf("listener %s: no pool routed to it", l.Name)
		}
		w := out[l.Interface]
		if w == nil {
			w = &wanted{mode: mode}
			out[l.Interface] = w
		}
		w.tableSize = max(w.tableSize, pc.TableSize)
		proto := director.TCP
		if l.Protocol == config.ProtocolUDP {
			proto = director.UDP
		}
		v := director.VIP{Addr: ap.Addr(), Port: ap.Port(), Proto: proto, Scheduler: director.Maglev}
		if pc.Balancer == "wlc" {
			v.Scheduler = director.WLC
		}
		v.SourceHash = pc.HashKey.Source == "source_ip"
		w.vips = append(w.vips, &vipBinding{listener: l.Name, vip: v, pool: pools[pool], poolName: pool})
	}
	return out, nil
}

// Swap starts the directors of interfaces new to cfg, sets every VIP, removes the VIPs and
// closes the directors cfg no longer has, and follows the new pools. A change of an
// interface's forwarding mode is refused (restart to change it) and its table size, the
// largest table_size of its pools, is fixed when the director starts.
func (p *xdpPlane) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	want, err := directorConfig(cfg, pools)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for iface, w := range want {
		if cur := p.dirs[iface]; cur != nil && cur.mode != w.mode {
			return fmt.Errorf("interface %s forwards in %s mode; changing it to %s needs a restart", iface, cur.mode, w.mode)
		}
	}
	if len(want) > 0 {
		p.started.Do(func() { go p.follow() })
	}
	var started []*ifaceDirector
	for iface, w := range want {
		if p.dirs[iface] != nil {
			continue
		}
		d, err := director.New(director.Options{Iface: iface, Mode: w.mode, TableSize: w.tableSize, Seed: clusterSeed(cfg), OwnMACOnly: cfg.BGP != nil,
			SecondChance: cfg.BGP != nil && cfg.BGP.SecondChance, Logger: p.logger})
		if err != nil {
			for _, s := range started {
				_ = s.d.Close()
				delete(p.dirs, s.iface)
			}
			return fmt.Errorf("director on %s: %w", iface, err)
		}
		id := &ifaceDirector{iface: iface, mode: w.mode, d: d, vips: map[string]*vipBinding{}}
		p.dirs[iface], started = id, append(started, id)
		p.logger.Info("XDP director attached", "interface", iface, "mode", w.mode.String())
	}
	var errs []error
	for iface, id := range p.dirs {
		w := want[iface]
		if w == nil {
			p.closeDirector(id)
			delete(p.dirs, iface)
			continue
		}
		keep := map[string]bool{}
		for _, vb := range w.vips {
			keep[vb.listener] = true
			if old := id.vips[vb.listener]; old != nil && (old.vip.Addr != vb.vip.Addr || old.vip.Port != vb.vip.Port || old.vip.Proto != vb.vip.Proto) {
				if err := id.d.RemoveVIP(old.vip); err != nil {
					errs = append(errs, err)
				}
			}
			id.vips[vb.listener] = vb // written is nil: the scheduler or the pool may have changed
			if err := p.setVIP(id, vb); err != nil {
				errs = append(errs, err)
			}
		}
		for name, vb := range id.vips {
			if !keep[name] {
				if err := id.d.RemoveVIP(vb.vip); err != nil {
					errs = append(errs, err)
				}
				delete(id.vips, name)
			}
		}
	}
	for _, c := range p.cancel {
		c()
	}
	p.cancel = nil
	seen := map[*upstream.Pool]bool{}
	for _, w := range want {
		for _, vb := range w.vips {
			if !seen[vb.pool] {
				seen[vb.pool] = true
				p.cancel = append(p.cancel, vb.pool.Subscribe(func(*upstream.Pool) { p.poke() }))
			}
		}
	}
	return errors.Join(errs...)
}

// poke asks the follower to sync; it runs under a pool's writer mutex, so it only signals.
func (p *xdpPlane) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// follow rewrites the directors' tables after pool changes, off the pools' mutexes.
func (p *xdpPlane) follow() {
	defer close(p.done)
	for {
		select {
		case <-p.kick:
			p.mu.Lock()
			for _, id := range p.dirs {
				for _, vb := range id.vips {
					if err := p.setVIP(id, vb); err != nil {
						p.logger.Error("director: updating real servers", "listener", vb.listener, "error", err)
					}
				}
			}
			p.mu.Unlock()
		case <-p.stop:
			return
		}
	}
}

// reals is the pool's backends as the director's real servers: disabled, down and ejected
// backends are Down (no new flows, established ones stay), draining ones weigh 0.
func reals(pool *upstream.Pool) ([]director.Real, map[netip.Addr]string, map[netip.Addr]upstream.State) {
	bs := pool.Backends()
	out := make([]director.Real, 0, len(bs))
	ids := make(map[netip.Addr]string, len(bs))
	states := make(map[netip.Addr]upstream.State, len(bs))
	for _, b := range bs {
		ap, ok := b.AddrPort()
		if !ok || !ap.Addr().Is4() {
			continue // validation admits IPv4 literals only; a runtime add of anything else is skipped
		}
		if _, dup := ids[ap.Addr()]; dup {
			continue
		}
		r := director.Real{Addr: ap.Addr(), Weight: b.Weight()}
		st := b.State()
		states[ap.Addr()] = st
		switch st {
		case upstream.StateDisabled, upstream.StateDown, upstream.StateEjected:
			r.Down = true
		case upstream.StateDraining:
			r.Weight = 0
		}
		out = append(out, r)
		ids[ap.Addr()] = b.ID
	}
	return out, ids, states
}

// setVIP gives the director vb's real servers when they changed since the last call.
func (p *xdpPlane) setVIP(id *ifaceDirector, vb *vipBinding) error {
	rs, ids, states := reals(vb.pool)
	if vb.written != nil && slices.EqualFunc(rs, vb.written, func(a, b director.Real) bool {
		return a.Addr == b.Addr && a.Weight == b.Weight && a.Down == b.Down
	}) {
		return nil
	}
	if err := id.d.SetVIP(vb.vip, rs); err != nil {
		return fmt.Errorf("listener %s: %w", vb.listener, err)
	}
	vb.written, vb.ids, vb.states = rs, ids, states
	return nil
}

func (p *xdpPlane) closeDirector(id *ifaceDirector) {
	if err := id.d.Close(); err != nil {
		p.logger.Error("closing XDP director", "interface", id.iface, "error", err)
	}
	p.logger.Info("XDP director detached", "interface", id.iface)
}

// Shutdown detaches every director: from then on the VIPs' packets go to the kernel.
func (p *xdpPlane) Shutdown(context.Context) error {
	p.stopped.Do(func() {
		close(p.stop)
		p.started.Do(func() { close(p.done) }) // never started: nothing to wait for
	})
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cancel {
		c()
	}
	p.cancel = nil
	for iface, id := range p.dirs {
		p.closeDirector(id)
		delete(p.dirs, iface)
	}
	return nil
}

// Directors reads every director's statistics for the admin plane.
func (p *xdpPlane) Directors() []admin.DirectorView {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]admin.DirectorView, 0, len(p.dirs))
	for _, id := range p.dirs {
		dv := admin.DirectorView{Interface: id.iface, Mode: id.mode.String()}
		stats, err := id.d.Stats()
		if err == nil {
			dv.Counters, err = id.d.Counters()
		}
		if err != nil {
			dv.Error = err.Error()
		}
		byVIP := map[director.VIP]*vipBinding{}
		for _, vb := range id.vips {
			byVIP[vb.vip] = vb
		}
		for _, s := range stats {
			vb := byVIP[s.VIP]
			if vb == nil {
				continue
			}
			vv := admin.VIPView{Listener: vb.listener, Pool: vb.poolName, VIP: s.VIP.String(), Scheduler: s.VIP.Scheduler, DirectorTraffic: traffic(s.Traffic, s.ActiveFlows)}
			for _, r := range s.Reals {
				state := r.State
				if state == director.StateDisabled { // Real.Down: say why the pool took it out
					state = vb.states[r.Addr].String()
				}
				vv.Reals = append(vv.Reals, admin.RealView{
					Backend: vb.ids[r.Addr], Address: netip.AddrPortFrom(r.Addr, s.VIP.Port).String(), State: state,
					Weight: r.Weight, EffectiveWeight: r.EffectiveWeight, Slots: r.Slots, DirectorTraffic: traffic(r.Traffic, r.ActiveFlows),
				})
			}
			dv.VIPs = append(dv.VIPs, vv)
		}
		out = append(out, dv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Interface < out[j].Interface })
	return out
}

func traffic(t director.Traffic, active int) admin.DirectorTraffic {
	return admin.DirectorTraffic{Packets: t.Packets, Bytes: t.Bytes, NewFlows: t.NewFlows, ActiveFlows: active, Drops: t.Drops}
}

// director is the director attached to iface, or nil (flow sync, server/haflows.go).
func (p *xdpPlane) director(iface string) *director.Director {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id := p.dirs[iface]; id != nil {
		return id.d
	}
	return nil
}
