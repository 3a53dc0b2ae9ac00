package director

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The NAT guard. A NAT director's host forwards IPv4 (bpf_fib_lookup needs ip_forward=1), but
// the director's own packets never take the kernel's forwarding path: XDP, or its tc half,
// rewrites and sends them all. If the process dies (SIGKILL, a crash), its programs go with it,
// and the kernel would forward the real servers' replies that still reach this host (their
// neighbour entry of the gateway is stale until the new master announces itself) without
// rewriting them: the client answers a reply from the real server's address with a reset, and
// the flow is lost although the new master has it. So, while a NAT VIP is configured, the
// director keeps one policy routing rule per real server and VIP port and protocol:
//
//	from REAL iif IFACE ipproto tcp|udp sport PORT lookup -> blackhole   (priority 100)
//
// which the kernel's forwarding obeys and the programs do not (their FIB look-ups are
// BPF_FIB_LOOKUP_DIRECT, the main table). Rules survive the process: a dead director's kernel
// drops those replies, the real servers retransmit, and the new master answers. Local traffic
// is unaffected (the local table's rule, priority 0, comes first). New removes the rules a
// killed process left; Close removes its own (an HA master has handed over by then).

const (
	guardPriority  = 100
	guardProtocol  = 0xba // the rules' FRA_PROTOCOL: Ballast's, so that stale ones can be found
	frActBlackhole = 6    // FR_ACT_BLACKHOLE
)

type guardRule struct {
	real  netip.Addr
	proto Proto
	port  uint16
}

func (g guardRule) rule(iface string) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = unix.AF_INET
	r.Priority = guardPriority
	r.Protocol = guardProtocol
	r.Type = frActBlackhole
	r.Table = 0
	r.IifName = iface
	r.Src = &net.IPNet{IP: g.real.AsSlice(), Mask: net.CIDRMask(32, 32)}
	r.IPProto = int(g.proto)
	r.Sport = netlink.NewRulePortRange(g.port, g.port)
	return r
}

// clearGuard removes every guard rule of the namespace (a killed director's, at start).
func clearGuard() error {
	rules, err := netlink.RuleList(unix.AF_INET)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range rules {
		if r.Protocol == guardProtocol && r.Priority == guardPriority {
			if err := netlink.RuleDel(&r); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// syncGuard makes the rules match the NAT VIPs' real servers (worker goroutine only).
func (s *state) syncGuard() {
	d := s.d
	if d.opts.Mode != NAT || d.opts.Iface == "" || d.opts.NoGuard {
		return
	}
	want := map[guardRule]bool{}
	for _, vs := range s.vips {
		for _, r := range vs.reals {
			want[guardRule{r.Addr, vs.vip.Proto, vs.vip.Port}] = true
		}
	}
	if s.guard == nil {
		s.guard = map[guardRule]bool{}
	}
	for g := range s.guard {
		if !want[g] {
			if err := netlink.RuleDel(g.rule(d.opts.Iface)); err != nil && !errors.Is(err, os.ErrNotExist) {
				d.opts.Logger.Warn("director: removing a NAT guard rule", "rule", fmt.Sprint(g), "err", err)
				continue
			}
			delete(s.guard, g)
		}
	}
	for g := range want {
		if s.guard[g] {
			continue
		}
		if err := netlink.RuleAdd(g.rule(d.opts.Iface)); err != nil && !errors.Is(err, os.ErrExist) {
			d.opts.Logger.Warn("director: adding a NAT guard rule", "rule", fmt.Sprint(g), "err", err)
			continue
		}
		s.guard[g] = true
	}
}

// GuardRules lists the NAT guard rules in force (for tests and the status page).
func (d *Director) GuardRules() (int, error) {
	var n int
	err := d.do(func() error { n = len(d.st.guard); return nil })
	return n, err
}
