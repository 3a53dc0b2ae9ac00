package vrrp

import (
	"fmt"
	"net/netip"
	"time"
)

// State is a virtual router's state.
type State uint8

// The states. Initialize is RFC 9568's (not started, or stopped); Fault is keepalived's: the
// router takes no part in the election (its interface is down or what it serves is not usable).
const (
	Initialize State = iota
	Backup
	Master
	Fault
)

func (s State) String() string {
	switch s {
	case Initialize:
		return "initialize"
	case Backup:
		return "backup"
	case Master:
		return "master"
	case Fault:
		return "fault"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Priorities with a meaning of their own (RFC 9568 §5.2.4).
const (
	PriorityStop  = 0   // sent by a master that stops: the backups take over after Skew_Time
	PriorityOwner = 255 // the address owner: master at once
)

// Config is one virtual router's configuration, as the state machine needs it.
type Config struct {
	VRID     uint8
	Priority uint8 // 1-255
	// Interval is the Advertisement_Interval, a multiple of 10 ms from 10 ms to 40.95 s.
	Interval time.Duration
	// Preempt lets a higher-priority backup take over from a lower-priority master.
	Preempt bool
	// PreemptDelay (keepalived's preempt_delay): once a backup first hears a lower-priority
	// master, it keeps accepting it for this long before preempting.
	PreemptDelay time.Duration
	// Addr is this router's own address on the interface, the adverts' source: it breaks
	// ties between equal priorities (the higher address wins).
	Addr netip.Addr
	// Announce is how many gratuitous ARPs a new master sends at once, and again after
	// AnnounceDelay (keepalived's garp_master_repeat and garp_master_delay); AnnounceRefresh,
	// if set, repeats them as long as it is master (garp_master_refresh).
	Announce        int
	AnnounceDelay   time.Duration
	AnnounceRefresh time.Duration
}

// Defaults of Config, keepalived's.
const (
	DefaultInterval      = time.Second
	DefaultAnnounce      = 5
	DefaultAnnounceDelay = 5 * time.Second
	MinInterval          = 10 * time.Millisecond
	MaxInterval          = 4095 * 10 * time.Millisecond
)

// ActionKind is what the caller must do.
type ActionKind uint8

// The actions.
const (
	// SendAdvert: send an advertisement with Action.Priority.
	SendAdvert ActionKind = iota + 1
	// Claim: take the virtual addresses (become their owner, answer ARP for them).
	Claim
	// Release: give them up.
	Release
	// Announce: send Action.Count gratuitous ARPs (NAs) for every address.
	Announce
	// Transition: the state changed from Action.From to Action.To, for Action.Reason.
	Transition
	// AdoptInterval: a master advertises another interval (Action.Interval, from Action.Peer)
	// than ours; it is adopted as Master_Adver_Interval (RFC 9568 §6.4.2). Log it.
	AdoptInterval
)

func (k ActionKind) String() string {
	switch k {
	case SendAdvert:
		return "send-advert"
	case Claim:
		return "claim"
	case Release:
		return "release"
	case Announce:
		return "announce"
	case Transition:
		return "transition"
	case AdoptInterval:
		return "adopt-interval"
	}
	return fmt.Sprintf("action(%d)", uint8(k))
}

// Action is one thing the caller must do, in order.
type Action struct {
	Kind     ActionKind
	Priority uint8         // SendAdvert
	Count    int           // Announce
	From, To State         // Transition
	Reason   string        // Transition
	Peer     netip.Addr    // AdoptInterval
	Interval time.Duration // AdoptInterval
}

func (a Action) String() string {
	switch a.Kind {
	case SendAdvert:
		return fmt.Sprintf("send-advert(%d)", a.Priority)
	case Announce:
		return fmt.Sprintf("announce(%d)", a.Count)
	case Transition:
		return fmt.Sprintf("%s->%s(%s)", a.From, a.To, a.Reason)
	case AdoptInterval:
		return fmt.Sprintf("adopt-interval(%v from %s)", a.Interval, a.Peer)
	}
	return a.Kind.String()
}

// Advert is a received advertisement, already validated (version, type, VRID, length,
// checksum, TTL): see Parse.
type Advert struct {
	From     netip.Addr
	Priority uint8
	Interval time.Duration
	Addrs    []netip.Addr
}

// Transition reasons.
const (
	ReasonStart          = "start"
	ReasonOwner          = "address owner"
	ReasonMasterDown     = "master down"
	ReasonHigherPriority = "higher priority advert"
	ReasonFault          = "fault"
	ReasonRecovered      = "fault cleared"
	ReasonShutdown       = "shutdown"
)

// Machine is the VRRPv3 state machine of one virtual router (RFC 9568 §6.4, with keepalived's
// preempt_delay, fault state, gratuitous ARP repeats and its immediate advert on hearing a
// lower-priority master). It does no I/O and reads no clock: the caller feeds it events with
// the time they happened and carries out the actions it returns, and calls Timer when
// Deadline is reached. It is not safe for concurrent use.
type Machine struct {
	cfg      Config
	priority uint8 // current (effective) priority
	state    State

	masterAdverInterval time.Duration
	master              netip.Addr // the current master's address (ours when master)
	masterPriority      uint8

	adverAt      time.Time // master: next advert
	masterDownAt time.Time // backup: Master_Down_Timer
	announceAt   time.Time // master: next gratuitous ARP burst
	preemptAt    time.Time // backup: when a lower-priority master may be preempted
	faulted      bool
	stopped      bool
}

// NewMachine returns a machine in Initialize; Start starts it.
func NewMachine(c Config) *Machine {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Announce == 0 {
		c.Announce = DefaultAnnounce
	}
	if c.AnnounceDelay == 0 {
		c.AnnounceDelay = DefaultAnnounceDelay
	}
	return &Machine{cfg: c, priority: c.Priority, masterAdverInterval: c.Interval}
}

// State is the current state.
func (m *Machine) State() State { return m.state }

// Priority is the priority the machine advertises (0 while in fault).
func (m *Machine) Priority() uint8 { return m.priority }

// Master is the current master's address: ours when master, the last master heard when
// backup (invalid when none was heard).
func (m *Machine) Master() netip.Addr { return m.master }

// MasterPriority is the priority the current master last advertised.
func (m *Machine) MasterPriority() uint8 { return m.masterPriority }

// MasterAdverInterval is the interval the machine times the master by (the master's own when
// heard).
func (m *Machine) MasterAdverInterval() time.Duration { return m.masterAdverInterval }

// Config is the machine's configuration.
func (m *Machine) Config() Config { return m.cfg }

// SkewTime is (256 − Priority) × Master_Adver_Interval / 256.
func (m *Machine) SkewTime() time.Duration {
	return time.Duration(256-int64(m.priority)) * m.masterAdverInterval / 256
}

// MasterDownInterval is 3 × Master_Adver_Interval + Skew_Time.
func (m *Machine) MasterDownInterval() time.Duration {
	return 3*m.masterAdverInterval + m.SkewTime()
}

// Deadline is when Timer must next be called; the zero time if no timer runs.
func (m *Machine) Deadline() time.Time {
	var d time.Time
	for _, t := range []time.Time{m.adverAt, m.masterDownAt, m.announceAt} {
		if !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	return d
}

// Start leaves Initialize: the address owner becomes master at once, any other router backup
// with its Master_Down_Timer set.
func (m *Machine) Start(now time.Time) []Action {
	if m.state != Initialize || m.stopped {
		return nil
	}
	if m.faulted {
		return m.to(nil, Fault, ReasonFault)
	}
	if m.priority == PriorityOwner {
		return m.becomeMaster(now, nil, ReasonOwner)
	}
	return m.becomeBackup(now, nil, ReasonStart)
}

// Timer runs every timer that is due at now.
func (m *Machine) Timer(now time.Time) []Action {
	var acts []Action
	switch m.state {
	case Backup:
		if due(m.masterDownAt, now) {
			acts = m.becomeMaster(now, acts, ReasonMasterDown)
		}
	case Master:
		if due(m.adverAt, now) {
			acts = append(acts, Action{Kind: SendAdvert, Priority: m.priority})
			m.adverAt = m.adverAt.Add(m.cfg.Interval)
			if !m.adverAt.After(now) { // late (a stalled caller): no burst of catch-up adverts
				m.adverAt = now.Add(m.cfg.Interval)
			}
		}
		if due(m.announceAt, now) {
			acts = append(acts, Action{Kind: Announce, Count: m.cfg.Announce})
			m.announceAt = time.Time{}
			if m.cfg.AnnounceRefresh > 0 {
				m.announceAt = now.Add(m.cfg.AnnounceRefresh)
			}
		}
	}
	return acts
}

// Advert handles a received advertisement.
func (m *Machine) Advert(now time.Time, a Advert) []Action {
	switch m.state {
	case Backup:
		return m.backupAdvert(now, a)
	case Master:
		return m.masterAdvert(now, a)
	case Fault:
		if a.Priority != PriorityStop {
			m.master, m.masterPriority = a.From, a.Priority
		}
	}
	return nil
}

func (m *Machine) backupAdvert(now time.Time, a Advert) []Action {
	if a.Priority == PriorityStop {
		// The master stops: take over after Skew_Time only.
		m.masterDownAt = now.Add(m.SkewTime())
		return nil
	}
	lower := a.Priority < m.priority
	holding := m.cfg.PreemptDelay > 0 && (m.preemptAt.IsZero() || m.preemptAt.After(now))
	if !m.cfg.Preempt || !lower || holding {
		var acts []Action
		if a.Interval != m.masterAdverInterval {
			if a.Interval != m.cfg.Interval {
				acts = append(acts, Action{Kind: AdoptInterval, Peer: a.From, Interval: a.Interval})
			}
			m.masterAdverInterval = a.Interval
		}
		m.masterDownAt = now.Add(m.MasterDownInterval())
		m.master, m.masterPriority = a.From, a.Priority
		if m.cfg.PreemptDelay > 0 {
			if !lower {
				m.preemptAt = time.Time{}
			} else if m.preemptAt.IsZero() {
				m.preemptAt = now.Add(m.cfg.PreemptDelay)
			}
		}
		return acts
	}
	// A lower-priority master and we preempt: ignore it; the Master_Down_Timer keeps running.
	m.master, m.masterPriority = a.From, a.Priority
	return nil
}

func (m *Machine) masterAdvert(now time.Time, a Advert) []Action {
	if a.Priority == PriorityStop {
		// Another master stops: answer at once so that its backups hear us.
		m.adverAt = now.Add(m.cfg.Interval)
		return []Action{{Kind: SendAdvert, Priority: m.priority}}
	}
	if a.Priority > m.priority || (a.Priority == m.priority && addrGreater(a.From, m.cfg.Addr)) {
		var acts []Action
		if a.Interval != m.masterAdverInterval && a.Interval != m.cfg.Interval {
			acts = append(acts, Action{Kind: AdoptInterval, Peer: a.From, Interval: a.Interval})
		}
		m.masterAdverInterval = a.Interval
		m.master, m.masterPriority = a.From, a.Priority
		m.adverAt, m.announceAt = time.Time{}, time.Time{}
		acts = append(acts, Action{Kind: Release})
		acts = m.to(acts, Backup, ReasonHigherPriority)
		m.masterDownAt = now.Add(m.MasterDownInterval())
		return acts
	}
	if a.From == m.cfg.Addr {
		return nil // our own advert looped back
	}
	// A lower-priority master (after a partition healed, say): advertise now, so that it
	// steps down within one of its intervals rather than ours, and announce the addresses
	// again, since hosts may have followed the other master's announcements meanwhile
	// (keepalived does both: "forcing new election", garp_lower_prio_repeat).
	m.adverAt = now.Add(m.cfg.Interval)
	return []Action{{Kind: SendAdvert, Priority: m.priority}, {Kind: Announce, Count: m.cfg.Announce}}
}

// SetPriority changes the configured priority (1-255). A master advertises the new one at
// once; in fault it applies when the fault clears.
func (m *Machine) SetPriority(now time.Time, p uint8) []Action {
	if p == PriorityStop {
		p = 1
	}
	m.cfg.Priority = p
	if m.faulted || p == m.priority {
		return nil
	}
	m.priority = p
	switch m.state {
	case Master:
		m.adverAt = now.Add(m.cfg.Interval)
		return []Action{{Kind: SendAdvert, Priority: p}}
	case Backup:
		if p == PriorityOwner {
			return m.becomeMaster(now, nil, ReasonOwner)
		}
		m.preemptAt = time.Time{}
	}
	return nil
}

// SetFault enters (on) or leaves the fault state: a master first advertises priority 0 and
// releases the addresses, so that a backup takes over after Skew_Time; a router in fault
// sends nothing and takes nothing; leaving it, the router is a backup again.
func (m *Machine) SetFault(now time.Time, on bool) []Action {
	if on == m.faulted {
		return nil
	}
	m.faulted = on
	if on {
		m.priority = 0
		var acts []Action
		switch m.state {
		case Master:
			acts = append(acts, Action{Kind: SendAdvert, Priority: PriorityStop}, Action{Kind: Release})
			fallthrough
		case Backup:
			acts = m.to(acts, Fault, ReasonFault)
		}
		return acts
	}
	m.priority = m.cfg.Priority
	if m.state != Fault {
		return nil
	}
	m.masterAdverInterval = m.cfg.Interval
	return m.becomeBackup(now, nil, ReasonRecovered)
}

// Shutdown stops the machine: a master advertises priority 0 and releases the addresses.
func (m *Machine) Shutdown(now time.Time) []Action {
	if m.stopped {
		return nil
	}
	m.stopped = true
	var acts []Action
	if m.state == Master {
		acts = append(acts, Action{Kind: SendAdvert, Priority: PriorityStop}, Action{Kind: Release})
	}
	if m.state != Initialize {
		acts = m.to(acts, Initialize, ReasonShutdown)
	}
	return acts
}

func (m *Machine) becomeMaster(now time.Time, acts []Action, reason string) []Action {
	m.masterDownAt, m.preemptAt = time.Time{}, time.Time{}
	m.master, m.masterPriority = m.cfg.Addr, m.priority
	m.masterAdverInterval = m.cfg.Interval
	// The advert first, so that the old master (if any) lets go before our ARPs.
	acts = append(acts, Action{Kind: SendAdvert, Priority: m.priority}, Action{Kind: Claim},
		Action{Kind: Announce, Count: m.cfg.Announce})
	acts = m.to(acts, Master, reason)
	m.adverAt = now.Add(m.cfg.Interval)
	m.announceAt = time.Time{}
	if m.cfg.AnnounceDelay > 0 {
		m.announceAt = now.Add(m.cfg.AnnounceDelay)
	} else if m.cfg.AnnounceRefresh > 0 {
		m.announceAt = now.Add(m.cfg.AnnounceRefresh)
	}
	return acts
}

func (m *Machine) becomeBackup(now time.Time, acts []Action, reason string) []Action {
	m.adverAt, m.announceAt = time.Time{}, time.Time{}
	acts = m.to(acts, Backup, reason)
	m.masterDownAt = now.Add(m.MasterDownInterval())
	return acts
}

func (m *Machine) to(acts []Action, s State, reason string) []Action {
	if s != Master {
		m.adverAt, m.announceAt = time.Time{}, time.Time{}
	}
	if s != Backup {
		m.masterDownAt, m.preemptAt = time.Time{}, time.Time{}
	}
	if s == Fault || s == Initialize {
		if m.master == m.cfg.Addr {
			m.master, m.masterPriority = netip.Addr{}, 0
		}
	}
	from := m.state
	m.state = s
	return append(acts, Action{Kind: Transition, From: from, To: s, Reason: reason})
}

func due(t, now time.Time) bool { return !t.IsZero() && !now.Before(t) }

// addrGreater compares addresses as unsigned integers in network byte order (RFC 9568 §6.4.3).
func addrGreater(a, b netip.Addr) bool { return a.Compare(b) > 0 }
