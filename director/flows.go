package director

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// Flow is one established flow as directors share it: the client's 5-tuple towards the VIP and
// the real server it is on (by address: real IDs are each director's own).
type Flow struct {
	Client netip.AddrPort
	VIP    netip.AddrPort
	Proto  Proto
	Real   netip.Addr
}

func (f Flow) String() string {
	return fmt.Sprintf("%s -> %s/%s on %s", f.Client, f.VIP, f.Proto, f.Real)
}

func (f Flow) key() directorFlowKey {
	return directorFlowKey{
		Src: be32(f.Client.Addr()), Dst: be32(f.VIP.Addr()),
		Sport: htons(f.Client.Port()), Dport: htons(f.VIP.Port()), Proto: uint8(f.Proto),
	}
}

func flowOf(k directorFlowKey, real uint32) Flow {
	return Flow{
		Client: netip.AddrPortFrom(fromBE32(k.Src), htons(k.Sport)),
		VIP:    netip.AddrPortFrom(fromBE32(k.Dst), htons(k.Dport)),
		Proto:  Proto(k.Proto), Real: fromBE32(real),
	}
}

// FlowEvents reads the flows the program places, as it places them (new flows, and flows the
// director picked up established without knowing them). Only one may be open at a time; while
// it is, the program reports every new flow to it through a ring buffer of 256 KiB (some
// 10,000 flows): a reader that falls behind loses flows, counted as flow_event_lost.
type FlowEvents struct {
	d    *Director
	r    *ringbuf.Reader
	once sync.Once
}

var errFlowEventsOpen = errors.New("director: flow events are already being read")

// FlowEvents starts reporting new flows.
func (d *Director) FlowEvents() (*FlowEvents, error) {
	if !d.flowEvents.CompareAndSwap(false, true) {
		return nil, errFlowEventsOpen
	}
	r, err := ringbuf.NewReader(d.objs.FlowEvents)
	if err != nil {
		d.flowEvents.Store(false)
		return nil, fmt.Errorf("director: flow events: %w", err)
	}
	if err := d.do(func() error { return d.writeConfig() }); err != nil {
		r.Close()
		d.flowEvents.Store(false)
		return nil, err
	}
	return &FlowEvents{d: d, r: r}, nil
}

// Read appends to buf the flows reported until deadline (at least one, unless the deadline
// passes first or the reader is closed) and returns it; os.ErrDeadlineExceeded when none came.
func (e *FlowEvents) Read(buf []Flow, deadline time.Time) ([]Flow, error) {
	e.r.SetDeadline(deadline)
	var rec ringbuf.Record
	for {
		if err := e.r.ReadInto(&rec); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && len(buf) > 0 {
				return buf, nil
			}
			return buf, err
		}
		if len(rec.RawSample) < 20 {
			continue
		}
		s := rec.RawSample
		k := directorFlowKey{
			Src: binary.NativeEndian.Uint32(s[0:]), Dst: binary.NativeEndian.Uint32(s[4:]),
			Sport: binary.NativeEndian.Uint16(s[8:]), Dport: binary.NativeEndian.Uint16(s[10:]), Proto: s[12],
		}
		buf = append(buf, flowOf(k, binary.NativeEndian.Uint32(s[16:])))
		if e.r.AvailableBytes() == 0 {
			return buf, nil
		}
		e.r.SetDeadline(time.Now()) // take what is there without waiting again
	}
}

// Close stops the reports.
func (e *FlowEvents) Close() error {
	var err error
	e.once.Do(func() {
		err = e.r.Close()
		e.d.flowEvents.Store(false)
		_ = e.d.do(func() error { return e.d.writeConfig() })
	})
	return err
}

// InstallResult counts what InstallFlows did with each flow.
type InstallResult struct {
	Installed   int // into the connection table (and, in NAT, the reply table)
	UnknownVIP  int // the VIP is not one of this director's
	UnknownReal int // the real server is not one of the VIP's here
}

// InstallFlows puts flows other directors placed into the connection table, so that their
// packets keep their real server here however this director's table would place them (a
// failover from another director, a wlc table that differs, a real server added since). A
// flow of a VIP this director does not serve, or to a real server the VIP does not list here,
// is skipped and counted. An entry already present is replaced: the sender placed the flow.
func (d *Director) InstallFlows(flows []Flow) (InstallResult, error) {
	var res InstallResult
	err := d.do(func() error {
		now := monotonic()
		var errs []error
		for _, f := range flows {
			vs := d.st.vips[vipKey{f.VIP.Addr(), f.VIP.Port(), f.Proto}]
			if vs == nil {
				res.UnknownVIP++
				continue
			}
			rs := d.st.reals[f.Real]
			if rs == nil || !slicesContainsReal(vs.reals, f.Real) {
				res.UnknownReal++
				continue
			}
			k := f.key()
			if err := d.objs.Conns.Put(k, directorConn{RealId: rs.id, SeenNs: now}); err != nil {
				errs = append(errs, err)
				continue
			}
			if d.opts.Mode == NAT {
				reply := directorFlowKey{Src: be32(f.Real), Dst: k.Src, Sport: k.Dport, Dport: k.Sport, Proto: k.Proto}
				if err := d.objs.NatReplies.Put(reply, directorNatOrigin{VipAddr: k.Dst, VipPort: k.Dport}); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			res.Installed++
		}
		return errors.Join(errs...)
	})
	return res, err
}

func slicesContainsReal(rs []Real, a netip.Addr) bool {
	for _, r := range rs {
		if r.Addr == a {
			return true
		}
	}
	return false
}

// Flows returns the flows of the connection table seen within Options.ActiveTimeout and not
// closing (a full sync for a director that starts after them), at most max.
func (d *Director) Flows(max int) ([]Flow, error) {
	var out []Flow
	err := d.do(func() error {
		now, timeout := monotonic(), uint64(d.opts.ActiveTimeout)
		byID := make(map[uint32]netip.Addr, len(d.st.byID))
		for id, rs := range d.st.byID {
			byID[id] = rs.addr
		}
		var k directorFlowKey
		var v directorConn
		it := d.objs.Conns.Iterate()
		for it.Next(&k, &v) && len(out) < max {
			if v.Flags&connFlagClosing != 0 || (v.SeenNs < now && now-v.SeenNs > timeout) {
				continue
			}
			if a, ok := byID[v.RealId]; ok {
				out = append(out, flowOf(k, be32(a)))
			}
		}
		if err := it.Err(); err != nil && !errors.Is(err, ebpf.ErrIterationAborted) {
			return err
		}
		return nil
	})
	return out, err
}
