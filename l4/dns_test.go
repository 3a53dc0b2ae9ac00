package l4

import (
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"ballast/internal/peertest"
)

var (
	dnsQuery   = peertest.DNSQuery
	dnsAnswerA = peertest.DNSAnswerA
	unbound    = peertest.Unbound
)

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
