package director

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// wlcScale gives effective weights enough resolution: a real server with no active flow
// has 100 × its weight.
const wlcScale = 100

// wlcWeight approximates LVS's weighted least-connection, which sends each new connection to
// the real server with the least active/weight: new flows are shared in proportion to
// weight/(active+1), recomputed every Options.Interval. Between two recomputations the shares
// do not follow the counts, so a burst of new flows is spread rather than all given to the
// least loaded server (which is what LVS would do, one connection at a time).
func wlcWeight(weight, active int) int {
	return max(1, (weight*wlcScale+active/2)/(active+1))
}

// tick is the periodic control step: next hops, active flows, wlc weights, freeing IDs.
func (s *state) tick() {
	if err := s.d.writeConfig(); err != nil { // the clock flows are stamped with
		s.d.opts.Logger.Error("director: publishing the clock", "err", err)
	}
	s.refreshMACs()
	active, live := s.d.countFlows()
	for k, vs := range s.vips {
		vs.active = active[k]
		if vs.vip.Scheduler != WLC {
			continue
		}
		changed := false
		for _, r := range vs.reals {
			if w, ok := vs.weights[s.reals[r.Addr].id]; ok && w != s.weight(vs, r) {
				changed = true
			}
		}
		if changed {
			if err := s.rebuild(vs); err != nil {
				s.d.opts.Logger.Error("director: wlc re-weighting", "vip", vs.vip.String(), "err", err)
			}
		}
	}
	s.freeUnused(live)
}

// refreshMACs follows next-hop MAC changes and retries unresolved real servers.
func (s *state) refreshMACs() {
	if s.d.opts.Mode == NAT || s.d.ifindex == 0 {
		return
	}
	neigh := s.d.neighbours()
	for _, rs := range s.reals {
		if rs.static {
			continue
		}
		var mac net.HardwareAddr
		if hop, err := s.d.nextHop(rs.addr); err == nil {
			mac = neigh[hop]
		}
		if mac == nil {
			// Unknown (or forgotten) by the kernel: nudge it to resolve, keep the last MAC.
			if mac, _ = s.d.nextHopMAC(rs.addr, false); mac == nil {
				continue
			}
		}
		was := rs.mac
		rs.mac = mac
		if err := s.writeReal(rs); err != nil {
			s.d.opts.Logger.Error("director: writing real server", "real", rs.addr, "err", err)
		}
		if was == nil {
			s.rebuildWith(rs.addr)
		}
	}
}

// freeUnused releases the IDs of real servers no VIP lists and no recent flow uses.
func (s *state) freeUnused(live map[uint32]bool) {
	listed := map[netip.Addr]bool{}
	for _, vs := range s.vips {
		for _, r := range vs.reals {
			listed[r.Addr] = true
		}
	}
	for addr, rs := range s.reals {
		if listed[addr] || live[rs.id] {
			continue
		}
		if err := s.d.objs.Reals.Put(rs.id, directorRealDef{}); err != nil {
			continue
		}
		if rs.stopHC != nil {
			rs.stopHC()
		}
		delete(s.reals, addr)
		delete(s.byID, rs.id)
		s.freeID = append(s.freeID, rs.id)
	}
}

// flowBatch is how many connection table entries countFlows reads per system call.
const flowBatch = 4096

// countFlows walks the connection table: active flows by VIP and real ID, and the real IDs
// any flow seen within two ActiveTimeouts still uses. It reads the table in batches: a full
// table read one entry at a time costs two system calls per entry every Interval, CPU taken
// from the machine the director balances for.
func (d *Director) countFlows() (map[vipKey]map[uint32]int, map[uint32]bool) {
	now := monotonic()
	timeout := uint64(d.opts.ActiveTimeout)
	active := map[vipKey]map[uint32]int{}
	live := map[uint32]bool{}
	add := func(k *directorFlowKey, v *directorConn) {
		age := now - v.SeenNs
		if v.SeenNs > now {
			age = 0
		}
		if age < 2*timeout {
			live[v.RealId] = true
		}
		if v.Flags&connFlagClosing != 0 || age > timeout {
			return
		}
		vk := vipKey{fromBE32(k.Dst), htons(k.Dport), Proto(k.Proto)}
		if active[vk] == nil {
			active[vk] = map[uint32]int{}
		}
		active[vk][v.RealId]++
	}
	if d.flowKeys == nil {
		d.flowKeys, d.flowVals = make([]directorFlowKey, flowBatch), make([]directorConn, flowBatch)
	}
	var cursor ebpf.MapBatchCursor
	for {
		n, err := d.objs.Conns.BatchLookup(&cursor, d.flowKeys, d.flowVals, nil)
		for i := range n {
			add(&d.flowKeys[i], &d.flowVals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return active, live
		}
		if err != nil {
			break // batches refused (an old kernel): count again one entry at a time
		}
	}
	clear(active)
	clear(live)
	var k directorFlowKey
	var v directorConn
	it := d.objs.Conns.Iterate()
	for it.Next(&k, &v) {
		add(&k, &v)
	}
	return active, live
}

// monotonic is bpf_ktime_get_ns's clock.
func monotonic() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// startHealth probes rs every HealthCheck.Interval from the director's namespace until the
// real server is forgotten or the Director closes.
func (s *state) startHealth(rs *realState, port uint16) {
	h := s.d.opts.Health
	if h == nil {
		return
	}
	if h.Port != 0 {
		port = h.Port
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	rs.stopHC = func() { cancel(); <-done }
	addr := netip.AddrPortFrom(rs.addr, port).String()
	d := s.d
	go func() {
		defer close(done)
		runIn(ctx, d.ns, func(ctx context.Context) {
			up, streak := true, 0
			t := time.NewTicker(h.Interval)
			defer t.Stop()
			for {
				pctx, pcancel := context.WithTimeout(ctx, h.Timeout)
				err := h.Prober.Probe(pctx, addr)
				pcancel()
				if ctx.Err() != nil {
					return
				}
				if (err == nil) == up {
					streak = 0
				} else if streak++; (up && streak >= h.Fall) || (!up && streak >= h.Rise) {
					up, streak = !up, 0
					verdict, detail := up, err
					select { // not d.do: freeUnused may be waiting for this goroutine to end
					case d.work <- func() { s.setHealthy(rs, verdict, detail) }:
					case <-ctx.Done():
						return
					case <-d.stop:
						return
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}()
}

func (s *state) setHealthy(rs *realState, up bool, err error) {
	if s.reals[rs.addr] != rs || rs.healthy == up {
		return
	}
	rs.healthy = up
	if up {
		s.d.opts.Logger.Info("director: real server up", "real", rs.addr)
	} else {
		s.d.opts.Logger.Warn("director: real server down", "real", rs.addr, "err", err)
	}
	if err := s.writeReal(rs); err != nil {
		s.d.opts.Logger.Error("director: writing real server", "real", rs.addr, "err", err)
	}
	s.rebuildWith(rs.addr)
}

// stopHealth stops every probe goroutine; the worker calls it as it exits.
func (s *state) stopHealth() {
	for _, rs := range s.reals {
		if rs.stopHC != nil {
			rs.stopHC()
		}
	}
}
