//go:build linux

package evloop

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// echo is a test handler: it writes back what it reads, keeping what the peer cannot take
// yet in a pooled buffer and not reading meanwhile (backpressure), and closes the connection
// after idle without a byte.
type echo struct {
	FD
	timer   Timer
	pending []byte
	idle    time.Duration
	closed  *atomic.Int64
}

func (e *echo) Event(ev Events) {
	s := e.Shard()
	if s == nil {
		return
	}
	if len(e.pending) > 0 {
		if e.Ready&Writable == 0 {
			return
		}
		n, err := e.Write(e.pending)
		if err != nil && err != ErrAgain {
			e.close()
			return
		}
		e.pending = e.pending[:copy(e.pending, e.pending[n:])]
		if len(e.pending) > 0 {
			return
		}
		s.PutBuf(e.pending)
		e.pending = nil
	}
	for e.Ready&Readable != 0 {
		n, err := e.Read(s.Buf())
		if err == ErrAgain {
			break
		}
		if err != nil {
			e.close()
			return
		}
		if e.idle > 0 {
			s.Arm(&e.timer, s.Now()+int64(e.idle))
		}
		data := s.Buf()[:n]
		w, err := e.Write(data)
		if err != nil && err != ErrAgain {
			e.close()
			return
		}
		if w < n {
			e.pending = append(s.GetBuf(n-w), data[w:]...)
			return
		}
	}
}

func (e *echo) Expire(int64) { e.close() }

func (e *echo) close() {
	s := e.Shard()
	s.Stop(&e.timer)
	if e.pending != nil {
		s.PutBuf(e.pending)
		e.pending = nil
	}
	e.closed.Add(1) // before the close the peer sees
	e.Close()
}

func startEcho(t *testing.T, shards int, idle time.Duration) (addr string, g *Group, l *Listener, closed *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, err = NewGroup(shards)
	if err != nil {
		t.Fatal(err)
	}
	closed = new(atomic.Int64)
	l, err = g.Listen(ln.(*net.TCPListener), func(s *Shard, fd int, _ netip.AddrPort) {
		e := &echo{idle: idle, closed: closed}
		e.timer.Init(e)
		if err := s.Add(&e.FD, fd, e); err != nil {
			t.Error(err)
			return
		}
		if idle > 0 {
			s.Arm(&e.timer, s.Now()+int64(idle))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		_ = ln.Close()
		g.Close()
	})
	return ln.Addr().String(), g, l, closed
}

func TestShardEchoManyConnections(t *testing.T) {
	addr, _, l, _ := startEcho(t, 2, 0)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			msg := bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i*37)
			for range 20 {
				if _, err := c.Write(msg); err != nil {
					t.Error(err)
					return
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
					t.Errorf("echo: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := l.Accepted.Load(); n != 50 {
		t.Fatalf("accepted %d connections, want 50", n)
	}
}

// A 64 MiB transfer both ways through one connection whose client reads slowly at first:
// the echo stops reading while its peer cannot take more, so its buffer stays bounded.
func TestShardEchoBulkBackpressure(t *testing.T) {
	addr, g, _, _ := startEcho(t, 1, 0)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size = 64 << 20
	src := make([]byte, 1<<20)
	for i := range src {
		src[i] = byte(i * 7)
	}
	go func() {
		for sent := 0; sent < size; sent += len(src) {
			if _, err := c.Write(src); err != nil {
				return
			}
		}
	}()
	// Not reading, the client fills the sockets: the echo's write blocks, it keeps what is
	// left in a pooled buffer and stops reading (at least one get before a byte is read here).
	bufStats := func() (gets, misses uint64) {
		done := make(chan struct{})
		g.Shards()[0].Post(taskFunc(func(s *Shard) { gets, misses = s.BufStats(); close(done) }))
		<-done
		return gets, misses
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if gets, _ := bufStats(); gets > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the echo never had to keep bytes back from a client that does not read")
		}
	}
	got := make([]byte, 1<<20)
	for recv := 0; recv < size; {
		n, err := io.ReadFull(c, got)
		if err != nil {
			t.Fatalf("after %d bytes: %v", recv, err)
		}
		if !bytes.Equal(got[:n], src[:n]) {
			t.Fatalf("corrupt data at %d", recv)
		}
		recv += n
	}
	// The connection never held more than one read's worth: one buffer of each class at most.
	gets, misses := bufStats()
	if misses > uint64(len(bufClasses)) || gets < 1 {
		t.Fatalf("the pool allocated %d buffers for one connection in %d gets, want at most one per class (%d) and some gets", misses, gets, len(bufClasses))
	}
}

func TestShardTimerClosesIdle(t *testing.T) {
	addr, _, _, closed := startEcho(t, 2, 500*time.Millisecond)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Activity keeps it open past the idle time.
	for range 4 {
		time.Sleep(50 * time.Millisecond)
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatalf("closed while active: %v", err)
		}
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read after idling: %v, want EOF", err)
	}
	if d := time.Since(start); d < 450*time.Millisecond {
		t.Fatalf("closed after %v idle, before its timeout", d)
	}
	if closed.Load() != 1 {
		t.Fatalf("closed %d connections, want 1", closed.Load())
	}
}

type countTask struct {
	n  *atomic.Int64
	wg *sync.WaitGroup
}

func (c countTask) Run(*Shard) { c.n.Add(1); c.wg.Done() }

// Posts from many goroutines all run, whether the shard sleeps or not.
func TestShardPost(t *testing.T) {
	g, err := NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var n atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for k := range 500 {
				wg.Add(1)
				g.Shards()[(i+k)%2].Post(countTask{&n, &wg})
				if k%50 == 0 {
					time.Sleep(time.Millisecond) // let the shards fall asleep now and then
				}
			}
		})
	}
	wg.Wait()
	if n.Load() != 4000 {
		t.Fatalf("ran %d tasks, want 4000", n.Load())
	}
}

func TestListenerClose(t *testing.T) {
	addr, _, l, _ := startEcho(t, 2, 0)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l.Close()
	if l.Closed() {
		t.Fatal("Closed reports the socket closed; Close must leave it to its owner")
	}
	// The connection accepted before still echoes.
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	// A new one is no longer accepted: it sits in the backlog unanswered.
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, _ = c2.Write([]byte("x"))
	_ = c2.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, _ := c2.Read(make([]byte, 1)); n != 0 {
		t.Fatal("a connection made after Close was served")
	}
	if a := l.Accepted.Load(); a != 1 {
		t.Fatalf("accepted %d, want 1", a)
	}
}

// After the last timer fires the shard must wait for events again, not spin on the passed
// deadline: a connection made after it is still accepted and served.
func TestShardSleepsAfterLastTimer(t *testing.T) {
	addr, g, _, closed := startEcho(t, 1, 50*time.Millisecond)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle connection: %v, want EOF", err)
	}
	c.Close()
	waitClosed := time.Now().Add(5 * time.Second)
	for closed.Load() != 1 && time.Now().Before(waitClosed) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the wheel is empty now
	wakes := g.Shards()[0].Wakes.Load()
	time.Sleep(200 * time.Millisecond)
	if w := g.Shards()[0].Wakes.Load() - wakes; w > 5 {
		t.Fatalf("an idle shard woke %d times in 200 ms", w)
	}
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c2, make([]byte, 1)); err != nil {
		t.Fatalf("a connection after the last timer: %v", err)
	}
}

type blockTask struct{ started, release chan struct{} }

func (b blockTask) Run(*Shard) {
	close(b.started)
	<-b.release
}

// Connections that queue up on the listening socket while its shard is busy are all taken
// once it is free, though nothing new reaches the set after the first report: the socket is
// level-triggered and a shard accepts one connection per report, so after a batch with a
// listener in it the shard must look at its set again instead of parking. The accept
// function closes each connection at once (as a refusing listener does), so no Add raises an
// edge that would wake the shard anyway; each client must see its connection closed.
func TestListenerBacklogAfterBusyShard(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g, err := NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	l, err := g.Listen(ln.(*net.TCPListener), func(s *Shard, fd int, _ netip.AddrPort) {
		_ = syscall.Close(fd)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b := blockTask{make(chan struct{}), make(chan struct{})}
	g.Shards()[0].Post(b)
	<-b.started
	const n = 100
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			close(b.release)
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	close(b.release)
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("connection %d of the backlog: %v, want EOF (accepted %d)", i, err, l.Accepted.Load())
		}
	}
	if a := l.Accepted.Load(); a != n {
		t.Fatalf("accepted %d, want %d", a, n)
	}
}
