package vrrp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
)

// SpeakerConfig configures a Speaker.
type SpeakerConfig struct {
	Machine Config // VRID, priority, interval, preemption; Addr defaults to the interface's
	Iface   string
	// Peers are the unicast peers adverts go to; none: the multicast group 224.0.0.18.
	Peers    []netip.Addr
	Checksum Checksum
	// Addrs are the addresses the adverts list (RFC 9568 §5.2.9; keepalived checks them
	// against its own virtual_ipaddress list).
	Addrs []netip.Addr
	// Owner claims, releases and announces the addresses; nil: nothing is claimed.
	Owner Owner
	// OnTransition, if set, is called (on the speaker's goroutine) after every state change.
	OnTransition func(from, to State, reason string)
	Logger       *slog.Logger
}

// Status is a speaker's state and counters, as `ballast ctl ha` shows them.
type Status struct {
	State              State
	Priority           uint8 // advertised (0 in fault)
	ConfiguredPriority uint8
	Master             netip.Addr // the current master (ours when master)
	MasterPriority     uint8
	Addr               netip.Addr // this router's own address
	VRID               uint8
	Interval           time.Duration
	MasterInterval     time.Duration
	Fault              string // why it is in fault, if it is
	Since              time.Time
	AdvertsSent        uint64
	AdvertsReceived    uint64 // valid adverts of this VRID
	Transitions        uint64
	BecameMaster       uint64
	// Errors counts received packets discarded, by reason: ttl, version, type, length,
	// checksum, interval, peer (not a configured unicast peer), mode (multicast when unicast
	// is configured or the reverse), send (adverts that could not be sent).
	Errors map[string]uint64
	// OtherVRID counts valid adverts of other virtual routers on the segment.
	OtherVRID uint64
	// AddrMismatch counts adverts whose address list differs from ours (accepted anyway).
	AddrMismatch uint64
}

// Speaker runs one virtual router: it sends and receives adverts on the interface and drives
// a Machine, and its Owner, from them. See the package comment.
type Speaker struct {
	cfg    SpeakerConfig
	log    *slog.Logger
	conn   *ipv4.PacketConn
	raw    net.PacketConn
	ifi    *net.Interface
	m      *Machine
	events chan func(time.Time) []Action
	closed chan struct{}
	done   chan struct{}
	stop   sync.Once

	mu     sync.Mutex // guards status
	status Status

	sent, received, transitions, masters, otherVRID, mismatch atomic.Uint64
	errs                                                      map[string]*atomic.Uint64

	resigned  atomic.Bool   // Resign ran: the machine is stopped, adverts still read
	heard     chan struct{} // closed when, resigned, another router's advert arrives
	heardOnce sync.Once
}

var errNames = []string{"ttl", "version", "type", "length", "checksum", "interval", "peer", "mode", "send"}

// NewSpeaker opens the raw socket on the interface (in the calling thread's network
// namespace) and starts the machine: it is a backup (or master, for priority 255) at once.
func NewSpeaker(c SpeakerConfig) (*Speaker, error) {
	ifi, err := net.InterfaceByName(c.Iface)
	if err != nil {
		return nil, fmt.Errorf("vrrp: interface %q: %w", c.Iface, err)
	}
	if !c.Machine.Addr.IsValid() {
		if c.Machine.Addr, err = primaryAddr(ifi, c.Addrs); err != nil {
			return nil, err
		}
	}
	if c.Machine.Priority == 0 {
		return nil, errors.New("vrrp: priority 0 is reserved")
	}
	if c.Machine.Interval == 0 {
		c.Machine.Interval = DefaultInterval
	}
	if _, err := (&Packet{Interval: c.Machine.Interval}).Marshal(nil, c.Machine.Addr, Group, c.Checksum); err != nil {
		return nil, err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	raw, err := net.ListenPacket(fmt.Sprintf("ip4:%d", IPProtocol), "0.0.0.0")
	if err != nil {
		return nil, fmt.Errorf("vrrp: raw socket: %w", err)
	}
	pc := ipv4.NewPacketConn(raw)
	setup := func() error {
		if err := pc.SetControlMessage(ipv4.FlagTTL|ipv4.FlagDst|ipv4.FlagInterface, true); err != nil {
			return err
		}
		if err := pc.SetTOS(0xc0); err != nil { // internetwork control, as keepalived
			return err
		}
		if len(c.Peers) > 0 {
			return pc.SetTTL(TTL)
		}
		if err := pc.JoinGroup(ifi, &net.IPAddr{IP: Group.AsSlice()}); err != nil {
			return err
		}
		if err := pc.SetMulticastInterface(ifi); err != nil {
			return err
		}
		if err := pc.SetMulticastTTL(TTL); err != nil {
			return err
		}
		return pc.SetMulticastLoopback(false)
	}
	if err := setup(); err != nil {
		raw.Close()
		return nil, fmt.Errorf("vrrp: raw socket on %s: %w", c.Iface, err)
	}
	s := &Speaker{
		cfg: c, log: c.Logger.With("vrid", c.Machine.VRID, "interface", c.Iface), conn: pc, raw: raw, ifi: ifi,
		m: NewMachine(c.Machine), events: make(chan func(time.Time) []Action, 64),
		closed: make(chan struct{}), done: make(chan struct{}), errs: map[string]*atomic.Uint64{},
		heard: make(chan struct{}),
	}
	for _, n := range errNames {
		s.errs[n] = new(atomic.Uint64)
	}
	s.status = Status{VRID: c.Machine.VRID, Addr: c.Machine.Addr, Interval: c.Machine.Interval, ConfiguredPriority: c.Machine.Priority}
	ready := make(chan struct{})
	go s.loop(ready)
	go s.read()
	<-ready
	return s, nil
}

// primaryAddr is the interface's first IPv4 address that is not a virtual one.
func primaryAddr(ifi *net.Interface, virtual []netip.Addr) (netip.Addr, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("vrrp: addresses of %s: %w", ifi.Name, err)
	}
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil || !p.Addr().Is4() || slices.Contains(virtual, p.Addr()) {
			continue
		}
		return p.Addr(), nil
	}
	return netip.Addr{}, fmt.Errorf("vrrp: interface %s has no IPv4 address of its own to send adverts from", ifi.Name)
}

// loop owns the machine: it starts it, runs its timers and the events handed to it.
func (s *Speaker) loop(ready chan<- struct{}) {
	defer close(s.done)
	s.do(s.m.Start(time.Now()))
	close(ready)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Stop()
		var tc <-chan time.Time
		if d := s.m.Deadline(); !d.IsZero() {
			timer.Reset(time.Until(d))
			tc = timer.C
		}
		select {
		case <-tc:
			s.do(s.m.Timer(time.Now()))
		case f := <-s.events:
			s.do(f(time.Now()))
		case <-s.closed:
			s.do(s.m.Shutdown(time.Now()))
			return
		}
	}
}

// do carries out actions, in order, and publishes the new status.
func (s *Speaker) do(acts []Action) {
	for _, a := range acts {
		switch a.Kind {
		case SendAdvert:
			s.send(a.Priority)
		case Claim:
			if s.cfg.Owner != nil {
				if err := s.cfg.Owner.Claim(); err != nil {
					s.log.Error("vrrp: claiming the addresses", "err", err)
				}
			}
		case Release:
			if s.cfg.Owner != nil {
				if err := s.cfg.Owner.Release(); err != nil {
					s.log.Error("vrrp: releasing the addresses", "err", err)
				}
			}
		case Announce:
			if s.cfg.Owner != nil {
				if err := s.cfg.Owner.Announce(a.Count); err != nil {
					s.log.Warn("vrrp: announcing the addresses", "err", err)
				}
			}
		case AdoptInterval:
			s.log.Warn("vrrp: the master advertises another interval; adopted (RFC 9568 6.4.2)",
				"master", a.Peer, "interval", a.Interval, "ours", s.cfg.Machine.Interval)
		case Transition:
			s.transitions.Add(1)
			if a.To == Master {
				s.masters.Add(1)
			}
			s.log.Info("vrrp: "+a.To.String(), "from", a.From.String(), "reason", a.Reason, "priority", s.m.Priority())
			s.mu.Lock()
			s.status.Since = time.Now()
			s.mu.Unlock()
			if s.cfg.OnTransition != nil {
				s.cfg.OnTransition(a.From, a.To, a.Reason)
			}
		}
	}
	s.mu.Lock()
	st := &s.status
	st.State, st.Priority, st.ConfiguredPriority = s.m.State(), s.m.Priority(), s.m.Config().Priority
	st.Master, st.MasterPriority, st.MasterInterval = s.m.Master(), s.m.MasterPriority(), s.m.MasterAdverInterval()
	s.mu.Unlock()
}

func (s *Speaker) send(prio uint8) {
	p := Packet{VRID: s.cfg.Machine.VRID, Priority: prio, Interval: s.cfg.Machine.Interval, Addrs: s.addrs()}
	dsts := s.cfg.Peers
	if len(dsts) == 0 {
		dsts = []netip.Addr{Group}
	}
	cm := &ipv4.ControlMessage{Src: s.cfg.Machine.Addr.AsSlice(), IfIndex: s.ifi.Index}
	var buf [headerLen + 4*MaxAddrs]byte
	for _, dst := range dsts {
		b, err := p.Marshal(buf[:0], s.cfg.Machine.Addr, dst, s.cfg.Checksum)
		if err == nil {
			_, err = s.conn.WriteTo(b, cm, &net.IPAddr{IP: dst.AsSlice()})
		}
		if err != nil {
			s.errs["send"].Add(1)
			s.log.Debug("vrrp: sending an advert", "to", dst, "err", err)
			continue
		}
		s.sent.Add(1)
	}
}

func (s *Speaker) addrs() []netip.Addr {
	if a, ok := s.cfg.Owner.(interface{ All() []netip.Addr }); ok && s.cfg.Addrs == nil {
		return a.All()
	}
	return s.cfg.Addrs
}

// read receives adverts and hands the valid ones of this VRID to the loop.
func (s *Speaker) read() {
	buf := make([]byte, 1500)
	for {
		n, cm, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			select {
			case <-s.closed:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if cm == nil || cm.IfIndex != s.ifi.Index {
			continue
		}
		src, _ := netip.AddrFromSlice(from.(*net.IPAddr).IP.To4())
		dst, _ := netip.AddrFromSlice(cm.Dst.To4())
		if src == s.cfg.Machine.Addr {
			continue // our own
		}
		p, err := Parse(buf[:n], src, dst, cm.TTL, s.cfg.Checksum)
		if err != nil {
			s.countErr(err)
			continue
		}
		if p.VRID != s.cfg.Machine.VRID {
			s.otherVRID.Add(1)
			continue
		}
		if len(s.cfg.Peers) > 0 {
			if dst.IsMulticast() {
				s.errs["mode"].Add(1)
				continue
			}
			if !slices.Contains(s.cfg.Peers, src) {
				s.errs["peer"].Add(1)
				continue
			}
		} else if dst != Group {
			s.errs["mode"].Add(1)
			continue
		}
		s.received.Add(1)
		if s.resigned.Load() && p.Priority != PriorityStop {
			s.heardOnce.Do(func() { close(s.heard) })
		}
		if !sameSet(p.Addrs, s.addrs()) {
			if s.mismatch.Add(1) == 1 {
				s.log.Warn("vrrp: an advert lists other addresses than ours", "from", src, "addresses", p.Addrs)
			}
		}
		a := Advert{From: src, Priority: p.Priority, Interval: p.Interval, Addrs: p.Addrs}
		select {
		case s.events <- func(now time.Time) []Action { return s.m.Advert(now, a) }:
		case <-s.closed:
			return
		}
	}
}

func (s *Speaker) countErr(err error) {
	for name, e := range map[string]error{"ttl": ErrTTL, "version": ErrVersion, "type": ErrType, "length": ErrLength, "checksum": ErrChecksum, "interval": ErrInterval} {
		if errors.Is(err, e) {
			s.errs[name].Add(1)
			return
		}
	}
}

func sameSet(a, b []netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// post runs f on the speaker's goroutine; false if the speaker is closed.
func (s *Speaker) post(f func(time.Time) []Action) bool {
	select {
	case s.events <- f:
		return true
	case <-s.closed:
		return false
	}
}

// SetPriority changes the priority (1-255).
func (s *Speaker) SetPriority(p uint8) {
	s.post(func(now time.Time) []Action { return s.m.SetPriority(now, p) })
}

// SetFault enters the fault state with a reason, or leaves it (reason "").
func (s *Speaker) SetFault(reason string) {
	s.post(func(now time.Time) []Action {
		s.mu.Lock()
		s.status.Fault = reason
		s.mu.Unlock()
		return s.m.SetFault(now, reason != "")
	})
}

// Status returns the current state and counters.
func (s *Speaker) Status() Status {
	s.mu.Lock()
	st := s.status
	s.mu.Unlock()
	st.AdvertsSent, st.AdvertsReceived = s.sent.Load(), s.received.Load()
	st.Transitions, st.BecameMaster = s.transitions.Load(), s.masters.Load()
	st.OtherVRID, st.AddrMismatch = s.otherVRID.Load(), s.mismatch.Load()
	st.Errors = make(map[string]uint64, len(s.errs))
	for n, v := range s.errs {
		st.Errors[n] = v.Load()
	}
	return st
}

// Resign steps down as Close does (priority 0, addresses released) but keeps reading adverts,
// and, if it was master, waits until another router advertises (it has taken over) or ctx
// ends: so that the caller can keep forwarding what still reaches it until then. Close must
// follow.
func (s *Speaker) Resign(ctx context.Context) {
	was := make(chan State, 1)
	if !s.post(func(now time.Time) []Action {
		was <- s.m.State()
		s.resigned.Store(true)
		return s.m.Shutdown(now)
	}) {
		return
	}
	if <-was != Master {
		return
	}
	select {
	case <-s.heard:
	case <-ctx.Done():
	}
}

// Close stops the speaker gracefully: a master advertises priority 0 and releases its
// addresses, so that a backup takes over after its Skew_Time. The Owner is not closed.
func (s *Speaker) Close() error {
	s.stop.Do(func() { close(s.closed) })
	<-s.done
	return s.raw.Close()
}

// Wait blocks until the speaker is in state want or ctx ends.
func (s *Speaker) Wait(ctx context.Context, want State) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if s.Status().State == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("vrrp: still %s, not %s: %w", s.Status().State, want, ctx.Err())
		case <-t.C:
		}
	}
}
