package l4

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"ballast/proxyproto"
)

// TestTCPBulkHalfClose: 8 MiB each way through the proxy; the client's FIN reaches the backend,
// which only then finishes its reply, and the client reads all of it.
func TestTCPBulkHalfClose(t *testing.T) {
	be := tcpServer(t, echo)
	pool := newPool(t, "p", "leastconn", 0, 0, be)
	p, addr := startTCP(t, TCPOptions{}, Route{Pool: pool})
	c := dialTCP(t, addr)
	data := make([]byte, 8<<20)
	_, _ = rand.Read(data)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("echo differs: %d bytes back of %d", len(got), len(data))
	}
	c.Close()
	b := pool.Backends()[0]
	eventually(t, 5*time.Second, "in-flight back to 0", func() bool { return b.InFlight() == 0 })
	st := p.BackendStats(b)
	if st.BytesIn != uint64(len(data)) || st.BytesOut != uint64(len(data)) || st.Conns != 1 || st.Active != 0 {
		t.Fatalf("backend stats %+v", st)
	}
}

// TestTCPHalfCloseReplyAfterEOF: the backend answers only after reading the client's EOF.
func TestTCPHalfCloseReplyAfterEOF(t *testing.T) {
	be := tcpServer(t, func(c *net.TCPConn) {
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "read %d bytes then EOF\n", n)
	})
	_, addr := startTCP(t, TCPOptions{}, Route{Pool: newPool(t, "p", "leastconn", 0, 0, be)})
	c := dialTCP(t, addr)
	io.WriteString(c, "hello")
	c.CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "read 5 bytes then EOF\n" {
		t.Fatalf("got %q, %v", got, err)
	}
}

// TestTCPConnectRefusedNextBackend: a refusing backend is skipped and the client sees a normal
// connection every time; the refusal is counted and released as a failure.
func TestTCPConnectRefusedNextBackend(t *testing.T) {
	dead := deadPort(t)
	live := tcpServer(t, named("live"))
	pool := newPool(t, "p", "roundrobin", 0, 0, dead, live)
	p, addr := startTCP(t, TCPOptions{ConnectTimeout: time.Second}, Route{Pool: pool})
	for i := range 6 {
		c := dialTCP(t, addr)
		if got := readLine(t, c); got != "live" {
			t.Fatalf("connection %d: %q", i, got)
		}
		io.WriteString(c, "x")
		buf := make([]byte, 1)
		if _, err := io.ReadFull(c, buf); err != nil || buf[0] != 'x' {
			t.Fatalf("connection %d echo: %q %v", i, buf, err)
		}
		c.Close()
	}
	deadB := pool.Backend(dead)
	if st := p.BackendStats(deadB); st.ConnectFailures == 0 || deadB.Failures() == 0 {
		t.Fatalf("refusals not counted: stats %+v, failures %d", st, deadB.Failures())
	}
	if p.Stats().NoBackend != 0 {
		t.Fatalf("NoBackend = %d", p.Stats().NoBackend)
	}
}

// TestTCPAllRefused: with every backend refusing the client's connection is closed.
func TestTCPAllRefused(t *testing.T) {
	pool := newPool(t, "p", "roundrobin", 0, 0, deadPort(t), deadPort(t))
	p, addr := startTCP(t, TCPOptions{ConnectTimeout: time.Second}, Route{Pool: pool})
	c := dialTCP(t, addr)
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes", n)
	}
	eventually(t, 5*time.Second, "NoBackend counted", func() bool { return p.Stats().NoBackend == 1 })
}

// TestTCPBackendDiesMidStream: when the backend goes away (FIN or RST) the client's connection
// ends: its read returns within a bounded time instead of hanging.
func TestTCPBackendDiesMidStream(t *testing.T) {
	for _, rst := range []bool{false, true} {
		t.Run(fmt.Sprintf("rst=%v", rst), func(t *testing.T) {
			be := tcpServer(t, func(c *net.TCPConn) {
				buf := make([]byte, 4)
				io.ReadFull(c, buf)
				c.Write(buf)
				if rst {
					c.SetLinger(0)
				}
				c.Close()
			})
			pool := newPool(t, "p", "leastconn", 0, 0, be)
			_, addr := startTCP(t, TCPOptions{}, Route{Pool: pool})
			c := dialTCP(t, addr)
			io.WriteString(c, "ping")
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("client left hanging after the backend died")
			}
			if string(got) != "ping" {
				t.Fatalf("got %q before the end, %v", got, err)
			}
			// The client keeps writing: the backend is gone, so the connection must end both
			// ways (after a FIN too: the backend's socket is closed, not half-closed).
			eventually(t, 5*time.Second, "client write fails", func() bool {
				_, err := c.Write([]byte("more"))
				return err != nil
			})
			eventually(t, 5*time.Second, "slot released", func() bool { return pool.InFlight() == 0 })
		})
	}
}

// TestTCPMaxConnsQueue: with max_conns 1 a second connection waits in the backlog queue and
// is served as soon as the first closes.
func TestTCPMaxConnsQueue(t *testing.T) {
	be := tcpServer(t, echo)
	pool := newPool(t, "p", "leastconn", 1, 4, be)
	_, addr := startTCP(t, TCPOptions{}, Route{Pool: pool})
	c1 := dialTCP(t, addr)
	io.WriteString(c1, "1")
	if _, err := io.ReadFull(c1, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	c2 := dialTCP(t, addr)
	io.WriteString(c2, "2")
	eventually(t, 5*time.Second, "second connection queued", func() bool { return pool.Queue() == 1 })
	if b := pool.Backends()[0]; b.InFlight() != 1 {
		t.Fatalf("in flight %d with max_conns 1", b.InFlight())
	}
	c1.Close()
	buf := make([]byte, 1)
	if _, err := io.ReadFull(c2, buf); err != nil || buf[0] != '2' {
		t.Fatalf("queued connection: %q %v", buf, err)
	}
	if pool.Queue() != 0 || pool.QueueStats().Dispatched != 1 {
		t.Fatalf("queue %d, stats %+v", pool.Queue(), pool.QueueStats())
	}
}

// TestTCPIdleTimeout: a connection with no bytes either way is closed after the idle timeout;
// one where only one direction moves bytes is not.
func TestTCPIdleTimeout(t *testing.T) {
	sink := tcpServer(t, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
	pool := newPool(t, "p", "leastconn", 0, 0, sink)
	const idle = 300 * time.Millisecond
	p, addr := startTCP(t, TCPOptions{IdleTimeout: idle}, Route{Pool: pool})

	busy := dialTCP(t, addr) // client → backend only, a byte every idle/4 for 4 idle periods
	for range 16 {
		if _, err := busy.Write([]byte("x")); err != nil {
			t.Fatalf("one-way traffic was cut: %v", err)
		}
		time.Sleep(idle / 4)
	}
	if p.Stats().IdleClosed != 0 {
		t.Fatalf("IdleClosed = %d while bytes flowed", p.Stats().IdleClosed)
	}
	busy.Close()

	quiet := dialTCP(t, addr)
	start := time.Now()
	quiet.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := quiet.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("idle connection not closed")
	}
	if el := time.Since(start); el < idle {
		t.Fatalf("closed after %v, before the idle timeout", el)
	}
	eventually(t, 5*time.Second, "IdleClosed counted", func() bool { return p.Stats().IdleClosed == 1 })
	eventually(t, 5*time.Second, "slot released", func() bool { return pool.InFlight() == 0 })
}

// TestTCPShutdownDrains: Shutdown stops accepting, lets an established connection finish, and
// returns once it has; with a short deadline it closes what is left.
func TestTCPShutdownDrains(t *testing.T) {
	be := tcpServer(t, echo)
	pool := newPool(t, "p", "leastconn", 0, 0, be)
	tab, _ := NewTable([]Route{{Pool: pool}})
	p := NewTCP(TCPOptions{}, tab)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go p.Serve(ln)
	c := dialTCP(t, ln.Addr().String())
	io.WriteString(c, "a")
	io.ReadFull(c, make([]byte, 1))

	done := make(chan error, 1)
	go func() { done <- p.Shutdown(context.Background()) }()
	eventually(t, 5*time.Second, "listener closed", func() bool {
		c2, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err == nil {
			c2.Close()
		}
		return err != nil
	})
	io.WriteString(c, "b") // the established connection still works
	buf := make([]byte, 1)
	if _, err := io.ReadFull(c, buf); err != nil || buf[0] != 'b' {
		t.Fatalf("draining connection: %q %v", buf, err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a connection open", err)
	default:
	}
	c.CloseWrite()
	io.ReadAll(c)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return after the last connection ended")
	}

	// Grace period over: the connection is closed.
	p2 := NewTCP(TCPOptions{}, tab)
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	go p2.Serve(ln2)
	c3 := dialTCP(t, ln2.Addr().String())
	io.WriteString(c3, "a")
	io.ReadFull(c3, make([]byte, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := p2.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown past its deadline: %v", err)
	}
	if _, err := io.ReadAll(c3); err != nil && !isReset(err) {
		t.Fatalf("after grace: %v", err)
	}
	eventually(t, 5*time.Second, "slots released", func() bool { return pool.InFlight() == 0 })
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "reset") }

// TestTCPPersistence: with persistence a client address keeps its backend across connections
// under roundrobin, which would otherwise alternate; another source address may go elsewhere.
func TestTCPPersistence(t *testing.T) {
	var addrs []string
	for _, n := range []string{"a", "b", "c"} {
		addrs = append(addrs, tcpServer(t, named(n)))
	}
	pick := func(addr, src string) string {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		return readLine(t, c)
	}
	for _, persist := range []time.Duration{0, time.Minute} {
		pool := newPool(t, fmt.Sprint("p", persist), "roundrobin", 0, 0, addrs...)
		_, addr := startTCP(t, TCPOptions{}, Route{Pool: pool, Persistence: persist})
		seen := map[string]int{}
		for range 9 {
			seen[pick(addr, "127.0.0.1")]++
		}
		if persist == 0 && len(seen) != 3 {
			t.Fatalf("roundrobin without persistence: %v", seen)
		}
		if persist > 0 && len(seen) != 1 {
			t.Fatalf("persistence: one client went to %v", seen)
		}
	}
}

// TestTCPPersistenceDrain: a draining backend keeps its persistent clients (HAProxy's DRAIN)
// and takes no new one; when the drain's grace ends, or the backend is disabled, they move.
func TestTCPPersistenceDrain(t *testing.T) {
	var addrs []string
	for _, n := range []string{"a", "b", "c"} {
		addrs = append(addrs, tcpServer(t, named(n)))
	}
	pick := func(addr, src string) string {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		return readLine(t, c)
	}
	for _, end := range []string{"disable", "grace"} {
		t.Run(end, func(t *testing.T) {
			pool := newPool(t, "p", "roundrobin", 0, 0, addrs...)
			_, addr := startTCP(t, TCPOptions{}, Route{Pool: pool, Persistence: time.Minute})
			first := pick(addr, "127.0.0.1")
			id := addrs[first[0]-'a']
			grace := time.Duration(0)
			if end == "grace" {
				grace = 300 * time.Millisecond
			}
			start := time.Now() // before the drain: its grace ends no later than start+grace
			if err := pool.DrainFor(id, grace); err != nil {
				t.Fatal(err)
			}
			for range 6 {
				if got := pick(addr, "127.0.0.1"); got != first && time.Since(start) < grace || grace == 0 && got != first {
					t.Fatalf("a persistent client of draining %s went to %s", first, got)
				}
				if got := pick(addr, "127.0.0.2"); got == first {
					t.Fatalf("a new client went to draining %s", first)
				}
			}
			if end == "disable" {
				if err := pool.Disable(id); err != nil {
					t.Fatal(err)
				}
			} else {
				time.Sleep(time.Until(start.Add(grace)))
			}
			if got := pick(addr, "127.0.0.1"); got == first {
				t.Fatalf("after %s the persistent client still went to %s", end, got)
			}
		})
	}
}

// TestTCPSendProxy: the backend receives exactly the PROXY header for the client, then the
// client's bytes.
func TestTCPSendProxy(t *testing.T) {
	for _, v := range []proxyproto.Version{proxyproto.V1, proxyproto.V2} {
		t.Run(v.String(), func(t *testing.T) {
			got := make(chan []byte, 1)
			be := tcpServer(t, func(c *net.TCPConn) {
				b, _ := io.ReadAll(c)
				got <- b
			})
			_, addr := startTCP(t, TCPOptions{}, Route{Pool: newPool(t, "p", "leastconn", 0, 0, be), SendProxy: v})
			c := dialTCP(t, addr)
			io.WriteString(c, "payload")
			c.CloseWrite()
			cl, pr := c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr)
			var want []byte
			if v == proxyproto.V1 {
				want = fmt.Appendf(nil, "PROXY TCP4 127.0.0.1 127.0.0.1 %d %d\r\n", cl.Port, pr.Port)
			} else {
				want = []byte{0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A, 0x21, 0x11, 0, 12,
					127, 0, 0, 1, 127, 0, 0, 1, byte(cl.Port >> 8), byte(cl.Port), byte(pr.Port >> 8), byte(pr.Port)}
			}
			want = append(want, "payload"...)
			select {
			case b := <-got:
				if !bytes.Equal(b, want) {
					t.Fatalf("backend got %q\nwant %q", b, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("backend got nothing")
			}
		})
	}
}

// TestTCPAcceptProxy: on an accept_proxy listener the client named in the header is what the
// backend is told (send_proxy) and what the flow hash uses; a missing header closes and counts.
func TestTCPAcceptProxy(t *testing.T) {
	got := make(chan []byte, 4)
	be := tcpServer(t, func(c *net.TCPConn) {
		b, _ := io.ReadAll(c)
		got <- b
	})
	p, addr := startTCP(t, TCPOptions{AcceptProxy: true, HandshakeTimeout: time.Second},
		Route{Pool: newPool(t, "p", "leastconn", 0, 0, be), SendProxy: proxyproto.V1})
	c := dialTCP(t, addr)
	io.WriteString(c, "PROXY TCP4 203.0.113.9 198.51.100.1 40000 443\r\nhello")
	c.CloseWrite()
	select {
	case b := <-got:
		if want := "PROXY TCP4 203.0.113.9 198.51.100.1 40000 443\r\nhello"; string(b) != want {
			t.Fatalf("backend got %q, want %q", b, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("backend got nothing")
	}
	for _, bad := range []string{"GET / HTTP/1.0\r\n\r\n", "PROXY TCP4 x y 1 2\r\n", ""} {
		c := dialTCP(t, addr)
		io.WriteString(c, bad)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("%q: connection not closed", bad)
		}
	}
	eventually(t, 5*time.Second, "refusals counted", func() bool { return p.Stats().ProxyRefused == 3 })
	if len(got) != 0 {
		t.Fatalf("a refused connection reached the backend: %q", <-got)
	}
}

// TestTCPFDsAfterManyConns: 10,000 connections opened and closed through the proxy leave the
// process with as many file descriptors as before.
func TestTCPFDsAfterManyConns(t *testing.T) {
	be := tcpServer(t, echo)
	pool := newPool(t, "p", "leastconn", 0, 0, be)
	p, addr := startTCP(t, TCPOptions{}, Route{Pool: pool})
	warm := dialTCP(t, addr) // the first connection starts the runtime's poller and the like
	io.WriteString(warm, "w")
	io.ReadFull(warm, make([]byte, 1))
	warm.Close()
	eventually(t, 5*time.Second, "warm-up connection ended", func() bool { return p.Stats().Active == 0 })
	before := countFDs(t)

	const total, workers = 10000, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1)
			for i := w; i < total; i += workers {
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					errs <- err
					return
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				_, err = c.Write([]byte{'k'})
				if err == nil {
					_, err = io.ReadFull(c, buf)
				}
				c.Close()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "all connections ended", func() bool { return p.Stats().Active == 0 && pool.InFlight() == 0 })
	eventually(t, 20*time.Second, "fd count back to where it was", func() bool {
		return countFDs(t) <= before+2
	})
	if a := p.Stats().Accepted; a < total+1 {
		t.Fatalf("accepted %d", a)
	}
}

// TestTCPIdleHoldsNoPipe: connections that moved bytes and went idle hold no splice pipe and
// no goroutine (they wait in the relay's epoll set), so an idle connection costs its two
// sockets and its bookkeeping (the pipes of a busy moment go back to Go's pool and are not
// counted per connection), and a bulk transfer after the idle moment is still delivered whole.
func TestTCPIdleHoldsNoPipe(t *testing.T) {
	// The backend echoes through a buffer: io.Copy between two sockets would splice, and its
	// pipes would be counted here too.
	be := tcpServer(t, func(c *net.TCPConn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				_ = c.CloseWrite()
				return
			}
		}
	})
	p, addr := startTCP(t, TCPOptions{}, Route{Pool: newPool(t, "p", "leastconn", 0, 0, be)})
	pipes := func() int {
		es, _ := os.ReadDir("/proc/self/fd")
		n := 0
		for _, e := range es {
			if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
				n++
			}
		}
		return n
	}
	before, goroutines := pipes(), runtime.NumGoroutine()
	const n = 64
	conns := make([]*net.TCPConn, n)
	buf := make([]byte, 1)
	for i := range conns {
		conns[i] = dialTCP(t, addr)
		conns[i].Write([]byte{'x'})
		if _, err := io.ReadFull(conns[i], buf); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "all connections open", func() bool { return p.Stats().Active == n })
	if got := pipes() - before; got >= n {
		t.Fatalf("%d idle connections hold %d more pipe descriptors", n, got)
	}
	// The test backend serves each connection in a goroutine of its own; the proxy adds none
	// (with a goroutine pipe it held two per connection).
	if got := runtime.NumGoroutine() - goroutines; got >= n+n/4 {
		t.Fatalf("%d idle connections hold %d more goroutines (the backend's %d included)", n, got, n)
	}
	// A bulk transfer on one of them afterwards: 4 MiB through, echoed back.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18)
	c := conns[0]
	go func() { c.Write(big); c.CloseWrite() }()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	back, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(back, big) {
		t.Fatalf("bulk echo: %d of %d bytes, equal %v, %v", len(back), len(big), bytes.Equal(back, big), err)
	}
}

// TestTCPIPv6AndHostName: an IPv6 listener reports the client's and its own IPv6 addresses (the
// raw accept's and getsockname's, in the PROXY header), and a backend named by a host name is
// dialled through the resolver.
func TestTCPIPv6AndHostName(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	got := make(chan []byte, 1)
	be := tcpServer(t, func(c *net.TCPConn) {
		b, _ := io.ReadAll(c)
		got <- b
	})
	_, port, _ := net.SplitHostPort(be)
	serveTCP(t, ln, TCPOptions{}, Route{Pool: newPool(t, "p", "leastconn", 0, 0, "localhost:"+port), SendProxy: proxyproto.V1})
	c := dialTCP(t, ln.Addr().String())
	io.WriteString(c, "v6")
	c.CloseWrite()
	cl, pr := c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr)
	want := fmt.Sprintf("PROXY TCP6 ::1 ::1 %d %d\r\nv6", cl.Port, pr.Port)
	select {
	case b := <-got:
		if string(b) != want {
			t.Fatalf("backend got %q\nwant %q", b, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("backend got nothing")
	}
}
