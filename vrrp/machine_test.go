package vrrp

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	addrA = netip.MustParseAddr("10.0.0.2")
	addrB = netip.MustParseAddr("10.0.0.3")
	addrC = netip.MustParseAddr("10.0.0.1")
)

// step is one event fed to a machine at a time offset, and what must come of it.
type step struct {
	at    time.Duration
	ev    string // "start", "timer", "advert", "prio", "fault", "clear", "shutdown"
	adv   Advert
	prio  uint8
	want  string        // the actions, as Action.String joined by " "
	state State         // the state after the step
	next  time.Duration // the deadline after the step, as an offset; -1: none
}

func run(t *testing.T, c Config, steps []step) {
	t.Helper()
	t0 := time.Unix(1000, 0)
	m := NewMachine(c)
	for i, s := range steps {
		now := t0.Add(s.at)
		var acts []Action
		switch s.ev {
		case "start":
			acts = m.Start(now)
		case "timer":
			acts = m.Timer(now)
		case "advert":
			acts = m.Advert(now, s.adv)
		case "prio":
			acts = m.SetPriority(now, s.prio)
		case "fault":
			acts = m.SetFault(now, true)
		case "clear":
			acts = m.SetFault(now, false)
		case "shutdown":
			acts = m.Shutdown(now)
		default:
			t.Fatalf("step %d: unknown event %q", i, s.ev)
		}
		got := make([]string, len(acts))
		for j, a := range acts {
			got[j] = a.String()
		}
		if g := strings.Join(got, " "); g != s.want {
			t.Errorf("step %d (%s at %v): actions %q, want %q", i, s.ev, s.at, g, s.want)
		}
		if m.State() != s.state {
			t.Errorf("step %d (%s at %v): state %s, want %s", i, s.ev, s.at, m.State(), s.state)
		}
		var next time.Duration = -1
		if d := m.Deadline(); !d.IsZero() {
			next = d.Sub(t0)
		}
		if next != s.next {
			t.Errorf("step %d (%s at %v): deadline %v, want %v", i, s.ev, s.at, next, s.next)
		}
	}
}

func adv(from netip.Addr, prio uint8, iv time.Duration) Advert {
	return Advert{From: from, Priority: prio, Interval: iv}
}

const ms = time.Millisecond

func TestMachine(t *testing.T) {
	// Priority 100 at 1 s: Skew_Time = 156/256 s = 609.375 ms, Master_Down_Interval 3.609375 s.
	base := Config{VRID: 51, Priority: 100, Interval: time.Second, Preempt: true, Addr: addrA}
	const mdi = 3609375 * time.Microsecond
	const skew = 609375 * time.Microsecond
	with := func(f func(*Config)) Config { c := base; f(&c); return c }
	cases := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"no master heard: master after the master-down interval", base, []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: mdi - ms, ev: "timer", want: "", state: Backup, next: mdi},
			{at: mdi, ev: "timer", want: "send-advert(100) claim announce(5) backup->master(master down)", state: Master, next: mdi + time.Second},
			{at: mdi + time.Second, ev: "timer", want: "send-advert(100)", state: Master, next: mdi + 2*time.Second},
			{at: mdi + 2*time.Second, ev: "timer", want: "send-advert(100)", state: Master, next: mdi + 3*time.Second},
			{at: mdi + 5*time.Second, ev: "timer", want: "send-advert(100) announce(5)", state: Master, next: mdi + 6*time.Second},
		}},
		{"a master's adverts keep a backup", base, []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: time.Second, ev: "advert", adv: adv(addrB, 200, time.Second), want: "", state: Backup, next: time.Second + mdi},
			{at: 4 * time.Second, ev: "advert", adv: adv(addrB, 200, time.Second), want: "", state: Backup, next: 4*time.Second + mdi},
			{at: 4*time.Second + mdi, ev: "timer", want: "send-advert(100) claim announce(5) backup->master(master down)", state: Master, next: 5*time.Second + mdi},
		}},
		{"priority 0 from the master: over after Skew_Time", base, []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: time.Second, ev: "advert", adv: adv(addrB, 200, time.Second), want: "", state: Backup, next: time.Second + mdi},
			{at: 2 * time.Second, ev: "advert", adv: adv(addrB, 0, time.Second), want: "", state: Backup, next: 2*time.Second + skew},
			{at: 2*time.Second + skew, ev: "timer", want: "send-advert(100) claim announce(5) backup->master(master down)", state: Master, next: 3*time.Second + skew},
		}},
		{"preempt: a lower-priority master is ignored and replaced", base, []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: time.Second, ev: "advert", adv: adv(addrB, 50, time.Second), want: "", state: Backup, next: mdi},
			{at: 2 * time.Second, ev: "advert", adv: adv(addrB, 50, time.Second), want: "", state: Backup, next: mdi},
			{at: mdi, ev: "timer", want: "send-advert(100) claim announce(5) backup->master(master down)", state: Master, next: mdi + time.Second},
		}},
		{"no preempt: a lower-priority master keeps it", with(func(c *Config) { c.Preempt = false }), []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: time.Second, ev: "advert", adv: adv(addrB, 50, time.Second), want: "", state: Backup, next: time.Second + mdi},
			{at: 2 * time.Second, ev: "advert", adv: adv(addrB, 50, time.Second), want: "", state: Backup, next: 2*time.Second + mdi},
		}},
		{"preempt_delay: the lower master is accepted for the delay, then replaced", with(func(c *Config) { c.PreemptDelay = 5 * time.Second }), []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: time.Second, ev: "advert", adv: adv(addrB, 50, time.Second), want: "", state: Backup, next: time.Second + mdi},
			{at: 5 * time.Second, ev: "advert", adv: adv(addrB, 50, time.Second), want: "", state: Backup, next: 5*time.Second + mdi},
			{at: 6 * time.Second, ev: "advert", adv: adv(addrB, 50, time.Second), want: "", state: Backup, next: 5*time.Second + mdi},
			{at: 5*time.Second + mdi, ev: "timer", want: "send-advert(100) claim announce(5) backup->master(master down)", state: Master, next: 6*time.Second + mdi},
		}},
		{"preempt_delay restarts when a higher master is heard", with(func(c *Config) { c.PreemptDelay = 5 * time.Second }), []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: time.Second, ev: "advert", adv: adv(addrB, 50, time.Second), want: "", state: Backup, next: time.Second + mdi},
			{at: 2 * time.Second, ev: "advert", adv: adv(addrB, 150, time.Second), want: "", state: Backup, next: 2*time.Second + mdi},
			{at: 3 * time.Second, ev: "advert", adv: adv(addrB, 50, time.Second), want: "", state: Backup, next: 3*time.Second + mdi},
			{at: 7 * time.Second, ev: "advert", adv: adv(addrB, 50, time.Second), want: "", state: Backup, next: 7*time.Second + mdi},
			// 3 s + 5 s: the delay is over, the lower master is ignored from now on.
			{at: 8 * time.Second, ev: "advert", adv: adv(addrB, 50, time.Second), want: "", state: Backup, next: 7*time.Second + mdi},
			{at: 9 * time.Second, ev: "advert", adv: adv(addrB, 50, time.Second), want: "", state: Backup, next: 7*time.Second + mdi},
			{at: 7*time.Second + mdi, ev: "timer", want: "send-advert(100) claim announce(5) backup->master(master down)", state: Master, next: 8*time.Second + mdi},
		}},
		{"interval mismatch: the master's interval is adopted (RFC 9568 6.4.2)", base, []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			// 3 × 200 ms + 156/256 × 200 ms = 721.875 ms
			{at: time.Second, ev: "advert", adv: adv(addrB, 200, 200*ms), want: "adopt-interval(200ms from 10.0.0.3)", state: Backup, next: time.Second + 721875*time.Microsecond},
			{at: 1200 * ms, ev: "advert", adv: adv(addrB, 200, 200*ms), want: "", state: Backup, next: 1200*ms + 721875*time.Microsecond},
			// Our own interval again: adopted silently.
			{at: 1400 * ms, ev: "advert", adv: adv(addrB, 200, time.Second), want: "", state: Backup, next: 1400*ms + mdi},
		}},
		{"master: higher priority wins", base, []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: mdi, ev: "timer", want: "send-advert(100) claim announce(5) backup->master(master down)", state: Master, next: mdi + time.Second},
			{at: mdi + 500*ms, ev: "advert", adv: adv(addrB, 101, time.Second), want: "release master->backup(higher priority advert)", state: Backup, next: mdi + 500*ms + mdi},
		}},
		{"master: equal priority, the higher address wins", base, []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: mdi, ev: "timer", want: "send-advert(100) claim announce(5) backup->master(master down)", state: Master, next: mdi + time.Second},
			{at: mdi + 100*ms, ev: "advert", adv: adv(addrC, 100, time.Second), want: "send-advert(100) announce(5)", state: Master, next: mdi + 1100*ms},
			{at: mdi + 200*ms, ev: "advert", adv: adv(addrB, 100, time.Second), want: "release master->backup(higher priority advert)", state: Backup, next: mdi + 200*ms + mdi},
		}},
		{"master: a lower-priority master is answered at once, and the addresses announced again", base, []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: mdi, ev: "timer", want: "send-advert(100) claim announce(5) backup->master(master down)", state: Master, next: mdi + time.Second},
			{at: mdi + 300*ms, ev: "advert", adv: adv(addrB, 90, time.Second), want: "send-advert(100) announce(5)", state: Master, next: mdi + 1300*ms},
			{at: mdi + 400*ms, ev: "advert", adv: adv(addrB, 0, time.Second), want: "send-advert(100)", state: Master, next: mdi + 1400*ms},
			{at: mdi + 500*ms, ev: "advert", adv: adv(addrA, 100, time.Second), want: "", state: Master, next: mdi + 1400*ms},
		}},
		{"the address owner is master at once", with(func(c *Config) { c.Priority = 255 }), []step{
			{at: 0, ev: "start", want: "send-advert(255) claim announce(5) initialize->master(address owner)", state: Master, next: time.Second},
		}},
		{"shutdown as master: priority 0 and release", base, []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: mdi, ev: "timer", want: "send-advert(100) claim announce(5) backup->master(master down)", state: Master, next: mdi + time.Second},
			{at: mdi + 10*ms, ev: "shutdown", want: "send-advert(0) release master->initialize(shutdown)", state: Initialize, next: -1},
			{at: mdi + 20*ms, ev: "shutdown", want: "", state: Initialize, next: -1},
			{at: mdi + 30*ms, ev: "start", want: "", state: Initialize, next: -1},
		}},
		{"shutdown as backup: silent", base, []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: time.Second, ev: "shutdown", want: "backup->initialize(shutdown)", state: Initialize, next: -1},
		}},
		{"fault as master: priority 0, release; cleared: backup", base, []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: mdi, ev: "timer", want: "send-advert(100) claim announce(5) backup->master(master down)", state: Master, next: mdi + time.Second},
			{at: mdi + 10*ms, ev: "fault", want: "send-advert(0) release master->fault(fault)", state: Fault, next: -1},
			{at: mdi + 20*ms, ev: "advert", adv: adv(addrB, 50, time.Second), want: "", state: Fault, next: -1},
			{at: mdi + 30*ms, ev: "prio", prio: 120, want: "", state: Fault, next: -1},
			{at: 10 * time.Second, ev: "clear", want: "fault->backup(fault cleared)", state: Backup, next: 10*time.Second + 3*time.Second + 136*time.Second/256},
		}},
		{"priority change as master is advertised at once", base, []step{
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: mdi},
			{at: mdi, ev: "timer", want: "send-advert(100) claim announce(5) backup->master(master down)", state: Master, next: mdi + time.Second},
			{at: mdi + 100*ms, ev: "prio", prio: 150, want: "send-advert(150)", state: Master, next: mdi + 1100*ms},
			{at: mdi + 200*ms, ev: "prio", prio: 150, want: "", state: Master, next: mdi + 1100*ms},
		}},
		{"a fault before start starts in fault", base, []step{
			{at: 0, ev: "fault", want: "", state: Initialize, next: -1},
			{at: 0, ev: "start", want: "initialize->fault(fault)", state: Fault, next: -1},
			{at: time.Second, ev: "clear", want: "fault->backup(fault cleared)", state: Backup, next: time.Second + mdi},
		}},
		{"100 ms adverts, priority 150", with(func(c *Config) { c.Interval = 100 * ms; c.Priority = 150 }), []step{
			// 300 ms + 106/256 × 100 ms = 341.40625 ms
			{at: 0, ev: "start", want: "initialize->backup(start)", state: Backup, next: 341406250},
			{at: 341406250, ev: "timer", want: "send-advert(150) claim announce(5) backup->master(master down)", state: Master, next: 441406250},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { run(t, c.cfg, c.steps) })
	}
}

// TestMachineIntervals: Skew_Time and Master_Down_Interval follow RFC 9568 §6.1.
func TestMachineIntervals(t *testing.T) {
	for _, c := range []struct {
		prio       uint8
		iv         time.Duration
		skew, down time.Duration
	}{
		{255, time.Second, 3906250, 3003906250},
		{1, time.Second, 996093750, 3996093750},
		{100, 10 * ms, 6093750, 36093750},
		{254, MaxInterval, 319921875, 3*MaxInterval + 319921875},
	} {
		m := NewMachine(Config{Priority: c.prio, Interval: c.iv, Addr: addrA})
		if m.SkewTime() != c.skew || m.MasterDownInterval() != c.down {
			t.Errorf("priority %d, %v: skew %v down %v, want %v %v", c.prio, c.iv, m.SkewTime(), m.MasterDownInterval(), c.skew, c.down)
		}
	}
}

// net is a simulated segment of machines with a virtual clock: an advert sent by one reaches
// every other that is connected to it, after delay.
type simNet struct {
	t      *testing.T
	now    time.Time
	delay  time.Duration
	ms     []*Machine
	cut    map[[2]int]bool // partitions: no adverts between the two
	down   map[int]bool    // machines gone (a machine lost)
	queue  []simAdvert
	claims map[int]bool // who holds the addresses
	log    []string
}

type simAdvert struct {
	at   time.Time
	from int
	adv  Advert
}

func newSimNet(t *testing.T, cfgs ...Config) *simNet {
	n := &simNet{t: t, now: time.Unix(1000, 0), delay: ms, cut: map[[2]int]bool{}, down: map[int]bool{}, claims: map[int]bool{}}
	for _, c := range cfgs {
		n.ms = append(n.ms, NewMachine(c))
	}
	return n
}

func (n *simNet) apply(i int, acts []Action) {
	for _, a := range acts {
		switch a.Kind {
		case SendAdvert:
			if n.down[i] {
				continue
			}
			n.queue = append(n.queue, simAdvert{at: n.now.Add(n.delay), from: i,
				adv: Advert{From: n.ms[i].Config().Addr, Priority: a.Priority, Interval: n.ms[i].Config().Interval}})
		case Claim:
			n.claims[i] = true
		case Release:
			delete(n.claims, i)
		case Transition:
			n.log = append(n.log, fmt.Sprintf("%v %d %s", n.now.Sub(time.Unix(1000, 0)), i, a))
		}
	}
}

// runUntil advances the clock to end, delivering adverts and firing timers in time order.
func (n *simNet) runUntil(end time.Time) {
	for {
		next, who := end, -1
		for i, m := range n.ms {
			if d := m.Deadline(); !d.IsZero() && d.Before(next) && !n.down[i] {
				next, who = d, i
			}
		}
		qi := -1
		for j, q := range n.queue {
			if !q.at.After(next) {
				next, qi, who = q.at, j, -1
			}
		}
		if next.After(end) || (who < 0 && qi < 0) {
			n.now = end
			return
		}
		n.now = next
		if qi >= 0 {
			q := n.queue[qi]
			n.queue = slices.Delete(n.queue, qi, qi+1)
			for i, m := range n.ms {
				if i == q.from || n.down[i] || n.cut[[2]int{min(i, q.from), max(i, q.from)}] {
					continue
				}
				n.apply(i, m.Advert(n.now, q.adv))
			}
			continue
		}
		n.apply(who, n.ms[who].Timer(n.now))
	}
}

func (n *simNet) masters() []int {
	var out []int
	for i, m := range n.ms {
		if m.State() == Master && !n.down[i] {
			out = append(out, i)
		}
	}
	return out
}

// TestMachinesElect: two and three routers on one segment elect one master, fail over when it
// is lost or stops, preempt back, and after a partition heals leave one master within one
// advert interval.
func TestMachinesElect(t *testing.T) {
	iv := 100 * ms
	a := Config{VRID: 1, Priority: 150, Interval: iv, Preempt: true, Addr: addrA}
	b := Config{VRID: 1, Priority: 100, Interval: iv, Preempt: true, Addr: addrB}
	n := newSimNet(t, a, b)
	for i, m := range n.ms {
		n.apply(i, m.Start(n.now))
	}
	n.runUntil(n.now.Add(2 * time.Second))
	if got := n.masters(); !slices.Equal(got, []int{0}) {
		t.Fatalf("masters %v after start, want [0] (priority 150): %v", got, n.log)
	}
	if !n.claims[0] || n.claims[1] {
		t.Fatalf("claims %v, want only 0", n.claims)
	}

	// The master's machine is lost: the backup takes over within its Master_Down_Interval
	// (3 × 100 ms + 156/256 × 100 ms) of the last advert it heard.
	lost := n.now
	n.down[0] = true
	mdi := n.ms[1].MasterDownInterval()
	n.runUntil(lost.Add(mdi + 2*ms))
	if got := n.masters(); !slices.Equal(got, []int{1}) {
		t.Fatalf("masters %v %v after losing 0, want [1]: %v", got, mdi, n.log)
	}

	// It comes back: preemption returns mastership within its own Master_Down_Interval.
	n.down[0] = false
	back := n.now
	n.ms[0] = NewMachine(a)
	n.apply(0, n.ms[0].Start(n.now))
	n.runUntil(back.Add(n.ms[0].MasterDownInterval() + 5*ms))
	if got := n.masters(); !slices.Equal(got, []int{0}) {
		t.Fatalf("masters %v after 0 came back, want [0]: %v", got, n.log)
	}
	if !n.claims[0] || n.claims[1] {
		t.Fatalf("claims %v after preemption, want only 0", n.claims)
	}

	// A graceful stop: the backup takes over after its Skew_Time, not the whole interval.
	stop := n.now
	n.apply(0, n.ms[0].Shutdown(n.now))
	n.runUntil(stop.Add(n.ms[1].SkewTime() + 2*ms))
	if got := n.masters(); !slices.Equal(got, []int{1}) {
		t.Fatalf("masters %v %v after 0 stopped, want [1]", got, n.ms[1].SkewTime())
	}

	// Three routers and a partition: both sides elect a master; when it heals, one master
	// remains within one advert interval.
	c := Config{VRID: 1, Priority: 50, Interval: iv, Preempt: true, Addr: addrC}
	n = newSimNet(t, a, b, c)
	for i, m := range n.ms {
		n.apply(i, m.Start(n.now))
	}
	n.runUntil(n.now.Add(time.Second))
	n.cut[[2]int{0, 1}], n.cut[[2]int{0, 2}] = true, true
	n.runUntil(n.now.Add(time.Second))
	if got := n.masters(); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("masters %v in the partition, want [0 1]", got)
	}
	healed := n.now
	clear(n.cut)
	n.runUntil(healed.Add(iv + 2*n.delay))
	if got := n.masters(); !slices.Equal(got, []int{0}) {
		t.Fatalf("masters %v one advert after the partition healed, want [0]: %v", got, n.log)
	}
	if len(n.claims) != 1 || !n.claims[0] {
		t.Fatalf("claims %v after the partition healed, want only 0", n.claims)
	}
}
