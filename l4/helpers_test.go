package l4

import (
	"ballast/internal/refused"
	"context"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"ballast/config"
	"ballast/upstream"
)

// newPool is the one place tests build pools; the upstream constructor's signature lives here.
func newPool(t testing.TB, name, balancer string, maxConns, maxQueue int, addrs ...string) *upstream.Pool {
	t.Helper()
	c := config.Pool{Name: name, Balancer: balancer, MaxConns: maxConns, MaxQueue: maxQueue,
		QueueTimeout: config.Duration{Duration: 10 * time.Second}}
	for _, a := range addrs {
		c.Backends = append(c.Backends, config.Backend{Name: a, Address: a, Weight: 1})
	}
	p, err := upstream.NewPool(c.Spec(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// eventually polls cond every few milliseconds until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tcpServer runs serve for every connection accepted on a loopback port until the test ends.
func tcpServer(t testing.TB, serve func(*net.TCPConn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					c.Close()
				}()
				serve(c.(*net.TCPConn))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// echo copies everything back, then half-closes: the reply after the client's FIN.
func echo(c *net.TCPConn) {
	_, _ = io.Copy(c, c)
	_ = c.CloseWrite()
	_, _ = io.Copy(io.Discard, c)
}

// named writes its name on connect, then echoes.
func named(name string) func(*net.TCPConn) {
	return func(c *net.TCPConn) {
		if _, err := io.WriteString(c, name+"\n"); err != nil {
			return
		}
		echo(c)
	}
}

// deadPort is a loopback port with nothing listening: connects are refused.
func deadPort(t testing.TB) string {
	t.Helper()
	return refused.TCP(t)
}

// startTCP serves routes on a loopback listener and shuts the proxy down when the test ends.
func startTCP(t testing.TB, opts TCPOptions, routes ...Route) (*TCP, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveTCP(t, ln, opts, routes...), ln.Addr().String()
}

// serveTCP serves routes on ln and shuts the proxy down when the test ends.
func serveTCP(t testing.TB, ln net.Listener, opts TCPOptions, routes ...Route) *TCP {
	t.Helper()
	tab, err := NewTable(routes)
	if err != nil {
		t.Fatal(err)
	}
	p := NewTCP(opts, tab)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
		<-done
	})
	return p
}

func dialTCP(t testing.TB, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c.(*net.TCPConn)
}

// readLine reads up to and including '\n' without buffering past it.
func readLine(t testing.TB, c net.Conn) string {
	t.Helper()
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := c.Read(one); err != nil {
			t.Fatalf("reading a line after %q: %v", b, err)
		}
		if one[0] == '\n' {
			return string(b)
		}
		b = append(b, one[0])
	}
}

func countFDs(t testing.TB) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(es)
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
