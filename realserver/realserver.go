package realserver

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Mode is how the director reaches this real server.
type Mode string

// The modes a real server takes part in (NAT needs no preparation on the real server).
const (
	DR  Mode = "dr"
	TUN Mode = "tun"
)

// Options says what to prepare.
type Options struct {
	VIPs []netip.Addr // IPv4 only
	Mode Mode
	// Iface is the interface the director's packets arrive on: required for TUN (the
	// decapsulation program is attached there); for DR it also gets the ARP sysctls.
	Iface string
	// SecondChance (DR) are the other real servers of the VIPs: a TCP segment the director
	// marked with one of them as its second-chance server (GLB's second chance, director
	// Options.SecondChance), for which this host holds no connection, is passed on to it by a
	// tcx ingress program on Iface (required).
	SecondChance []netip.Addr
}

// RealServer is a prepared host; Close undoes the preparation.
type RealServer struct {
	ns      netns.NsHandle
	sysctls []sysctl // old values, in the order they were set
	addrs   []*netlink.Addr
	loUp    bool // lo was down and Setup brought it up
	objs    decapObjects
	loaded  bool
	tcx     link.Link
}

type sysctl struct{ path, old string }

// Setup prepares the host. On error it undoes whatever it had done.
func Setup(o Options) (_ *RealServer, err error) {
	if o.Mode != DR && o.Mode != TUN {
		return nil, fmt.Errorf("realserver: mode %q: want dr or tun", o.Mode)
	}
	if len(o.VIPs) == 0 {
		return nil, errors.New("realserver: no VIP")
	}
	for _, v := range o.VIPs {
		if !v.Is4() {
			return nil, fmt.Errorf("realserver: VIP %s: only IPv4 is supported", v)
		}
	}
	if o.Mode == TUN && o.Iface == "" {
		return nil, errors.New("realserver: tun mode needs the interface the tunnel arrives on (--iface)")
	}
	if len(o.SecondChance) > 0 && (o.Mode != DR || o.Iface == "") {
		return nil, errors.New("realserver: second chance is for dr mode and needs the interface the director's packets arrive on (--iface)")
	}
	for _, p := range o.SecondChance {
		if !p.Is4() {
			return nil, fmt.Errorf("realserver: second-chance peer %s: only IPv4 is supported", p)
		}
	}
	r := &RealServer{}
	if r.ns, err = netns.Get(); err != nil {
		return nil, fmt.Errorf("realserver: network namespace: %w", err)
	}
	defer func() {
		if err != nil {
			r.undo()
		}
	}()
	var iface netlink.Link
	if o.Iface != "" {
		if iface, err = netlink.LinkByName(o.Iface); err != nil {
			return nil, fmt.Errorf("realserver: interface %q: %w", o.Iface, err)
		}
	}
	if err := r.addVIPs(o.VIPs); err != nil {
		return nil, err
	}
	confs := []string{"all"}
	if o.Iface != "" {
		confs = append(confs, o.Iface)
	}
	for _, c := range confs {
		if err := r.set("net/ipv4/conf/"+c+"/arp_ignore", "1"); err != nil {
			return nil, err
		}
		if err := r.set("net/ipv4/conf/"+c+"/arp_announce", "2"); err != nil {
			return nil, err
		}
	}
	if o.Mode == TUN {
		if err := r.attachDecap(iface.Attrs().Index, o.VIPs, false); err != nil {
			return nil, err
		}
	}
	if len(o.SecondChance) > 0 {
		if err := r.attachDecap(iface.Attrs().Index, o.VIPs, true); err != nil {
			return nil, err
		}
		for _, p := range o.SecondChance {
			if err := r.objs.ScPeers.Put(p.As4(), uint8(1)); err != nil {
				return nil, fmt.Errorf("realserver: second-chance peer %s: %w", p, err)
			}
		}
	}
	return r, nil
}

func (r *RealServer) addVIPs(vips []netip.Addr) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("realserver: lo: %w", err)
	}
	if lo.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(lo); err != nil {
			return fmt.Errorf("realserver: bringing lo up: %w", err)
		}
		r.loUp = true
	}
	have, err := netlink.AddrList(lo, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("realserver: addresses of lo: %w", err)
	}
next:
	for _, v := range vips {
		for _, a := range have {
			if a.IP.Equal(v.AsSlice()) {
				continue next // already there (e.g. configured by hand): leave it on Close
			}
		}
		a := &netlink.Addr{IPNet: &net.IPNet{IP: v.AsSlice(), Mask: net.CIDRMask(32, 32)}}
		if err := netlink.AddrAdd(lo, a); err != nil {
			return fmt.Errorf("realserver: adding VIP %s to lo: %w", v, err)
		}
		r.addrs = append(r.addrs, a)
	}
	return nil
}

func (r *RealServer) set(path, value string) error {
	full := "/proc/sys/" + path
	old, err := os.ReadFile(full)
	if err != nil {
		return fmt.Errorf("realserver: %w", err)
	}
	if err := os.WriteFile(full, []byte(value), 0o644); err != nil {
		return fmt.Errorf("realserver: setting %s: %w", path, err)
	}
	r.sysctls = append(r.sysctls, sysctl{path, strings.TrimSpace(string(old))})
	return nil
}

// attachDecap loads the object and attaches its decapsulation program, or with secondChance
// its second-chance program, on ifindex.
func (r *RealServer) attachDecap(ifindex int, vips []netip.Addr, secondChance bool) error {
	if err := loadDecapObjects(&r.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("realserver: decapsulation program refused by the verifier: %+v", ve)
		}
		return fmt.Errorf("realserver: loading the decapsulation program: %w", err)
	}
	r.loaded = true
	for _, v := range vips {
		b := v.As4()
		if err := r.objs.DecapVips.Put(b, uint8(1)); err != nil {
			return fmt.Errorf("realserver: VIP %s: %w", v, err)
		}
	}
	prog := r.objs.BallastDecap
	if secondChance {
		prog = r.objs.BallastSecondChance
	}
	var err error
	r.tcx, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return fmt.Errorf("realserver: attaching the %s program (tcx ingress): %w", prog, err)
	}
	return nil
}

// SecondChanceStats counts what the second-chance program did: marked segments seen, those
// delivered here (a connection of this host), passed on to the second-chance server, and
// those naming a server not among Options.SecondChance (delivered here).
type SecondChanceStats struct{ Marked, Local, Passed, NoPeer uint64 }

// SecondChance reads the second-chance program's counters (zero without it).
func (r *RealServer) SecondChance() (SecondChanceStats, error) {
	var st SecondChanceStats
	if !r.loaded {
		return st, nil
	}
	for i, dst := range []*uint64{&st.Marked, &st.Local, &st.Passed, &st.NoPeer} {
		var per []uint64
		if err := r.objs.ScCounters.Lookup(uint32(i), &per); err != nil {
			return st, err
		}
		for _, v := range per {
			*dst += v
		}
	}
	return st, nil
}

// Close undoes Setup: the program is detached, the VIPs leave lo, the sysctls get their old
// values back. It returns the first errors met but undoes all it can.
func (r *RealServer) Close() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return fmt.Errorf("realserver: network namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(r.ns); err != nil {
		return fmt.Errorf("realserver: entering network namespace: %w", err)
	}
	err = r.undo()
	if serr := netns.Set(orig); serr != nil {
		panic(fmt.Sprintf("realserver: cannot return to the original network namespace: %v", serr))
	}
	return err
}

func (r *RealServer) undo() error {
	var errs []error
	if r.tcx != nil {
		errs = append(errs, r.tcx.Close())
		r.tcx = nil
	}
	if r.loaded {
		errs = append(errs, r.objs.Close())
		r.loaded = false
	}
	for i := len(r.sysctls) - 1; i >= 0; i-- {
		s := r.sysctls[i]
		if err := os.WriteFile("/proc/sys/"+s.path, []byte(s.old), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("realserver: restoring %s: %w", s.path, err))
		}
	}
	r.sysctls = nil
	if lo, err := netlink.LinkByName("lo"); err == nil {
		for _, a := range r.addrs {
			if err := netlink.AddrDel(lo, a); err != nil {
				errs = append(errs, fmt.Errorf("realserver: removing %s from lo: %w", a.IP, err))
			}
		}
		if r.loUp {
			errs = append(errs, netlink.LinkSetDown(lo))
		}
	}
	r.addrs, r.loUp = nil, false
	if r.ns.IsOpen() {
		r.ns.Close()
	}
	return errors.Join(errs...)
}
