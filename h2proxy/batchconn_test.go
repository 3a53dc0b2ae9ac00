package h2proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Writes reach the peer whole and in order, however the flusher batches them, and Close
// delivers what was accepted before it.
func TestBatchConnOrderAndClose(t *testing.T) {
	a, b := net.Pipe()
	c := newBatchConn(a)
	var want bytes.Buffer
	got := make(chan []byte)
	go func() { all, _ := io.ReadAll(b); got <- all }()
	for i := range 2000 {
		p := bytes.Repeat([]byte{byte(i)}, 1+i%97)
		want.Write(p)
		if n, err := c.Write(p); n != len(p) || err != nil {
			t.Fatalf("Write %d: %d, %v", i, n, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case all := <-got:
		if !bytes.Equal(all, want.Bytes()) {
			t.Fatalf("peer read %d bytes, want the %d written, in order", len(all), want.Len())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("peer did not see the end of the connection")
	}
}

// A failed socket write is returned by the next Write: the connection is broken.
func TestBatchConnWriteErrorSticks(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	c := newBatchConn(a)
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatalf("the first Write only buffers, got %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c.Write([]byte("x"))
		if errors.Is(err, io.ErrClosedPipe) {
			break
		}
		if err != nil {
			t.Fatalf("Write: %v, want the socket's error %v", err, io.ErrClosedPipe)
		}
		if time.Now().After(deadline) {
			t.Fatal("Write kept succeeding on a connection whose writes fail")
		}
		time.Sleep(time.Millisecond)
	}
	c.Close()
}

// A peer that stops reading makes Write wait once maxBatched bytes are unwritten, instead of
// buffering without bound; Close then gives up after closeFlushTimeout.
func TestBatchConnBoundedAndCloseGivesUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); peer <- c }()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { (<-peer).Close() }()
	c := newBatchConn(raw)
	var mu sync.Mutex
	written := 0
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		p := make([]byte, 16<<10)
		for range 4096 { // 64 MiB: far more than the socket buffers hold
			if _, err := c.Write(p); err != nil {
				return
			}
			mu.Lock()
			written += len(p)
			mu.Unlock()
		}
	}()
	// Wait until the writer stalls: the count stops moving.
	last := -1
	for i := 0; ; i++ {
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		n := written
		mu.Unlock()
		if n == last {
			break
		}
		if i > 200 {
			t.Fatal("Write never blocked on a peer that does not read")
		}
		last = n
	}
	c.mu.Lock()
	held := 0
	if c.pending != nil {
		held = len(*c.pending)
	}
	c.mu.Unlock()
	if held > maxBatched+16<<10 {
		t.Errorf("%d bytes held unwritten, want at most %d", held, maxBatched+16<<10)
	}
	start := time.Now()
	c.Close()
	if d := time.Since(start); d > closeFlushTimeout+5*time.Second {
		t.Errorf("Close took %v with a stuck peer, want about %v", d, closeFlushTimeout)
	}
	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked Write did not return after Close")
	}
}
