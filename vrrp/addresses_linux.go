package vrrp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Owner carries out a Machine's address actions.
type Owner interface {
	Claim() error             // the addresses become this router's
	Release() error           // they stop being this router's
	Announce(count int) error // count gratuitous ARPs for each address
}

// AddressOptions configure Addresses.
type AddressOptions struct {
	// Iface is the interface on which the addresses are answered for and announced.
	Iface string
	// Local addresses are added to lo while claimed, so that sockets bound to them receive
	// (listeners bind them beforehand with IP_FREEBIND). Answer addresses are only answered
	// for: traffic to them is taken before the local stack (the XDP director's VIPs, a NAT
	// gateway). Every Local address is answered for too.
	Local  []netip.Addr
	Answer []netip.Addr
}

// Addresses is the Owner of a virtual router's IPv4 addresses on Linux. While claimed, a tcx
// ingress program on the interface (bpf/arp.c) answers ARP requests for every address, and
// the Local ones are on lo. The kernel never answers for them itself: NewAddresses sets
// arp_ignore=1 (answer only for addresses on the interface asked) and arp_announce=2 on the
// interface. So the answers last exactly as long as the program's link, which this process
// holds: killed with SIGKILL, a master stops answering for its addresses at once and nothing
// it leaves behind attracts their traffic (the Local ones stay on lo until the next start,
// which removes them, or until Close). Announce sends gratuitous ARP requests (sender and
// target the address, as keepalived does).
//
// It must be created in the network namespace that holds the interface; its methods may then
// be called from any goroutine (they work in that namespace).
type Addresses struct {
	mu      sync.Mutex
	ns      netns.NsHandle
	nl      *netlink.Handle // bound to ns, whichever thread calls
	iface   *net.Interface
	lo      netlink.Link
	objs    arpObjects
	link    link.Link
	garp    *arp.Client
	local   []netip.Addr
	answer  []netip.Addr // local and answer-only, deduplicated
	claimed bool
	sysctls map[string]string // previous values, restored by Close
}

// NewAddresses loads and attaches the ARP responder (answering nothing until Claim), sets
// the interface's ARP sysctls and removes the Local addresses from lo if a previous run left
// them there.
func NewAddresses(o AddressOptions) (*Addresses, error) {
	ifi, err := net.InterfaceByName(o.Iface)
	if err != nil {
		return nil, fmt.Errorf("vrrp: interface %q: %w", o.Iface, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("vrrp: interface %q has no Ethernet address", o.Iface)
	}
	a := &Addresses{iface: ifi, sysctls: map[string]string{}}
	if a.ns, err = netns.Get(); err != nil {
		return nil, fmt.Errorf("vrrp: current network namespace: %w", err)
	}
	if a.nl, err = netlink.NewHandleAt(a.ns); err != nil {
		a.ns.Close()
		return nil, fmt.Errorf("vrrp: netlink: %w", err)
	}
	fail := func(err error) (*Addresses, error) {
		a.nl.Close()
		a.ns.Close()
		return nil, err
	}
	if a.lo, err = a.nl.LinkByName("lo"); err != nil {
		return fail(fmt.Errorf("vrrp: lo: %w", err))
	}
	if err := a.set(o); err != nil {
		return fail(err)
	}
	if err := loadArpObjects(&a.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fail(fmt.Errorf("vrrp: ARP responder refused by the verifier: %+v", ve))
		}
		return fail(fmt.Errorf("vrrp: loading the ARP responder: %w", err))
	}
	var cfg arpArpConfig
	copy(cfg.Mac[:], ifi.HardwareAddr)
	if err := a.objs.ArpCfg.Put(uint32(0), cfg); err != nil {
		a.objs.Close()
		return fail(fmt.Errorf("vrrp: ARP responder: %w", err))
	}
	for _, k := range []struct{ name, value string }{{"arp_ignore", "1"}, {"arp_announce", "2"}} {
		if err := a.sysctl(k.name, k.value); err != nil {
			a.restore()
			a.objs.Close()
			return fail(err)
		}
	}
	a.link, err = link.AttachTCX(link.TCXOptions{Program: a.objs.BallastArp, Attach: ebpf.AttachTCXIngress, Interface: ifi.Index})
	if err != nil {
		a.restore()
		a.objs.Close()
		return fail(fmt.Errorf("vrrp: attaching the ARP responder to %s: %w", o.Iface, err))
	}
	// Send only: protocol 0 receives nothing.
	pc, err := packet.Listen(ifi, packet.Raw, 0, nil)
	if err == nil {
		a.garp, err = arp.New(ifi, pc)
		if err != nil {
			pc.Close()
		}
	}
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("vrrp: gratuitous ARP socket on %s: %w", o.Iface, err)
	}
	// Left on lo by a run that did not stop cleanly (or one that held them as listener
	// addresses): an address only answered for must not be local, or the kernel would reset
	// the director's flows that reach it after this process dies.
	for _, ip := range a.answer {
		_ = a.delLocal(ip)
	}
	return a, nil
}

func (a *Addresses) set(o AddressOptions) error {
	var local, answer []netip.Addr
	for _, ip := range o.Local {
		if !ip.Is4() {
			return fmt.Errorf("vrrp: %s: only IPv4 addresses move with mastership", ip)
		}
		if !slices.Contains(local, ip) {
			local = append(local, ip)
		}
	}
	answer = slices.Clone(local)
	for _, ip := range o.Answer {
		if !ip.Is4() {
			return fmt.Errorf("vrrp: %s: only IPv4 addresses move with mastership", ip)
		}
		if !slices.Contains(answer, ip) {
			answer = append(answer, ip)
		}
	}
	a.local, a.answer = local, answer
	return nil
}

// All is every address, Local ones first: what the adverts list.
func (a *Addresses) All() []netip.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.answer)
}

// Update changes the addresses (a reload); while claimed, the new ones are taken and the
// old ones given up at once.
func (a *Addresses) Update(o AddressOptions) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	oldLocal, oldAnswer := a.local, a.answer
	if err := a.set(o); err != nil {
		return err
	}
	if !a.claimed {
		for _, ip := range a.answer {
			_ = a.delLocal(ip)
		}
		return nil
	}
	var errs []error
	for _, ip := range oldAnswer {
		if !slices.Contains(a.answer, ip) {
			errs = append(errs, a.objs.ArpAddrs.Delete(be32(ip)))
		}
	}
	for _, ip := range oldLocal {
		if !slices.Contains(a.local, ip) { // gone, or now only answered for
			errs = append(errs, a.delLocal(ip))
		}
	}
	errs = append(errs, a.claimLocked())
	return errors.Join(errs...)
}

// Claim adds the Local addresses to lo and answers ARP for every address.
func (a *Addresses) Claim() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.claimLocked()
}

func (a *Addresses) claimLocked() error {
	a.claimed = true
	var errs []error
	for _, ip := range a.local {
		err := a.nl.AddrReplace(a.lo, &netlink.Addr{IPNet: hostNet(ip), Scope: int(netlink.SCOPE_HOST)})
		if err != nil {
			errs = append(errs, fmt.Errorf("vrrp: adding %s to lo: %w", ip, err))
		}
	}
	for _, ip := range a.answer {
		if err := a.objs.ArpAddrs.Put(be32(ip), uint8(1)); err != nil {
			errs = append(errs, fmt.Errorf("vrrp: answering for %s: %w", ip, err))
		}
	}
	return errors.Join(errs...)
}

// Release stops answering for the addresses and removes the Local ones from lo.
func (a *Addresses) Release() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.releaseLocked()
}

func (a *Addresses) releaseLocked() error {
	a.claimed = false
	var errs []error
	for _, ip := range a.answer {
		if err := a.objs.ArpAddrs.Delete(be32(ip)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	for _, ip := range a.local {
		errs = append(errs, a.delLocal(ip))
	}
	return errors.Join(errs...)
}

// Announce sends count gratuitous ARP requests for every address.
func (a *Addresses) Announce(count int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, ip := range a.answer {
		p, err := arp.NewPacket(arp.OperationRequest, a.iface.HardwareAddr, ip, ethernet.Broadcast, ip)
		if err != nil {
			return err
		}
		for range count {
			if err := a.garp.WriteTo(p, ethernet.Broadcast); err != nil {
				errs = append(errs, fmt.Errorf("vrrp: gratuitous ARP for %s: %w", ip, err))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// Answered is how many ARP requests the responder has answered.
func (a *Addresses) Answered() uint64 {
	var per []uint64
	if err := a.objs.ArpStats.Lookup(uint32(0), &per); err != nil {
		return 0
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}

// Close releases the addresses, detaches the responder and restores the sysctls.
func (a *Addresses) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.releaseLocked()
	if a.link != nil {
		err = errors.Join(err, a.link.Close())
		a.link = nil
	}
	if a.garp != nil {
		err = errors.Join(err, a.garp.Close())
		a.garp = nil
	}
	a.restore()
	err = errors.Join(err, a.objs.Close())
	a.nl.Close()
	a.ns.Close()
	return err
}

func (a *Addresses) delLocal(ip netip.Addr) error {
	err := a.nl.AddrDel(a.lo, &netlink.Addr{IPNet: hostNet(ip)})
	if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errAddrNotAvail) {
		return fmt.Errorf("vrrp: removing %s from lo: %w", ip, err)
	}
	return nil
}

func (a *Addresses) sysctl(name, value string) error {
	path := "/proc/sys/net/ipv4/conf/" + a.iface.Name + "/" + name
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("vrrp: %w", err)
	}
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("vrrp: %w", err)
	}
	a.sysctls[path] = string(old)
	return nil
}

// restore puts the sysctls back, from a thread in the Addresses' namespace (a sysctl file
// belongs to the namespace of the thread that opens it).
func (a *Addresses) restore() {
	if len(a.sysctls) == 0 {
		return
	}
	_ = inNS(a.ns, func() error {
		for path, v := range a.sysctls {
			_ = os.WriteFile(path, []byte(v), 0o644)
		}
		return nil
	})
	clear(a.sysctls)
}

// inNS runs f on a fresh thread switched into ns, and waits for it. The thread is never
// switched back: it ends with its goroutine.
func inNS(ns netns.NsHandle, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			done <- err
			return
		}
		done <- f()
	}()
	return <-done
}

var errAddrNotAvail = syscall.EADDRNOTAVAIL

func hostNet(ip netip.Addr) *net.IPNet {
	return &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(32, 32)}
}

func be32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
