package h2mux

import (
	"bytes"
	"runtime"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// freeList is the simplest BufferPool: a stack of 16 KiB buffers, as a shard keeps.
type freeList struct{ bufs [][]byte }

func (f *freeList) Get() []byte {
	if n := len(f.bufs); n > 0 {
		b := f.bufs[n-1]
		f.bufs = f.bufs[:n-1]
		return b
	}
	return make([]byte, 0, 16<<10)
}

func (f *freeList) Put(b []byte) { f.bufs = append(f.bufs, b[:0]) }

// TestIdleConnMemory measures what an idle connection holds once it has served a request
// (its HPACK table holding that request's fields), with its buffers lent by a pool: no
// buffer stays with an idle connection. The figure is logged; the bound is what
// docs/http2-engine.md promises.
func TestIdleConnMemory(t *testing.T) {
	const n = 4000
	var w, eb bytes.Buffer
	fr := http2.NewFramer(&w, nil)
	enc := hpack.NewEncoder(&eb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/index.html"}, {":authority", "www.example.com"}, {"user-agent", "curl/7.88.1"}, {"accept", "*/*"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	w.WriteString(http2.ClientPreface)
	fr.WriteSettings()
	fr.WriteSettingsAck()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: eb.Bytes(), EndStream: true, EndHeaders: true})
	in := w.Bytes()
	pool := &freeList{}
	now := func() int64 { return 1 }
	open := func() *Conn {
		h := &benchHandler{page: []byte("hello")}
		c := NewConn(h, Config{Buffers: pool, Now: now})
		h.c = c
		if err := c.Feed(in); err != nil {
			t.Fatal(err)
		}
		c.Advance(len(c.Output()))
		if c.out != nil || c.in != nil || c.NumStreams() != 0 || h.n != 1 {
			t.Fatalf("idle connection holds buffers (%d, %d) or streams, %d answers", cap(c.out), cap(c.in), h.n)
		}
		return c
	}
	for i := 0; i < 100; i++ {
		open() // warm the pool
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	held := make([]*Conn, n)
	for i := range held {
		held[i] = open()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("an idle connection after one request holds %d bytes of heap (the Conn, its HPACK table, stream map, scratch)", per)
	if per > 4<<10 {
		t.Errorf("%d bytes per idle connection", per)
	}
	runtime.KeepAlive(held)
}
