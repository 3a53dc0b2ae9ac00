package l4

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// dnsQuery encodes a standard query for an A record.
func dnsQuery(id uint16, name string) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0) // RD; one question
	for _, l := range splitLabels(name) {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0, 0, 1, 0, 1) // root, QTYPE A, QCLASS IN
}

func splitLabels(name string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(name); i++ {
		if i == len(name) || name[i] == '.' {
			if i > start {
				out = append(out, name[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// dnsAnswerA decodes a response to dnsQuery: its ID and the first A record.
func dnsAnswerA(b []byte) (uint16, netip.Addr, error) {
	if len(b) < 12 {
		return 0, netip.Addr{}, errors.New("short response")
	}
	id := binary.BigEndian.Uint16(b)
	if b[2]&0x80 == 0 || b[3]&0x0F != 0 {
		return id, netip.Addr{}, fmt.Errorf("not a successful response: flags %x", b[2:4])
	}
	qd, an := binary.BigEndian.Uint16(b[4:]), binary.BigEndian.Uint16(b[6:])
	p := 12
	skipName := func() error {
		for p < len(b) {
			l := int(b[p])
			switch {
			case l == 0:
				p++
				return nil
			case l&0xC0 == 0xC0:
				p += 2
				return nil
			}
			p += 1 + l
		}
		return errors.New("name runs off the end")
	}
	for range qd {
		if err := skipName(); err != nil {
			return id, netip.Addr{}, err
		}
		p += 4
	}
	for range an {
		if err := skipName(); err != nil || p+10 > len(b) {
			return id, netip.Addr{}, errors.New("truncated answer")
		}
		typ, rdlen := binary.BigEndian.Uint16(b[p:]), int(binary.BigEndian.Uint16(b[p+8:]))
		p += 10
		if p+rdlen > len(b) {
			return id, netip.Addr{}, errors.New("truncated rdata")
		}
		if typ == 1 && rdlen == 4 {
			return id, netip.AddrFrom4([4]byte(b[p : p+4])), nil
		}
		p += rdlen
	}
	return id, netip.Addr{}, errors.New("no A record")
}

// unbound starts an unbound instance on a loopback port whose local zone answers
// www.ballast.test with answer, and returns its address once it answers.
func unbound(t *testing.T, bin, answer string) string {
	t.Helper()
	dir := peerDir(t)
	cf := filepath.Join(dir, "unbound.conf")
	buf := make([]byte, 512)
	port := startPeer(t, "udp", bin, func(port int) []string {
		conf := fmt.Sprintf(`server:
    interface: 127.0.0.1@%[2]d
    port: %[2]d
    so-reuseport: no
    do-daemonize: no
    do-ip6: no
    access-control: 127.0.0.0/8 allow
    chroot: ""
    username: ""
    directory: "%[1]s"
    pidfile: "%[1]s/unbound.pid"
    use-syslog: no
    logfile: ""
    verbosity: 1
    module-config: "iterator"
    local-zone: "ballast.test." static
    local-data: "www.ballast.test. 60 IN A %[3]s"
remote-control:
    control-enable: no
`, dir, port, answer)
		if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		return []string{"-d", "-c", cf}
	}, func(port int) bool {
		c := udpClient(t, fmt.Sprintf("127.0.0.1:%d", port))
		defer c.Close()
		c.Write(dnsQuery(1, "www.ballast.test"))
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := c.Read(buf)
		if err != nil {
			return false
		}
		_, a, err := dnsAnswerA(buf[:n])
		return err == nil && a.String() == answer
	})
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// TestUnboundBehindUDP: DNS queries through the UDP proxy to two unbound instances are
// answered, each to the client that asked, and split between both.
func TestUnboundBehindUDP(t *testing.T) {
	bin, err := exec.LookPath("unbound")
	if err != nil {
		if _, err2 := os.Stat("/usr/sbin/unbound"); err2 != nil {
			t.Skip("unbound is not installed (Debian package unbound); skipping the real-server test")
		}
		bin = "/usr/sbin/unbound"
	}
	a := unbound(t, bin, "10.0.0.1")
	b := unbound(t, bin, "10.0.0.2")
	pool := newPool(t, "dns", "leastconn", 0, 0, a, b)
	p := NewUDP(UDPOptions{}, pool)
	addr := startUDP(t, UDPOptions{}, p)
	answers := map[string]int{}
	buf := make([]byte, 512)
	for i := range 20 {
		c := udpClient(t, addr)
		id := uint16(1000 + i)
		var got netip.Addr
		for try := 0; ; try++ {
			c.Write(dnsQuery(id, "www.ballast.test"))
			c.SetReadDeadline(time.Now().Add(time.Second))
			n, err := c.Read(buf)
			if err != nil {
				if try == 4 {
					t.Fatalf("query %d: no answer: %v", i, err)
				}
				continue
			}
			rid, ans, err := dnsAnswerA(buf[:n])
			if err != nil || rid != id {
				t.Fatalf("query %d: id %d, %v", i, rid, err)
			}
			got = ans
			break
		}
		answers[got.String()]++
	}
	if answers["10.0.0.1"] != 10 || answers["10.0.0.2"] != 10 {
		t.Fatalf("answers %v, want 10 from each unbound", answers)
	}
	// A stream of queries from one client keeps its server.
	c := udpClient(t, addr)
	first := ""
	for i := range 50 {
		c.Write(dnsQuery(uint16(i), "www.ballast.test"))
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("stream query %d: %v", i, err)
		}
		_, ans, err := dnsAnswerA(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = ans.String()
		}
		if ans.String() != first {
			t.Fatalf("stream query %d answered by %s, stream started on %s", i, ans, first)
		}
	}
}

// TestDNSCodec pins the test's own DNS encoder: the exact query bytes.
func TestDNSCodec(t *testing.T) {
	want := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'w', 'w', 'w', 1, 'b', 0, 0, 1, 0, 1}
	if got := dnsQuery(0x1234, "www.b"); string(got) != string(want) {
		t.Fatalf("query %x", got)
	}
}
