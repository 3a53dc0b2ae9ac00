package l4

import (
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// blackhole is a loopback listener whose accept queue is full and never drained: the kernel
// drops further SYNs, so connects to it time out instead of being refused.
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Skipf("raw socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue: connects that complete but are never accepted.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
		if i == 16 {
			t.Skip("the kernel keeps accepting into a backlog-0 queue; cannot make a connect time out")
		}
	}
	return addr
}

// TestTCPConnectTimeoutNextBackend: a backend that does not answer the connect within
// ConnectTimeout is given up and the connection goes to the next backend.
func TestTCPConnectTimeoutNextBackend(t *testing.T) {
	hole := blackhole(t)
	live := tcpServer(t, named("live"))
	pool := newPool(t, "p", "roundrobin", 0, 0, hole, live)
	p, addr := startTCP(t, TCPOptions{ConnectTimeout: 300 * time.Millisecond}, Route{Pool: pool})
	for i := range 2 { // roundrobin: one of the two starts on the black hole
		c := dialTCP(t, addr)
		if got := readLine(t, c); got != "live" {
			t.Fatalf("connection %d: %q", i, got)
		}
		c.Close()
	}
	if st := p.BackendStats(pool.Backend(hole)); st.ConnectFailures == 0 {
		t.Fatalf("connect timeout not counted: %+v", st)
	}
}

// TestTCPSourceHash: a hash balancer keeps one client address on one backend across
// connections (the key is balance.SourceHash of the client), and spreads different addresses.
func TestTCPSourceHash(t *testing.T) {
	var addrs []string
	for _, n := range []string{"a", "b", "c"} {
		addrs = append(addrs, tcpServer(t, named(n)))
	}
	pool := newPool(t, "h", "maglev", 0, 0, addrs...)
	_, addr := startTCP(t, TCPOptions{}, Route{Pool: pool})
	pick := func(src string) string {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		return readLine(t, c)
	}
	spread := map[string]bool{}
	for i := 1; i <= 20; i++ {
		src := fmt.Sprintf("127.0.0.%d", i)
		first := pick(src)
		for range 3 {
			if got := pick(src); got != first {
				t.Fatalf("%s went to %s then %s", src, first, got)
			}
		}
		spread[first] = true
	}
	if len(spread) < 2 {
		t.Fatalf("20 client addresses all hashed to %v", spread)
	}
}

// TestTCPSwap: after Swap new connections take the new table's pool while an established
// connection keeps its backend and its slot in the old pool until it ends.
func TestTCPSwap(t *testing.T) {
	oldPool := newPool(t, "p", "leastconn", 0, 0, tcpServer(t, named("old")))
	newP := newPool(t, "p", "leastconn", 0, 0, tcpServer(t, named("new")))
	p, addr := startTCP(t, TCPOptions{}, Route{Pool: oldPool})
	c1 := dialTCP(t, addr)
	if got := readLine(t, c1); got != "old" {
		t.Fatal(got)
	}
	tab, err := NewTable([]Route{{Pool: newP}})
	if err != nil {
		t.Fatal(err)
	}
	p.Swap(tab)
	c2 := dialTCP(t, addr)
	if got := readLine(t, c2); got != "new" {
		t.Fatalf("after Swap: %q", got)
	}
	io.WriteString(c1, "z")
	buf := make([]byte, 1)
	if _, err := io.ReadFull(c1, buf); err != nil || oldPool.InFlight() != 1 {
		t.Fatalf("established connection: %v, old pool in flight %d", err, oldPool.InFlight())
	}
	c1.Close()
	eventually(t, 5*time.Second, "old slot released", func() bool { return oldPool.InFlight() == 0 })
}

// TestTCPStalledReceiverIdles: a client that stops reading while the backend keeps sending
// ends as idle: nothing is delivered for the timeout, and the backend's slot is freed.
func TestTCPStalledReceiverIdles(t *testing.T) {
	wrote := make(chan error, 1)
	be := tcpServer(t, func(c *net.TCPConn) {
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				wrote <- err
				return
			}
		}
	})
	pool := newPool(t, "p", "leastconn", 0, 0, be)
	const idle = 300 * time.Millisecond
	p, addr := startTCP(t, TCPOptions{IdleTimeout: idle}, Route{Pool: pool})
	c := dialTCP(t, addr)
	c.SetReadBuffer(4096)
	io.ReadFull(c, make([]byte, 1)) // then never read again
	eventually(t, 10*time.Second, "stalled connection closed as idle", func() bool { return p.Stats().IdleClosed == 1 })
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("backend still writing into a closed connection")
	}
	eventually(t, 5*time.Second, "slot released", func() bool { return pool.InFlight() == 0 })
}
