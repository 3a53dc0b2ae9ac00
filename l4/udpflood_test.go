package l4

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"ballast/accesslog"
	"ballast/config"
	"ballast/internal/peertest"
)

// TestUDPFlowsHoldNoGoroutine: a flow costs no goroutine (its backend socket waits in the
// shared poller): 300 live flows leave the goroutine count where one flow put it.
func TestUDPFlowsHoldNoGoroutine(t *testing.T) {
	pool := newPool(t, "u", "leastconn", 0, 0, peertest.UDPNamer(t, "a"))
	p := NewUDP(UDPOptions{}, pool)
	addr := startUDP(t, UDPOptions{}, p)
	ask(t, udpClient(t, addr), "first")
	base := runtime.NumGoroutine()
	for range 300 {
		ask(t, udpClient(t, addr), "x")
	}
	if p.Flows() != 301 {
		t.Fatalf("flows %d, want 301", p.Flows())
	}
	if g := runtime.NumGoroutine(); g > base+5 {
		t.Fatalf("%d goroutines with 301 flows, %d with one: a goroutine per flow", g, base)
	}
}

// TestUDPNewFlowRate: beyond new_flow_burst at once, datagrams that would start a flow are
// dropped and counted as rate drops, while an established flow keeps going.
func TestUDPNewFlowRate(t *testing.T) {
	pool := newPool(t, "u", "leastconn", 0, 0, peertest.UDPNamer(t, "a"))
	opts := UDPOptions{NewFlowRate: 1, NewFlowBurst: 3}
	p := NewUDP(opts, pool)
	addr := startUDP(t, opts, p)
	est := udpClient(t, addr)
	ask(t, est, "est")
	for range 20 {
		udpClient(t, addr).Write([]byte("new"))
	}
	eventually(t, 5*time.Second, "20 datagrams read", func() bool { return p.Stats().Datagrams >= 21 })
	st := p.Stats()
	if st.Created > 4 || st.DroppedRate < 16 || st.Created+st.DroppedRate != 21 {
		t.Fatalf("burst 3 (+1 per second): created %d, rate drops %d", st.Created, st.DroppedRate)
	}
	if got := ask(t, est, "still"); got != "a:still" {
		t.Fatalf("established flow: %q", got)
	}
}

// TestUDPDescriptorBudget: the descriptor budget is the process's, shared by every udp
// proxy: two listeners with a budget of 3 flows hold 3 in all, and the drops are counted as
// descriptor drops, never against the backend.
func TestUDPDescriptorBudget(t *testing.T) {
	pool := newPool(t, "u", "leastconn", 0, 0, peertest.UDPNamer(t, "a"))
	budget := &fdBudget{limit: 3}
	p1, p2 := NewUDP(UDPOptions{}, pool), NewUDP(UDPOptions{}, pool)
	p1.budget, p2.budget = budget, budget
	a1, a2 := startUDP(t, UDPOptions{}, p1), startUDP(t, UDPOptions{}, p2)
	ask(t, udpClient(t, a1), "1")
	ask(t, udpClient(t, a2), "2")
	ask(t, udpClient(t, a1), "3")
	for _, a := range []string{a1, a2, a2} {
		udpClient(t, a).Write([]byte("over"))
	}
	eventually(t, 5*time.Second, "drops counted", func() bool {
		return p1.Stats().DroppedDescriptors+p2.Stats().DroppedDescriptors == 3
	})
	if budget.Used() != 3 || p1.Flows()+p2.Flows() != 3 || p1.MaxFlows() != 3 {
		t.Fatalf("budget used %d, flows %d+%d, cap %d", budget.Used(), p1.Flows(), p2.Flows(), p1.MaxFlows())
	}
	if b := pool.Backends()[0]; b.Failures() != 0 || b.Requests() != 3 {
		t.Fatalf("backend: %d failures, %d requests", b.Failures(), b.Requests())
	}
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	p1.Shutdown(ctx)
	p2.Shutdown(ctx)
	if budget.Used() != 0 {
		t.Fatalf("budget used %d after both shut down", budget.Used())
	}
}

// TestUDPOverflowCounted: datagrams the listener socket drops for want of buffer space are
// counted from SO_RXQ_OVFL with the next datagram read, and with those read they make up
// every datagram sent.
func TestUDPOverflowCounted(t *testing.T) {
	pool := newPool(t, "u", "leastconn", 0, 0, peertest.UDPNamer(t, "a"))
	p := NewUDP(UDPOptions{}, pool)
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
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		p.Shutdown(ctx)
		<-done
	})
	cl := udpClient(t, c.LocalAddr().String())
	ask(t, cl, "first")    // Serve has set its options
	_ = c.SetReadBuffer(1) // the kernel's minimum: a few datagrams
	sent := 1
	for range 3000 {
		if _, err := cl.Write(make([]byte, 1024)); err == nil {
			sent++
		}
	}
	time.Sleep(100 * time.Millisecond)
	cl.Write([]byte("last")) // carries the count of the drops before it
	sent++
	eventually(t, 5*time.Second, "every datagram read or counted", func() bool {
		st := p.Stats()
		return st.Datagrams+st.DroppedOverflow == uint64(sent)
	})
	if st := p.Stats(); st.DroppedOverflow == 0 {
		t.Fatalf("no overflow counted: %+v", st)
	}
}

// TestUDPPersistenceDrain: with persistence every flow of a client address goes to its
// backend; a draining backend keeps those flows and takes no new client; disabled, it moves
// them.
func TestUDPPersistenceDrain(t *testing.T) {
	pool := newPool(t, "u", "roundrobin", 0, 0, peertest.UDPNamer(t, "a"), peertest.UDPNamer(t, "b"))
	opts := UDPOptions{Persistence: time.Minute}
	p := NewUDP(opts, pool)
	addr := startUDP(t, opts, p)
	from := func(src string) string { // a new flow: a new socket, a new source port
		c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)}, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		be, _, _ := strings.Cut(ask(t, c, "q"), ":")
		return be
	}
	first := from("127.0.0.1")
	for range 4 {
		if got := from("127.0.0.1"); got != first {
			t.Fatalf("persistence: a flow of the same client went to %s, not %s", got, first)
		}
	}
	id := pool.Backends()[first[0]-'a'].ID
	if err := pool.Drain(id); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if got := from("127.0.0.1"); got != first {
			t.Fatalf("a persistent client of draining %s went to %s", first, got)
		}
		if got := from("127.0.0.2"); got == first {
			t.Fatalf("a new client went to draining %s", first)
		}
	}
	if err := pool.Disable(id); err != nil {
		t.Fatal(err)
	}
	if got := from("127.0.0.1"); got == first {
		t.Fatalf("disabled %s kept its persistent client", first)
	}
}

// TestUDPAccessLog: with the access log on, a flow writes one line when it ends: client and
// port, backend, bytes each way, and cD for the idle timeout.
func TestUDPAccessLog(t *testing.T) {
	be := peertest.UDPNamer(t, "a")
	pool := newPool(t, "u", "leastconn", 0, 0, be)
	file := filepath.Join(t.TempDir(), "access.log")
	var sw accesslog.Switch
	if err := sw.Set(config.Logging{Access: true, AccessLog: config.AccessLog{AccessFile: file}}); err != nil {
		t.Fatal(err)
	}
	defer sw.Set(config.Logging{})
	opts := UDPOptions{Name: "dns", IdleTimeout: 100 * time.Millisecond}
	p := NewUDP(opts, pool)
	p.SetAccessLog(&sw)
	addr := startUDP(t, opts, p)
	c := udpClient(t, addr)
	ask(t, c, "hello") // 5 bytes in, "a:hello" (7) out
	var line map[string]any
	eventually(t, 5*time.Second, "a line", func() bool {
		b, _ := os.ReadFile(file)
		return len(b) > 0 && json.Unmarshal(b, &line) == nil
	})
	want := map[string]any{"transport": "udp", "listener": "dns", "client": "127.0.0.1",
		"client_port": float64(c.LocalAddr().(*net.UDPAddr).Port), "backend": be, "backend_address": be,
		"bytes_in": 5.0, "bytes_out": 7.0, "termination": "cD"}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %v, want %v (%v)", k, line[k], v, line)
		}
	}
}
