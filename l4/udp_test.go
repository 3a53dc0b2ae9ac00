package l4

import (
	"ballast/internal/peertest"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
)

// startUDP serves the proxy on a loopback socket and shuts it down when the test ends.
func startUDP(t testing.TB, opts UDPOptions, p *UDP) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Serve(c)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Shutdown(ctx)
		<-done
	})
	return c.LocalAddr().String()
}

func udpClient(t testing.TB, addr string) *net.UDPConn {
	t.Helper()
	ra, _ := net.ResolveUDPAddr("udp", addr)
	c, err := net.DialUDP("udp", nil, ra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ask sends msg and returns the reply, retrying a few times (UDP may drop on a busy machine).
func ask(t testing.TB, c *net.UDPConn, msg string) string {
	t.Helper()
	buf := make([]byte, 2048)
	for try := 0; try < 5; try++ {
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		if err == nil {
			return string(buf[:n])
		}
	}
	t.Fatalf("no reply to %q", msg)
	return ""
}

// TestUDPFlowsSplitAndReplyToClient: flows from many client sockets are split across two
// backends and every reply reaches the client that asked.
func TestUDPFlowsSplitAndReplyToClient(t *testing.T) {
	pool := newPool(t, "u", "roundrobin", 0, 0, peertest.UDPNamer(t, "a"), peertest.UDPNamer(t, "b"))
	p := NewUDP(UDPOptions{}, pool)
	addr := startUDP(t, UDPOptions{}, p)
	seen := map[string]int{}
	for i := range 10 {
		c := udpClient(t, addr)
		msg := fmt.Sprintf("client-%d", i)
		got := ask(t, c, msg)
		be, body, _ := bytes.Cut([]byte(got), []byte(":"))
		if string(body) != msg {
			t.Fatalf("client %d got %q", i, got)
		}
		seen[string(be)]++
	}
	if seen["a"] != 5 || seen["b"] != 5 {
		t.Fatalf("split %v, want 5/5", seen)
	}
	if p.Flows() != 10 || pool.InFlight() != 10 {
		t.Fatalf("flows %d, in flight %d", p.Flows(), pool.InFlight())
	}
}

// TestUDPStreamKeepsBackend: a long stream of datagrams from one client stays on its backend.
func TestUDPStreamKeepsBackend(t *testing.T) {
	pool := newPool(t, "u", "roundrobin", 0, 0, peertest.UDPNamer(t, "a"), peertest.UDPNamer(t, "b"))
	p := NewUDP(UDPOptions{}, pool)
	addr := startUDP(t, UDPOptions{}, p)
	c := udpClient(t, addr)
	first := ""
	for i := range 500 {
		got := ask(t, c, fmt.Sprint(i))
		be, _, _ := bytes.Cut([]byte(got), []byte(":"))
		if first == "" {
			first = string(be)
		}
		if string(be) != first {
			t.Fatalf("datagram %d went to %s, the stream started on %s", i, be, first)
		}
	}
	if st := p.Stats(); st.Created != 1 || st.PacketsIn < 500 || st.PacketsOut < 500 {
		t.Fatalf("stats %+v", st)
	}
}

// TestUDPIdleExpiry: a flow with no datagram for the idle timeout ends and frees its slot; the
// client's next datagram starts a new flow.
func TestUDPIdleExpiry(t *testing.T) {
	pool := newPool(t, "u", "leastconn", 0, 0, peertest.UDPNamer(t, "a"))
	opts := UDPOptions{IdleTimeout: 200 * time.Millisecond}
	p := NewUDP(opts, pool)
	addr := startUDP(t, opts, p)
	c := udpClient(t, addr)
	start := time.Now()
	ask(t, c, "x")
	if pool.InFlight() != 1 {
		t.Fatalf("in flight %d with one flow", pool.InFlight())
	}
	eventually(t, 5*time.Second, "flow expired", func() bool { return p.Flows() == 0 && pool.InFlight() == 0 })
	if el := time.Since(start); el < opts.IdleTimeout {
		t.Fatalf("expired after %v", el)
	}
	if st := p.Stats(); st.Expired != 1 {
		t.Fatalf("stats %+v", st)
	}
	ask(t, c, "y")
	if st := p.Stats(); st.Created != 2 || p.Flows() != 1 {
		t.Fatalf("after expiry: flows %d, stats %+v", p.Flows(), st)
	}
}

// TestUDPFlowCap: datagrams that would start a flow beyond MaxFlows are dropped and counted;
// existing flows keep working.
func TestUDPFlowCap(t *testing.T) {
	pool := newPool(t, "u", "leastconn", 0, 0, peertest.UDPNamer(t, "a"))
	opts := UDPOptions{MaxFlows: 2}
	p := NewUDP(opts, pool)
	addr := startUDP(t, opts, p)
	c1, c2, c3 := udpClient(t, addr), udpClient(t, addr), udpClient(t, addr)
	ask(t, c1, "1")
	ask(t, c2, "2")
	c3.Write([]byte("3"))
	eventually(t, 5*time.Second, "drop counted", func() bool { return p.Stats().DroppedCap == 1 })
	if p.Flows() != 2 || pool.InFlight() != 2 {
		t.Fatalf("flows %d, in flight %d", p.Flows(), pool.InFlight())
	}
	if got := ask(t, c1, "again"); got != "a:again" {
		t.Fatalf("existing flow: %q", got)
	}
}

// TestUDPBackendRefusing: a backend that refuses (ICMP port unreachable) ends its flow as a
// failure, and the flow's first datagram goes to the next backend: every client gets its
// answer to a single datagram.
func TestUDPBackendRefusing(t *testing.T) {
	dead, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.LocalAddr().String()
	dead.Close()
	pool := newPool(t, "u", "roundrobin", 0, 0, deadAddr, peertest.UDPNamer(t, "live"))
	p := NewUDP(UDPOptions{}, pool)
	addr := startUDP(t, UDPOptions{}, p)
	buf := make([]byte, 64)
	for i := range 4 {
		c := udpClient(t, addr)
		c.Write([]byte("q"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != "live:q" {
			t.Fatalf("client %d: %q %v", i, buf[:n], err)
		}
	}
	if st := p.Stats(); st.BackendErrors == 0 || st.Retries == 0 {
		t.Fatalf("refusal not counted: %+v", st)
	}
	eventually(t, 5*time.Second, "dead flows ended", func() bool {
		return pool.Backend(deadAddr).InFlight() == 0
	})
}

// TestUDPShardSpread: the flow shard hash spreads loopback clients over the shards.
func TestUDPShardSpread(t *testing.T) {
	p := NewUDP(UDPOptions{}, nil)
	used := map[*flowShard]bool{}
	for port := 40000; port < 40256; port++ {
		used[p.shard(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)))] = true
	}
	if len(used) < flowShards/2 {
		t.Fatalf("256 ports used %d of %d shards", len(used), flowShards)
	}
}
