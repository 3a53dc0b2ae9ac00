//go:build linux

package h1

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// BenchmarkH2CProxy measures one request through the engine's HTTP/2 path (ported from
// h2proxy, whose plane it measured until the shards served h2c): an h2c client (x/net's
// Transport) multiplexing parallel streams over one connection, a pool of one backend
// answering 44 bytes over HTTP/1.1 or h2c. The numbers include the client and the backend
// (Go's net/http server) in this process.
func BenchmarkH2CProxy(b *testing.B) {
	for _, protocol := range []string{"http1", "h2c"} {
		b.Run(protocol, func(b *testing.B) {
			body := []byte("<html><body><h1>It works!</h1></body></html>")
			backend := dualServer(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "44")
				w.Write(body)
			}))
			s := startYAML(b, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, protocol: %s, backends: [{address: %s}]}]
`, protocol, backend))
			url := "http://" + s.Addr("in").String() + "/"
			c := xh2c()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Get(url)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

// BenchmarkForwardH2C is BenchmarkForwardKeepAlive for an h2c client: one stream at a time
// on one connection (a GET whose frame is built once, its fields indexed in HPACK's dynamic
// table after the first, the stream ID patched in), through the shards to the HTTP/1.1 backend of 44 bytes, over loopback. The
// client and the backend allocate nothing per request, so the allocations reported are the
// engine's per HTTP/2 stream (h2mux's request fields, the stream, the exchange). h2proxy's
// BenchmarkH2CProxy, ported above, counts x/net's client and Go's backend server with them.
//
// "indexed" is what h2load and browsers send; "literal" sends every field as a literal never
// indexed, whose values HPACK's decoder (x/net's hpack, under h2mux) copies into new strings:
// 4 allocations per stream here, 0 for "indexed".
func BenchmarkForwardH2C(b *testing.B) {
	for _, literal := range []bool{false, true} {
		name := "indexed"
		if literal {
			name = "literal"
		}
		b.Run(name, func(b *testing.B) {
			cfg := testConfig(testPool("p", "roundrobin", fixedBackend(b)))
			cfg.Listeners[0].ExposeBackend = false
			te, ctr := h2cEngine(b, cfg, nil)
			k := newH2KeepAliveClient(b, te.addr, literal)
			for range 100 { // warm: connections, buffers, free lists
				k.do(b)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				k.do(b)
			}
			b.StopTimer()
			if n := ctr.Streams.Load(); n < uint64(b.N) {
				b.Fatalf("%d streams counted for %d requests", n, b.N)
			}
		})
	}
}

// h2KeepAliveClient sends one GET stream at a time on one h2c connection and reads until the
// stream ends, allocating nothing per request.
type h2KeepAliveClient struct {
	c      net.Conn
	first  []byte // the first request's HEADERS frame (END_STREAM, END_HEADERS)
	req    []byte // every later one's; its stream ID is patched in
	ack    []byte // a SETTINGS acknowledgement
	wu     []byte // a WINDOW_UPDATE of the connection's receive window
	buf    []byte
	have   int
	id     uint32
	window int // connection window left before wu is sent again
}

func newH2KeepAliveClient(tb testing.TB, addr string, literal bool) *h2KeepAliveClient {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	// As h2load and browsers send them: the first request's fields go into the dynamic table,
	// every later request is the same block of indexes (literal: the same literals each time).
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	var frames bytes.Buffer
	fr := http2.NewFramer(&frames, nil)
	var reqs [2][]byte
	for i := range reqs {
		hb.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "bench.example"}, {":path", "/"}, {"user-agent", "h2load"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: literal})
		}
		frames.Reset()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
		reqs[i] = append([]byte(nil), frames.Bytes()...)
	}
	k := &h2KeepAliveClient{c: c, first: reqs[0], req: reqs[1], buf: make([]byte, 64<<10), id: 1, window: 1 << 30}
	frames.Reset()
	_ = fr.WriteSettingsAck()
	k.ack = append([]byte(nil), frames.Bytes()...)
	frames.Reset()
	_ = fr.WriteWindowUpdate(0, 1<<30)
	k.wu = append([]byte(nil), frames.Bytes()...)
	frames.Reset()
	frames.WriteString(http2.ClientPreface)
	_ = fr.WriteSettings()
	frames.Write(k.wu)
	if _, err := c.Write(frames.Bytes()); err != nil {
		tb.Fatal(err)
	}
	return k
}

func (k *h2KeepAliveClient) do(tb testing.TB) {
	req := k.req
	if k.id == 1 {
		req = k.first
	}
	binary.BigEndian.PutUint32(req[5:9], k.id)
	if _, err := k.c.Write(req); err != nil {
		tb.Fatal(err)
	}
	for {
		for k.have >= 9 { // whole frames in buf
			n := int(k.buf[0])<<16 | int(k.buf[1])<<8 | int(k.buf[2])
			if k.have < 9+n {
				break
			}
			typ, flags, id := http2.FrameType(k.buf[3]), http2.Flags(k.buf[4]), binary.BigEndian.Uint32(k.buf[5:9])&(1<<31-1)
			if typ == http2.FrameData {
				k.window -= n
			}
			if typ == http2.FrameSettings && flags&http2.FlagSettingsAck == 0 {
				if _, err := k.c.Write(k.ack); err != nil {
					tb.Fatal(err)
				}
			}
			k.have = copy(k.buf, k.buf[9+n:k.have])
			if id == k.id && (typ == http2.FrameData || typ == http2.FrameHeaders) && flags&http2.FlagDataEndStream != 0 {
				k.id += 2
				if k.window < 1<<29 {
					if _, err := k.c.Write(k.wu); err != nil {
						tb.Fatal(err)
					}
					k.window += 1 << 30
				}
				return
			}
			if typ == http2.FrameRSTStream && id == k.id || typ == http2.FrameGoAway {
				tb.Fatalf("stream %d: frame %v", k.id, typ)
			}
		}
		n, err := k.c.Read(k.buf[k.have:])
		if err != nil {
			tb.Fatal(err)
		}
		k.have += n
	}
}
