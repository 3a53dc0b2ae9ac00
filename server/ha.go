package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"ballast/admin"
	"ballast/config"
	"ballast/upstream"
	"ballast/vrrp"
)

// haPlane makes the server one director of a VRRP virtual router (config.HA, docs/ha.md). It
// binds no socket: the other planes' listeners are bound beforehand with IP_FREEBIND
// (listen), so that a backup's become reachable when the addresses arrive. It holds the
// addresses (vrrp.Addresses: an ARP responder whose link dies with the process, listener
// addresses on lo), runs the speaker, steps down while a listener whose address moves has no
// usable backend or the interface is down (track_pools), and syncs the director's flows to
// the other directors (flow_sync, haflows.go).
type haPlane struct {
	logger *slog.Logger
	xdp    *xdpPlane

	mu      sync.Mutex // guards everything below
	cfg     *config.HA // the running section; nil before the first Swap with one
	addrs   *vrrp.Addresses
	speaker *vrrp.Speaker
	local   []netip.Addr
	answer  []netip.Addr
	tracked []trackedListener
	fault   string
	sync    *haFlowSync // nil with flow_sync off
	// syncRef is sync for the speaker's transition callback, which must not take mu (Swap
	// holds mu while it hands the speaker a priority).
	syncRef atomic.Pointer[haFlowSync]

	stop    chan struct{}
	done    chan struct{}
	stopped bool
}

// trackedListener is a listener whose address moves, and the pools behind it.
type trackedListener struct {
	name  string
	pools []*upstream.Pool
}

func newHAPlane(logger *slog.Logger, xdp *xdpPlane) *haPlane {
	return &haPlane{logger: logger, xdp: xdp}
}

func (p *haPlane) Name() string                               { return "ha" }
func (p *haPlane) Listeners(*config.Config) []config.Listener { return nil }
func (p *haPlane) Serve(listener string, _ Socket) error {
	return fmt.Errorf("ha plane: listener %s has no socket", listener)
}

// Swap starts the virtual router with the first configuration that has ha, and applies a
// reload's changes of priority, addresses and tracked pools; the rest needs a restart.
func (p *haPlane) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return errors.New("ha plane: shut down")
	}
	h := cfg.HA
	if h == nil {
		if p.cfg != nil {
			return errors.New("ha: removing the ha section needs a restart")
		}
		return nil
	}
	local, answer := movingAddresses(cfg)
	tracked := trackedListeners(cfg, pools, local, answer)
	if p.cfg == nil {
		return p.start(h, local, answer, tracked)
	}
	if fixed := haFixedChanged(p.cfg, h); fixed != "" {
		return fmt.Errorf("ha: %s changed; restart to change it", fixed)
	}
	if !slices.Equal(local, p.local) || !slices.Equal(answer, p.answer) {
		if err := p.addrs.Update(vrrp.AddressOptions{Iface: h.Interface, Local: local, Answer: answer}); err != nil {
			return err
		}
		p.local, p.answer = local, answer
	}
	if h.Priority != p.cfg.Priority {
		p.speaker.SetPriority(uint8(h.Priority))
	}
	hc := *h
	p.cfg, p.tracked = &hc, tracked
	if p.sync != nil {
		p.sync.swap()
	}
	return nil
}

func (p *haPlane) start(h *config.HA, local, answer []netip.Addr, tracked []trackedListener) error {
	cs, err := vrrp.ParseChecksum(h.Checksum)
	if err != nil {
		return err
	}
	addrs, err := vrrp.NewAddresses(vrrp.AddressOptions{Iface: h.Interface, Local: local, Answer: answer})
	if err != nil {
		return fmt.Errorf("ha: %w", err)
	}
	hc := *h
	p.cfg, p.addrs, p.local, p.answer, p.tracked = &hc, addrs, local, answer, tracked
	if h.FlowSync {
		if p.sync, err = newHAFlowSync(p, &hc); err != nil {
			addrs.Close()
			p.cfg = nil
			return fmt.Errorf("ha: flow sync: %w", err)
		}
		p.syncRef.Store(p.sync)
	}
	sp, err := vrrp.NewSpeaker(vrrp.SpeakerConfig{
		Machine: vrrp.Config{
			VRID: uint8(h.VirtualRouterID), Priority: uint8(h.Priority), Interval: h.AdvertInterval.Duration,
			Preempt: h.Preempt, PreemptDelay: h.PreemptDelay.Duration,
		},
		Iface: h.Interface, Peers: h.HAPeers(), Checksum: cs, Owner: addrs, Logger: p.logger,
		OnTransition: p.transition,
	})
	if err != nil {
		if p.sync != nil {
			p.sync.close()
			p.sync = nil
		}
		addrs.Close()
		p.cfg = nil
		return fmt.Errorf("ha: %w", err)
	}
	p.speaker = sp
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go p.track(h.Interface)
	p.logger.Info("ha: virtual router started", "interface", h.Interface, "vrid", h.VirtualRouterID, "priority", h.Priority,
		"advert_interval", h.AdvertInterval.Duration.String(), "addresses", fmt.Sprint(addrs.All()))
	return nil
}

// transition runs on the speaker's goroutine after each state change.
func (p *haPlane) transition(from, to vrrp.State, reason string) {
	if s := p.syncRef.Load(); s != nil {
		s.transition(to)
	}
}

// haFixedChanged names the first ha key a reload cannot change, or "".
func haFixedChanged(a, b *config.HA) string {
	switch {
	case a.Interface != b.Interface:
		return "ha.interface"
	case a.VirtualRouterID != b.VirtualRouterID:
		return "ha.virtual_router_id"
	case a.AdvertInterval != b.AdvertInterval:
		return "ha.advert_interval"
	case a.Preempt != b.Preempt || a.PreemptDelay != b.PreemptDelay:
		return "ha.preempt"
	case !slices.Equal(a.UnicastPeers, b.UnicastPeers):
		return "ha.unicast_peers"
	case a.Checksum != b.Checksum:
		return "ha.checksum"
	case a.FlowSync != b.FlowSync || a.FlowSyncPort != b.FlowSyncPort:
		return "ha.flow_sync"
	}
	return ""
}

// movingAddresses is cfg.HAAddresses without the addresses the host already has on an
// interface other than lo: a listener on the director's own address does not move.
func movingAddresses(cfg *config.Config) (local, answer []netip.Addr) {
	local, answer = cfg.HAAddresses()
	own := map[netip.Addr]bool{}
	ifs, _ := net.Interfaces()
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		as, _ := ifi.Addrs()
		for _, a := range as {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				own[p.Addr()] = true
			}
		}
	}
	drop := func(l []netip.Addr) []netip.Addr {
		return slices.DeleteFunc(l, func(a netip.Addr) bool { return own[a] })
	}
	return drop(local), drop(answer)
}

// trackedListeners are the listeners whose address moves, with the pools routed from them.
func trackedListeners(cfg *config.Config, pools map[string]*upstream.Pool, local, answer []netip.Addr) []trackedListener {
	var out []trackedListener
	for _, l := range cfg.Listeners {
		ap, err := netip.ParseAddrPort(l.Address)
		if err != nil || (!slices.Contains(local, ap.Addr()) && !slices.Contains(answer, ap.Addr())) {
			continue
		}
		t := trackedListener{name: l.Name}
		for _, r := range cfg.Routes {
			if (r.Listener == "" || r.Listener == l.Name) && pools[r.Pool] != nil && !slices.Contains(t.pools, pools[r.Pool]) {
				t.pools = append(t.pools, pools[r.Pool])
			}
		}
		if len(t.pools) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// track puts the speaker in fault while the interface is down or (track_pools) a moving
// listener has no usable backend in any of its pools, and takes it out when healthy.
func (p *haPlane) track(iface string) {
	defer close(p.done)
	t := time.NewTicker(trackInterval)
	defer t.Stop()
	for {
		p.mu.Lock()
		reason := ""
		if ifi, err := net.InterfaceByName(iface); err != nil || ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagRunning == 0 {
			reason = "interface " + iface + " is down"
		} else if p.cfg.TrackPools {
			for _, tl := range p.tracked {
				if !anyUsable(tl.pools) {
					reason = "listener " + tl.name + " has no usable backend"
					break
				}
			}
		}
		changed := reason != p.fault
		p.fault = reason
		sp := p.speaker
		p.mu.Unlock()
		if changed {
			if reason != "" {
				p.logger.Warn("ha: stepping down", "reason", reason)
			} else {
				p.logger.Info("ha: healthy again; back to backup")
			}
			sp.SetFault(reason)
		}
		select {
		case <-t.C:
		case <-p.stop:
			return
		}
	}
}

// trackInterval is how often track looks at the interface and the pools.
const trackInterval = 50 * time.Millisecond

func anyUsable(pools []*upstream.Pool) bool {
	for _, pl := range pools {
		for _, b := range pl.Backends() {
			if st := b.State(); st == upstream.StateUp || st == upstream.StateSlowStart {
				return true
			}
		}
	}
	return false
}

// resign steps down before the other planes stop: a master advertises priority 0, releases
// its addresses and waits (within ctx, at most a master-down interval) until another director
// advertises, so that the director keeps forwarding what still reaches it meanwhile.
func (p *haPlane) resign(ctx context.Context) {
	p.mu.Lock()
	sp, h := p.speaker, p.cfg
	p.mu.Unlock()
	if sp == nil {
		return
	}
	mdi := vrrp.NewMachine(vrrp.Config{Priority: uint8(h.Priority), Interval: h.AdvertInterval.Duration}).MasterDownInterval()
	ctx, cancel := context.WithTimeout(ctx, mdi)
	defer cancel()
	sp.Resign(ctx)
}

// Shutdown stops the speaker (resigning first if resign did not), the tracker, the flow sync
// and gives the addresses up.
func (p *haPlane) Shutdown(context.Context) error {
	p.mu.Lock()
	if p.stopped || p.cfg == nil {
		p.stopped = true
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	close(p.stop)
	sp, addrs, sync := p.speaker, p.addrs, p.sync
	p.mu.Unlock()
	<-p.done
	err := sp.Close()
	if sync != nil {
		sync.close()
	}
	return errors.Join(err, addrs.Close())
}

// HAStatus is what `ballast ctl ha`, the status page and /metrics show; nil without ha.
func (p *haPlane) HAStatus() *admin.HAView {
	p.mu.Lock()
	sp, h, addrs, sync := p.speaker, p.cfg, p.addrs, p.sync
	p.mu.Unlock()
	if sp == nil {
		return nil
	}
	st := sp.Status()
	v := &admin.HAView{
		State: st.State.String(), Priority: int(st.Priority), ConfiguredPriority: int(st.ConfiguredPriority),
		MasterPriority: int(st.MasterPriority), Interface: h.Interface, VRID: int(st.VRID), Address: st.Addr.String(),
		AdvertInterval: st.Interval.String(), MasterAdvertInterval: st.MasterInterval.String(), Fault: st.Fault,
		Since: st.Since, AdvertsSent: st.AdvertsSent, AdvertsReceived: st.AdvertsReceived, Transitions: st.Transitions,
		BecameMaster: st.BecameMaster, Errors: st.Errors, OtherVRID: st.OtherVRID, AddrMismatch: st.AddrMismatch,
		Preempt: h.Preempt, Peers: h.UnicastPeers, ARPAnswered: addrs.Answered(),
	}
	if st.Master.IsValid() {
		v.Master = st.Master.String()
	}
	for _, a := range addrs.All() {
		v.Addresses = append(v.Addresses, a.String())
	}
	sort.Strings(v.Addresses)
	if sync != nil {
		v.FlowSync = sync.status()
	}
	return v
}
