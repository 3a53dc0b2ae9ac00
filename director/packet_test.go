package director

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
)

// XDP actions.
const (
	xdpDrop     = 1
	xdpPass     = 2
	xdpTX       = 3
	xdpRedirect = 4
)

var (
	clientMAC = net.HardwareAddr{0x02, 0xc1, 0, 0, 0, 0x01}
	dirMAC    = net.HardwareAddr{0x02, 0xd1, 0, 0, 0, 0x02}
	realMACs  = []net.HardwareAddr{
		{0x02, 0xaa, 0, 0, 0, 0x11}, {0x02, 0xaa, 0, 0, 0, 0x12}, {0x02, 0xaa, 0, 0, 0, 0x13},
		{0x02, 0xaa, 0, 0, 0, 0x14}, {0x02, 0xaa, 0, 0, 0, 0x15},
	}
)

// frame describes a test packet; build writes it with correct checksums computed here,
// independently of the BPF program.
type frame struct {
	src, dst     netip.Addr
	sport, dport uint16
	proto        uint8
	ttl          uint8
	tcpFlags     uint8
	fragOff      uint16 // flags and offset as on the wire (0x2000 = MF)
	options      []byte // IPv4 options, a multiple of 4 bytes
	payload      []byte
	noUDPCsum    bool
}

func (f frame) String() string {
	return fmt.Sprintf("%s:%d->%s:%d/%d", f.src, f.sport, f.dst, f.dport, f.proto)
}

func (f frame) build() []byte {
	ttl := f.ttl
	if ttl == 0 {
		ttl = 64
	}
	var l4 []byte
	switch f.proto {
	case 6:
		l4 = make([]byte, 20+len(f.payload))
		binary.BigEndian.PutUint16(l4[0:], f.sport)
		binary.BigEndian.PutUint16(l4[2:], f.dport)
		binary.BigEndian.PutUint32(l4[4:], 1000)
		l4[12] = 5 << 4
		l4[13] = f.tcpFlags
		binary.BigEndian.PutUint16(l4[14:], 65535)
		copy(l4[20:], f.payload)
	case 17:
		l4 = make([]byte, 8+len(f.payload))
		binary.BigEndian.PutUint16(l4[0:], f.sport)
		binary.BigEndian.PutUint16(l4[2:], f.dport)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		copy(l4[8:], f.payload)
	default:
		l4 = append([]byte{8, 0, 0, 0, 0, 1, 0, 1}, f.payload...) // ICMP echo
	}
	ihl := 20 + len(f.options)
	ip := make([]byte, ihl)
	ip[0] = 0x40 | byte(ihl/4)
	binary.BigEndian.PutUint16(ip[2:], uint16(ihl+len(l4)))
	binary.BigEndian.PutUint16(ip[4:], 0x1234)
	binary.BigEndian.PutUint16(ip[6:], f.fragOff)
	ip[8], ip[9] = ttl, f.proto
	s, d := f.src.As4(), f.dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	copy(ip[20:], f.options)
	binary.BigEndian.PutUint16(ip[10:], checksum(ip, 0))
	switch f.proto {
	case 6:
		binary.BigEndian.PutUint16(l4[16:], checksum(l4, pseudo(ip, len(l4))))
	case 17:
		if !f.noUDPCsum {
			c := checksum(l4, pseudo(ip, len(l4)))
			if c == 0 {
				c = 0xffff
			}
			binary.BigEndian.PutUint16(l4[6:], c)
		}
	default:
		binary.BigEndian.PutUint16(l4[2:], checksum(l4, 0))
	}
	out := append([]byte{}, dirMAC...)
	out = append(out, clientMAC...)
	out = append(out, 0x08, 0x00)
	out = append(out, ip...)
	return append(out, l4...)
}

// checksum is the Internet checksum of b with an initial sum.
func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// pseudo is the TCP/UDP pseudo-header sum for IPv4 header ip.
func pseudo(ip []byte, l4len int) uint32 {
	var s uint32
	for i := 12; i < 20; i += 2 {
		s += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	return s + uint32(ip[9]) + uint32(l4len)
}

// checkIPv4 verifies the IPv4 header at ip and its TCP/UDP checksum, recomputed from scratch.
func checkIPv4(t *testing.T, ip []byte) {
	t.Helper()
	ihl := int(ip[0]&0x0f) * 4
	if checksum(ip[:ihl], 0) != 0 {
		t.Errorf("IPv4 header checksum %#04x is wrong", binary.BigEndian.Uint16(ip[10:]))
	}
	tot := int(binary.BigEndian.Uint16(ip[2:]))
	l4 := ip[ihl:tot]
	switch ip[9] {
	case 6:
		if checksum(l4, pseudo(ip, len(l4))) != 0 {
			t.Errorf("TCP checksum %#04x is wrong", binary.BigEndian.Uint16(l4[16:]))
		}
	case 17:
		if binary.BigEndian.Uint16(l4[6:]) != 0 && checksum(l4, pseudo(ip, len(l4))) != 0 {
			t.Errorf("UDP checksum %#04x is wrong", binary.BigEndian.Uint16(l4[6:]))
		}
	}
}

func addrAt(b []byte) netip.Addr { return netip.AddrFrom4([4]byte(b[:4])) }

// requireBPF skips the test when it cannot load BPF programs.
func requireBPF(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: loading BPF programs needs root")
	}
	d, err := New(Options{Mode: DR, MAC: dirMAC, TableSize: 7, MaxVIPs: 1, MaxReals: 4, ConnTableSize: 64})
	if err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, os.ErrPermission) {
			t.Skipf("skipping: BPF cannot load here: %v", err)
		}
		t.Fatalf("loading the director: %v", err)
	}
	d.Close()
}

// newTestDirector loads a director without attaching it, for BPF_PROG_TEST_RUN.
func newTestDirector(t testing.TB, o Options) *Director {
	t.Helper()
	requireBPF(t)
	if o.MAC == nil {
		o.MAC = dirMAC
	}
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// xdpMD is struct xdp_md, for giving a test run an ingress interface.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// runXDP runs the program once on pkt (ingress on ifindex when non-zero).
func runXDP(t testing.TB, d *Director, pkt []byte, ifindex int) (uint32, []byte) {
	t.Helper()
	opts := ebpf.RunOptions{Data: pkt, DataOut: make([]byte, len(pkt)+256), Repeat: 1}
	if ifindex != 0 {
		opts.Context = xdpMD{DataEnd: uint32(len(pkt)), IngressIfindex: uint32(ifindex)}
	}
	ret, err := d.objs.BallastDirector.Run(&opts)
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	return ret, opts.DataOut
}

// tcActRedirect and tcActShot are the tc program's verdicts the tests look for.
const (
	tcActUnspec   = ^uint32(0) // TC_ACT_UNSPEC, -1
	tcActShot     = 2
	tcActRedirect = 7
)

// runTC runs the NAT tc program once on pkt as if it arrived on ifindex.
func runTC(t testing.TB, d *Director, pkt []byte, ifindex int) (uint32, []byte) {
	t.Helper()
	// The head of struct __sk_buff up to ifindex (offsets 36 and 40); the kernel zero-fills
	// the rest of the context.
	ctx := make([]byte, 44)
	binary.NativeEndian.PutUint32(ctx[36:], uint32(ifindex))
	binary.NativeEndian.PutUint32(ctx[40:], uint32(ifindex))
	opts := ebpf.RunOptions{Data: pkt, DataOut: make([]byte, len(pkt)+256), Context: ctx, Repeat: 1}
	ret, err := d.objs.BallastNatTc.Run(&opts)
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN (tc): %v", err)
	}
	return ret, opts.DataOut
}
