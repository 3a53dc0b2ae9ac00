package lab

// The least DR program (bpf/leastdr.c) is compiled by bpf2go; its output (leastdr_bpfel.go,
// leastdr_bpfel.o) is committed, so building Ballast needs no clang. Regenerate with
// `go generate ./lab`.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel leastdr ../bpf/leastdr.c

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// attachLeastDR loads the least DR program for vip (TCP) with real's and own MACs and attaches
// it in generic mode to eth0 of the namespace ns (through in, which runs a function there). It
// returns the program, for its run-time statistics, and what detaches and unloads it.
func attachLeastDR(in func(netns.NsHandle, func() error) error, ns netns.NsHandle, vip netip.AddrPort, real, own net.HardwareAddr) (*ebpf.Program, func(), error) {
	if !vip.Addr().Is4() || len(real) != 6 || len(own) != 6 {
		return nil, nil, errors.New("least DR: an IPv4 VIP and two Ethernet addresses are needed")
	}
	spec, err := loadLeastdr()
	if err != nil {
		return nil, nil, err
	}
	a4 := vip.Addr().As4()
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], vip.Port())
	consts := map[string]any{
		"least_vip":      binary.NativeEndian.Uint32(a4[:]),
		"least_port":     binary.NativeEndian.Uint16(port[:]),
		"least_real_mac": [6]byte(real),
		"least_own_mac":  [6]byte(own),
	}
	for name, v := range consts {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, nil, err
		}
	}
	var objs leastdrObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, nil, err
	}
	var l link.Link
	err = in(ns, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: objs.BallastLeastDr, Interface: eth0.Attrs().Index, Flags: link.XDPGenericMode})
		return err
	})
	if err != nil {
		objs.Close()
		return nil, nil, err
	}
	return objs.BallastLeastDr, func() { _ = l.Close(); _ = objs.Close() }, nil
}
