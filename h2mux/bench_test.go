package h2mux

import (
	"bytes"
	"encoding/binary"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// benchHandler answers each complete request with the peers' 44-byte page, as the h2load
// benchmarks' backends do, and consumes request bodies at once.
type benchHandler struct {
	c    *Conn
	page []byte
	n    int
}

func (h *benchHandler) Request(s *Stream, _ *Request, end bool) {
	if end {
		h.answer(s)
	}
}
func (h *benchHandler) Data(s *Stream, p []byte, end bool) {
	h.c.Consumed(s, len(p))
	if end {
		h.answer(s)
	}
}
func (h *benchHandler) Trailers(s *Stream, _ []hpack.HeaderField) { h.answer(s) }
func (h *benchHandler) Reset(*Stream, ErrCode)                    {}
func (h *benchHandler) Writable(*Stream)                          {}
func (h *benchHandler) GoAway(ErrCode, []byte)                    {}

func (h *benchHandler) answer(s *Stream) {
	hb := h.c.Headers(s, 200)
	hb.Add("server", "ballast")
	hb.Add("content-type", "text/html")
	hb.Add("content-length", "44")
	hb.Send(false)
	h.c.WriteData(s, h.page, true)
	h.n++
}

// benchConn is a connection past its handshake and first request, and the bytes of one
// request as h2load sends it once its HPACK table is warm (every field indexed), with the
// WINDOW_UPDATE that gives back the window of one response.
func benchConn(b *testing.B) (*Conn, *benchHandler, []byte) {
	h := &benchHandler{page: bytes.Repeat([]byte("x"), 44)}
	c := NewConn(h, Config{})
	h.c = c
	var w, eb bytes.Buffer
	fr := http2.NewFramer(&w, nil)
	enc := hpack.NewEncoder(&eb)
	block := func() []byte {
		eb.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":path", "/"}, {":scheme", "http"}, {":authority", "127.0.0.1:8080"}, {"accept", "*/*"}, {"accept-encoding", "gzip, deflate"}, {"user-agent", "h2load nghttp2/1.52.0"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		return append([]byte(nil), eb.Bytes()...)
	}
	w.WriteString(http2.ClientPreface)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	fr.WriteSettingsAck()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(), EndStream: true, EndHeaders: true})
	if err := c.Feed(w.Bytes()); err != nil {
		b.Fatal(err)
	}
	c.Advance(len(c.Output()))
	w.Reset()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(), EndStream: true, EndHeaders: true})
	fr.WriteWindowUpdate(0, 44)
	return c, h, append([]byte(nil), w.Bytes()...)
}

// setStream rewrites the stream identifier of the HEADERS frame at the start of req.
func setStream(req []byte, id uint32) { binary.BigEndian.PutUint32(req[5:9], id) }

// BenchmarkExchange: one request and its response on an open connection: Feed, the handler's
// answer (head and body), drain. Allocates nothing.
func BenchmarkExchange(b *testing.B) {
	c, h, req := benchConn(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(req)))
	id := uint32(3)
	for b.Loop() {
		setStream(req, id)
		id += 2
		if err := c.Feed(req); err != nil {
			b.Fatal(err)
		}
		c.Advance(len(c.Output()))
	}
	if h.n < b.N {
		b.Fatalf("%d answers for %d requests", h.n, b.N)
	}
}

// BenchmarkExchange10: ten requests in one read and their ten responses in one drain, as
// with h2load -m10.
func BenchmarkExchange10(b *testing.B) {
	c, h, one := benchConn(b)
	req := bytes.Repeat(one, 10)
	b.ReportAllocs()
	id := uint32(3)
	for b.Loop() {
		for i := 0; i < 10; i++ {
			setStream(req[i*len(one):], id)
			id += 2
		}
		if err := c.Feed(req); err != nil {
			b.Fatal(err)
		}
		c.Advance(len(c.Output()))
	}
	if h.n < 10*b.N {
		b.Fatalf("%d answers", h.n)
	}
}

// BenchmarkUpload: request DATA of 16 KiB frames through an open stream, consumed at once
// (the windows given back as they are due).
func BenchmarkUpload(b *testing.B) {
	c, _, _ := benchConn(b)
	var w bytes.Buffer
	fr := http2.NewFramer(&w, nil)
	eb := bytes.Buffer{}
	enc := hpack.NewEncoder(&eb)
	for _, f := range [][2]string{{":method", "POST"}, {":path", "/"}, {":scheme", "http"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: eb.Bytes(), EndHeaders: true})
	if err := c.Feed(w.Bytes()); err != nil {
		b.Fatal(err)
	}
	w.Reset()
	fr.WriteData(5, false, make([]byte, 16384))
	frame := append([]byte(nil), w.Bytes()...)
	b.ReportAllocs()
	b.SetBytes(16384)
	for b.Loop() {
		if err := c.Feed(frame); err != nil {
			b.Fatal(err)
		}
		c.Advance(len(c.Output()))
	}
}

// BenchmarkDownload: response DATA framed in 16 KiB frames within open windows.
func BenchmarkDownload(b *testing.B) {
	c, _, _ := benchConn(b)
	var w bytes.Buffer
	fr := http2.NewFramer(&w, nil)
	fr.WriteWindowUpdate(0, 1<<30)
	eb := bytes.Buffer{}
	enc := hpack.NewEncoder(&eb)
	for _, f := range [][2]string{{":method", "POST"}, {":path", "/"}, {":scheme", "http"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: eb.Bytes(), EndHeaders: true})
	if err := c.Feed(w.Bytes()); err != nil {
		b.Fatal(err)
	}
	s := c.streams[5]
	c.Headers(s, 200).Send(false)
	c.Advance(len(c.Output()))
	chunk := make([]byte, 16384)
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		if s.sendWindow < int64(len(chunk)) || c.sendWindow < int64(len(chunk)) {
			s.sendWindow, c.sendWindow = 1<<30, 1<<30 // what the client's WINDOW_UPDATEs would do
		}
		if n, err := c.WriteData(s, chunk, false); err != nil || n != len(chunk) {
			b.Fatal(n, err)
		}
		c.Advance(len(c.Output()))
	}
}
