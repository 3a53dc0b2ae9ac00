package director

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"ballast/balance"
	"ballast/health"
)

// Mode is how the director hands a packet to a real server.
type Mode uint8

// The forwarding modes; the values are the BPF program's.
const (
	DR  Mode = 1 // rewrite the destination MAC; the real server answers the client directly
	TUN Mode = 2 // IPIP-encapsulate; the real server decapsulates and answers directly
	NAT Mode = 3 // rewrite the destination; replies must route back through the director
)

func (m Mode) String() string {
	switch m {
	case DR:
		return "dr"
	case TUN:
		return "tun"
	case NAT:
		return "nat"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode reads "dr", "tun" or "nat".
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{DR, TUN, NAT} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("director: unknown mode %q (want dr, tun or nat)", s)
}

// Defaults of Options.
const (
	DefaultMaxVIPs       = 16
	DefaultMaxReals      = 1024
	DefaultConnTableSize = 65536
	DefaultInterval      = time.Second
	DefaultActiveTimeout = 60 * time.Second
)

// Options configures a Director. Only Mode is required; Iface is required to attach.
type Options struct {
	// Iface is the interface the program is attached to; empty loads the program without
	// attaching it (for BPF_PROG_TEST_RUN), in which case MAC and Source must be given.
	Iface string
	// Native attaches in driver mode instead of generic (skb) mode.
	Native bool
	Mode   Mode
	// MAC is the source MAC of every frame sent; default the interface's.
	MAC net.HardwareAddr
	// Source is the outer source address of TUN packets; default the interface's first IPv4.
	Source netip.Addr
	// TableSize is every VIP's Maglev table size, a prime; default balance.MaglevDefaultSize.
	TableSize     int
	MaxVIPs       int // default DefaultMaxVIPs
	MaxReals      int // distinct real server addresses; default DefaultMaxReals
	ConnTableSize int // connection table entries (also the NAT reply table); default DefaultConnTableSize
	// Interval is the period of the control loop: next-hop MACs, active flow counts, wlc.
	Interval time.Duration
	// ActiveTimeout: a flow not seen for this long (or closed with FIN/RST) is not active.
	ActiveTimeout time.Duration
	// MoveDownFlows re-places the established flows of a down real server by the table;
	// otherwise they stay with it (for a server that is only briefly failing its checks).
	MoveDownFlows bool
	// Seed is the cluster seed mixed into every VIP's Maglev table (Table): directors with the
	// same seed and the same real servers build the same table, whatever order the real
	// servers came in and whatever IDs they got, so that any of them places a flow the same
	// way (several active directors behind ECMP). 0 is the table without a seed.
	Seed uint32
	// OwnMACOnly balances only the frames sent to the director's own MAC and passes the others
	// to the kernel (which drops them): on a segment with several active directors, a frame a
	// switch floods for a lost director's MAC reaches all of them, and each would forward it.
	OwnMACOnly bool
	// SecondChance (DR) is GLB's second chance: every table slot whose real server changed
	// remembers the previous one; a flow picked up established (not a SYN) on such a slot is
	// sent to the slot's real server with the previous one's address in the frame's source
	// MAC, and the real server's program (realserver.Options.SecondChance) passes the packet
	// to it when it holds no connection for it (docs/scale-out.md).
	SecondChance bool
	// NoGuard leaves out the NAT guard's policy routing rules (director/guard.go): then the
	// kernel of a killed NAT director forwards the real servers' replies unrewritten.
	NoGuard bool
	// Health enables active health checks of every real server's own address.
	Health *HealthCheck
	Logger *slog.Logger
}

// HealthCheck probes each real server at its own address. State is per real server address.
type HealthCheck struct {
	Prober   health.Prober // e.g. health.NewProber(config.HealthCheck{Type: "tcp"})
	Port     uint16        // 0: the port of the first VIP the real server serves
	Interval time.Duration // default 2s
	Timeout  time.Duration // default 1s
	Rise     int           // consecutive successes to come back up; default 2
	Fall     int           // consecutive failures to go down; default 3
}

func (o *Options) defaults() error {
	if o.Mode < DR || o.Mode > NAT {
		return fmt.Errorf("director: mode %d: want DR, TUN or NAT", o.Mode)
	}
	if o.TableSize == 0 {
		o.TableSize = balance.MaglevDefaultSize
	}
	if _, err := balance.MaglevTable([]string{"probe"}, []int{1}, o.TableSize); err != nil {
		return fmt.Errorf("director: table size: %w", err)
	}
	if o.MaxVIPs == 0 {
		o.MaxVIPs = DefaultMaxVIPs
	}
	if o.MaxReals == 0 {
		o.MaxReals = DefaultMaxReals
	}
	if o.ConnTableSize == 0 {
		o.ConnTableSize = DefaultConnTableSize
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.ActiveTimeout == 0 {
		o.ActiveTimeout = DefaultActiveTimeout
	}
	if uint64(o.MaxVIPs)*uint64(o.TableSize) > 1<<28 {
		return fmt.Errorf("director: %d VIPs × table size %d is too large", o.MaxVIPs, o.TableSize)
	}
	if o.Health != nil {
		hc := *o.Health // defaults go in a copy, not the caller's struct
		h := &hc
		o.Health = h
		if h.Prober == nil {
			return errors.New("director: health check without a prober")
		}
		if h.Interval == 0 {
			h.Interval = 2 * time.Second
		}
		if h.Timeout == 0 {
			h.Timeout = time.Second
		}
		if h.Rise == 0 {
			h.Rise = 2
		}
		if h.Fall == 0 {
			h.Fall = 3
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Director is a loaded (and possibly attached) XDP director. See the package comment.
type Director struct {
	opts    Options
	objs    directorObjects
	xdp     link.Link
	natTC   link.Link // NAT: the tc half, for what XDP passes on (bpf/nat_tc.h)
	ns      netns.NsHandle
	ifindex int

	work chan func()
	stop chan struct{}
	wg   sync.WaitGroup

	// Owned by the worker goroutine.
	st       state
	flowKeys []directorFlowKey // countFlows' batch buffers, reused every tick
	flowVals []directorConn

	tableWrites atomic.Uint64 // ring slots written, for tests and the status page
	flowEvents  atomic.Bool   // a FlowEvents reader is open: the program reports new flows
	closeOnce   sync.Once
}

// New loads the program and, with Options.Iface, attaches it. It must be called from the
// network namespace that holds the interface; the Director keeps working in that namespace.
func New(o Options) (*Director, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	d := &Director{opts: o, work: make(chan func()), stop: make(chan struct{})}
	d.st.init(d)
	var err error
	if d.ns, err = netns.Get(); err != nil {
		return nil, fmt.Errorf("director: current network namespace: %w", err)
	}
	if err := d.load(); err != nil {
		d.ns.Close()
		return nil, err
	}
	if err := d.attach(); err != nil {
		d.objs.Close()
		d.ns.Close()
		return nil, err
	}
	ready := make(chan error, 1)
	d.wg.Add(1)
	go d.worker(ready)
	if err := <-ready; err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func (d *Director) load() error {
	spec, err := loadDirector()
	if err != nil {
		return fmt.Errorf("director: BPF spec: %w", err)
	}
	o := d.opts
	spec.Maps[directorMapVips].MaxEntries = uint32(o.MaxVIPs)
	spec.Maps[directorMapVipStats].MaxEntries = uint32(o.MaxVIPs)
	spec.Maps[directorMapRing].MaxEntries = uint32(o.MaxVIPs * o.TableSize)
	spec.Maps[directorMapRingSecond].MaxEntries = uint32(o.MaxVIPs * o.TableSize)
	spec.Maps[directorMapReals].MaxEntries = uint32(o.MaxReals + 1) // ID 0 is "none"
	spec.Maps[directorMapRealStats].MaxEntries = uint32(o.MaxReals + 1)
	spec.Maps[directorMapConns].MaxEntries = uint32(o.ConnTableSize)
	spec.Maps[directorMapNatReplies].MaxEntries = uint32(o.ConnTableSize)
	if got := spec.Maps[directorMapCounters].MaxEntries; got != uint32(len(counterNames)) {
		return fmt.Errorf("director: BPF program has %d counters, Go names %d", got, len(counterNames))
	}
	if err := spec.LoadAndAssign(&d.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("director: BPF program refused by the verifier: %+v", ve)
		}
		return fmt.Errorf("director: loading BPF program: %w", err)
	}
	return nil
}

func (d *Director) attach() error {
	o := &d.opts
	if o.Iface == "" {
		if len(o.MAC) != 6 || (o.Mode == TUN && !o.Source.Is4()) {
			return errors.New("director: without an interface, Options.MAC (and Source for TUN) are required")
		}
		return d.writeConfig()
	}
	l, err := netlink.LinkByName(o.Iface)
	if err != nil {
		return fmt.Errorf("director: interface %q: %w", o.Iface, err)
	}
	d.ifindex = l.Attrs().Index
	if len(o.MAC) == 0 {
		o.MAC = l.Attrs().HardwareAddr
	}
	if len(o.MAC) != 6 {
		return fmt.Errorf("director: interface %q has no Ethernet address", o.Iface)
	}
	if !o.Source.IsValid() {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil || len(addrs) == 0 {
			if o.Mode == TUN {
				return fmt.Errorf("director: interface %q has no IPv4 address for the TUN outer source", o.Iface)
			}
		} else {
			o.Source, _ = netip.AddrFromSlice(addrs[0].IP.To4())
		}
	}
	if err := d.writeConfig(); err != nil {
		return err
	}
	flags := link.XDPGenericMode
	if o.Native {
		flags = link.XDPDriverMode
	}
	if o.Mode == NAT {
		// The tc half goes first, so that no packet XDP passes on finds it missing.
		d.natTC, err = link.AttachTCX(link.TCXOptions{Program: d.objs.BallastNatTc, Attach: ebpf.AttachTCXIngress, Interface: d.ifindex})
		if err != nil {
			return fmt.Errorf("director: attaching the NAT tc program to %q: %w", o.Iface, err)
		}
	}
	d.xdp, err = link.AttachXDP(link.XDPOptions{Program: d.objs.BallastDirector, Interface: d.ifindex, Flags: flags})
	if err != nil {
		if d.natTC != nil {
			d.natTC.Close()
		}
		return fmt.Errorf("director: attaching XDP to %q: %w", o.Iface, err)
	}
	return nil
}

// writeConfig publishes the director's MAC, TUN source and the clock the program stamps flows
// with (the program does not read the clock itself: see bpf/common.h, director_config).
func (d *Director) writeConfig() error {
	var c directorDirectorConfig
	copy(c.Mac[:], d.opts.MAC)
	if d.opts.Source.Is4() {
		c.Source = be32(d.opts.Source)
	}
	c.NowNs = monotonic()
	if d.flowEvents.Load() {
		c.Flags |= cfgFlagFlowEvents
	}
	if d.opts.OwnMACOnly {
		c.Flags |= cfgFlagOwnMAC
	}
	if d.opts.SecondChance {
		c.Flags |= cfgFlagSecondChance
	}
	return d.objs.Config.Put(uint32(0), c)
}

// worker runs every state change, locked to the Director's network namespace.
func (d *Director) worker(ready chan<- error) {
	defer d.wg.Done()
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	if err := netns.Set(d.ns); err != nil {
		ready <- fmt.Errorf("director: entering network namespace: %w", err)
		return
	}
	if d.opts.Mode == NAT && d.opts.Iface != "" && !d.opts.NoGuard {
		if err := clearGuard(); err != nil { // what a killed director left
			d.opts.Logger.Warn("director: removing stale NAT guard rules", "err", err)
		}
	}
	ready <- nil
	tick := time.NewTicker(d.opts.Interval)
	defer tick.Stop()
	for {
		select {
		case f := <-d.work:
			f()
		case <-tick.C:
			d.st.tick()
		case <-d.stop:
			d.st.stopHealth()
			return
		}
	}
}

var errClosed = errors.New("director: closed")

// do runs f on the worker goroutine and waits for it.
func (d *Director) do(f func() error) error {
	done := make(chan error, 1)
	select {
	case d.work <- func() { done <- f() }:
		return <-done
	case <-d.stop:
		return errClosed
	}
}

// Close detaches the program and frees everything. It is safe to call more than once.
func (d *Director) Close() error {
	var err error
	d.closeOnce.Do(func() {
		_ = d.do(func() error { // the guard rules go with a director that stops cleanly
			clear(d.st.vips)
			d.st.syncGuard()
			return nil
		})
		close(d.stop)
		d.wg.Wait()
		if d.xdp != nil {
			err = errors.Join(err, d.xdp.Close())
		}
		if d.natTC != nil {
			err = errors.Join(err, d.natTC.Close())
		}
		err = errors.Join(err, d.objs.Close())
		d.ns.Close()
	})
	return err
}

// TableWrites is the number of Maglev table slots written to the BPF map so far.
func (d *Director) TableWrites() uint64 { return d.tableWrites.Load() }

// runIn runs f with the calling goroutine in namespace ns (a probe's dial must start there).
func runIn(ctx context.Context, ns netns.NsHandle, f func(context.Context)) {
	runtime.LockOSThread()
	if err := netns.Set(ns); err != nil {
		// The thread may be half switched: let it end with the goroutine.
		return
	}
	f(ctx)
	// Left locked: the goroutine exits right after, taking the switched thread with it.
}

func be32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func fromBE32(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
