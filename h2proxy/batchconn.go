package h2proxy

import (
	"net"
	"runtime"
	"sync"
	"time"
)

// batchConn gathers the writes of one client connection into fewer system calls.
//
// x/net/http2 flushes its frame buffer whenever its write queue runs empty, and a handler's
// response goes out as two waits on that queue (HEADERS, then DATA), so a small response costs
// about two writes to the socket, each from a new goroutine. batchConn's Write only appends to
// a buffer and starts a flusher when none is running; the flusher first yields, so that the
// frames which become ready meanwhile (the DATA after its HEADERS, other streams' responses)
// join the same write. Ordering is the order of Write calls; a failed write is returned by
// the next Write (and every later one), as a broken connection must be.
//
// Memory is bounded: a Write waits while maxBatched bytes are still unwritten, and the buffers
// go back to a pool whenever everything is written, so an idle connection holds none.
type batchConn struct {
	net.Conn

	mu       sync.Mutex
	drained  sync.Cond // signalled each time the flusher wrote a batch
	pending  *[]byte   // bytes accepted by Write and not yet handed to the socket
	flushing bool      // a flusher goroutine runs
	err      error     // the first failed write
}

// maxBatched is how many unwritten bytes a connection may hold before Write waits.
const maxBatched = 64 << 10

// closeFlushTimeout bounds how long Close waits for the last bytes to reach the socket.
const closeFlushTimeout = time.Second

var batchPool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

func newBatchConn(c net.Conn) *batchConn {
	b := &batchConn{Conn: c}
	b.drained.L = &b.mu
	return b
}

func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	for c.err == nil && c.pending != nil && len(*c.pending) >= maxBatched {
		c.drained.Wait()
	}
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	if c.pending == nil {
		c.pending = batchPool.Get().(*[]byte)
	}
	*c.pending = append(*c.pending, p...)
	if !c.flushing {
		c.flushing = true
		go c.flush()
	}
	c.mu.Unlock()
	return len(p), nil
}

// flush writes what is pending until nothing is.
func (c *batchConn) flush() {
	runtime.Gosched() // let the frames that are about to be ready join this write
	c.mu.Lock()
	for c.pending != nil && c.err == nil {
		buf := c.pending
		c.pending = nil
		c.mu.Unlock()
		_, err := c.Conn.Write(*buf)
		*buf = (*buf)[:0]
		if cap(*buf) <= maxBatched {
			batchPool.Put(buf)
		}
		c.mu.Lock()
		if err != nil {
			c.err = err
		}
		c.drained.Broadcast()
	}
	if c.pending != nil { // a write failed: what is left is lost with the connection
		*c.pending = (*c.pending)[:0]
		batchPool.Put(c.pending)
		c.pending = nil
	}
	c.flushing = false
	c.drained.Broadcast()
	c.mu.Unlock()
}

// Close lets the flusher write what was accepted (a GOAWAY, the last response), for at most
// closeFlushTimeout, then closes the connection.
func (c *batchConn) Close() error {
	c.mu.Lock()
	if c.flushing {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(closeFlushTimeout))
		for c.flushing {
			c.drained.Wait()
		}
	}
	c.mu.Unlock()
	return c.Conn.Close()
}
