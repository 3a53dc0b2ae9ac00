package h2mux

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// crec records a client connection's events.
type crec struct {
	c       *Conn
	events  []string
	body    map[uint32]*bytes.Buffer
	consume bool
}

func (r *crec) Response(s *Stream, resp *Response, end bool) {
	var b strings.Builder
	for _, f := range resp.Fields {
		fmt.Fprintf(&b, " %s=%s", f.Name, f.Value)
	}
	r.events = append(r.events, fmt.Sprintf("response %d %d%s end=%v", s.ID(), resp.Status, b.String(), end))
}

func (r *crec) Data(s *Stream, p []byte, end bool) {
	if r.body == nil {
		r.body = map[uint32]*bytes.Buffer{}
	}
	if r.body[s.ID()] == nil {
		r.body[s.ID()] = new(bytes.Buffer)
	}
	r.body[s.ID()].Write(p)
	if end {
		r.events = append(r.events, fmt.Sprintf("end %d %d", s.ID(), r.body[s.ID()].Len()))
	}
	if r.consume {
		r.c.Consumed(s, len(p))
	}
}

func (r *crec) Trailers(s *Stream, t []hpack.HeaderField) {
	var b strings.Builder
	for _, f := range t {
		fmt.Fprintf(&b, " %s=%s", f.Name, f.Value)
	}
	r.events = append(r.events, fmt.Sprintf("trailers %d%s", s.ID(), b.String()))
}

func (r *crec) Reset(s *Stream, code ErrCode) {
	r.events = append(r.events, fmt.Sprintf("reset %d %v", s.ID(), code))
}
func (r *crec) Writable(s *Stream) { r.events = append(r.events, fmt.Sprintf("writable %d", s.ID())) }
func (r *crec) GoAway(code ErrCode, _ []byte) {
	r.events = append(r.events, fmt.Sprintf("goaway %v", code))
}

// pair runs a client Conn against a server Conn in memory.
type pair struct {
	t    *testing.T
	now  int64
	cli  *Conn
	cr   *crec
	srv  *Conn
	sr   *recorder
	cerr error
	serr error
	cctr Counters
	sctr Counters
}

func newPair(t *testing.T, ccfg, scfg Config) *pair {
	p := &pair{t: t, now: int64(time.Hour)}
	clock := func() int64 { return p.now }
	ccfg.Now, scfg.Now = clock, clock
	ccfg.Counters, scfg.Counters = &p.cctr, &p.sctr
	p.cr = &crec{consume: true}
	p.cli = NewClientConn(p.cr, ccfg)
	p.cr.c = p.cli
	p.sr = &recorder{body: []byte("hello"), consume: true}
	p.srv = NewConn(p.sr, scfg)
	p.sr.c = p.srv
	p.pump()
	return p
}

// pump moves bytes both ways until neither side has output.
func (p *pair) pump() {
	for i := 0; i < 10000; i++ {
		a, b := p.cli.Output(), p.srv.Output()
		if len(a) == 0 && len(b) == 0 {
			return
		}
		if len(a) > 0 {
			m := append([]byte(nil), a...)
			p.cli.Advance(len(m))
			if err := p.srv.Feed(m); err != nil {
				p.serr = err
			}
		}
		if len(b) > 0 {
			m := append([]byte(nil), b...)
			p.srv.Advance(len(m))
			if err := p.cli.Feed(m); err != nil {
				p.cerr = err
			}
		}
	}
	p.t.Fatal("pump did not settle")
}

func (p *pair) open(method, path string, end bool, fields ...string) *Stream {
	p.t.Helper()
	s, hb, err := p.cli.Open(method, "http", "example.com", path)
	if err != nil {
		p.t.Fatal(err)
	}
	for i := 0; i+1 < len(fields); i += 2 {
		hb.Add(fields[i], fields[i+1])
	}
	if err := hb.Send(end); err != nil {
		p.t.Fatal(err)
	}
	return s
}

func (p *pair) wantEvents(want ...string) {
	p.t.Helper()
	if got := strings.Join(p.cr.events, "\n"); got != strings.Join(want, "\n") {
		p.t.Fatalf("client events:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	p.cr.events = nil
}

// TestClientAgainstServer drives the client side against the server side of h2mux: request
// heads (pseudo-header fields, te: trailers kept, connection fields dropped), bodies both
// ways, trailers, HEAD, and the streams' end on both sides.
func TestClientAgainstServer(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	if p.cerr != nil || p.serr != nil {
		t.Fatal(p.cerr, p.serr)
	}
	s1 := p.open("GET", "/a", true, "te", "trailers", "connection", "close", "x-one", "1")
	id1 := s1.ID()
	p.pump()
	p.wantEvents("response 1 200 content-type=text/plain end=false", "end 1 5")
	r := p.sr.reqs[0]
	if r.Method != "GET" || r.Path != "/a" || r.Scheme != "http" || r.Authority != "example.com" {
		t.Fatalf("request head %+v", r)
	}
	if fmt.Sprint(r.Fields) != fmt.Sprint([]hpack.HeaderField{{Name: "te", Value: "trailers"}, {Name: "x-one", Value: "1"}}) {
		t.Fatalf("request fields %v", r.Fields)
	}
	if p.cli.NumStreams() != 0 || p.srv.NumStreams() != 0 || id1 != 1 {
		t.Fatalf("streams left: client %d server %d (id %d)", p.cli.NumStreams(), p.srv.NumStreams(), id1)
	}

	// A body of 200 KiB up (more than the protocol's initial window: WINDOW_UPDATEs from the
	// server), then the server's answer; trailers on the request.
	s3 := p.open("POST", "/up", false, "content-type", "application/grpc")
	id3 := s3.ID()
	body := bytes.Repeat([]byte("x"), 200<<10)
	sent := 0
	for i := 0; sent < len(body) && i < 1000; i++ {
		n, err := p.cli.WriteData(s3, body[sent:], false)
		if err != nil {
			t.Fatal(err)
		}
		sent += n
		p.pump()
	}
	if sent != len(body) {
		t.Fatalf("sent %d of %d", sent, len(body))
	}
	hb := p.cli.Trailers(s3)
	hb.Add("x-checksum", "abc")
	if err := hb.Send(true); err != nil {
		t.Fatal(err)
	}
	p.pump()
	if id3 != 3 {
		t.Fatalf("second stream id %d", id3)
	}
	var got []string
	for _, e := range p.cr.events {
		if !strings.HasPrefix(e, "writable") {
			got = append(got, e)
		}
	}
	p.cr.events = got
	p.wantEvents("response 3 200 content-type=text/plain end=false", "end 3 5")
	if want := "trailers 3 x-checksum=abc"; !strings.Contains(strings.Join(p.sr.events, "\n"), want) {
		t.Fatalf("server events %v, want %q", p.sr.events, want)
	}
	if p.cerr != nil || p.serr != nil {
		t.Fatal(p.cerr, p.serr)
	}
	if p.cli.Available() != defaultPeerStreams && p.cli.Available() != DefaultMaxConcurrentStreams {
		t.Fatalf("Available %d", p.cli.Available())
	}
}

// fakeServer is the server side written by hand with x/net's Framer, for what h2mux's own
// server never sends: GOAWAY with a last-stream-id, RST_STREAM, a window that never opens,
// malformed response heads.
type fakeServer struct {
	t   *testing.T
	cli *Conn
	cr  *crec
	now int64
	w   bytes.Buffer
	fr  *http2.Framer
	enc *hpack.Encoder
	eb  bytes.Buffer
	err error
	ctr Counters
}

func newFakeServer(t *testing.T, cfg Config, settings ...http2.Setting) *fakeServer {
	f := &fakeServer{t: t, now: int64(time.Hour)}
	cfg.Now = func() int64 { return f.now }
	cfg.Counters = &f.ctr
	f.cr = &crec{consume: true}
	f.cli = NewClientConn(f.cr, cfg)
	f.cr.c = f.cli
	out := f.cli.Output()
	if !bytes.HasPrefix(out, []byte(clientPreface)) {
		t.Fatalf("no client preface: %q", out)
	}
	rd := http2.NewFramer(nil, bytes.NewReader(out[len(clientPreface):]))
	fr, err := rd.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := fr.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %T", fr)
	}
	if v, ok := sf.Value(http2.SettingEnablePush); !ok || v != 0 {
		t.Fatalf("SETTINGS_ENABLE_PUSH %d %v", v, ok)
	}
	f.cli.Advance(len(out))
	f.fr = http2.NewFramer(&f.w, nil)
	f.enc = hpack.NewEncoder(&f.eb)
	_ = f.fr.WriteSettings(settings...)
	_ = f.fr.WriteSettingsAck()
	f.feed()
	return f
}

func (f *fakeServer) feed() {
	b := f.w.Bytes()
	f.w.Reset()
	if err := f.cli.Feed(b); err != nil {
		f.err = err
	}
}

// frames returns what the client wrote since the last call.
func (f *fakeServer) frames() []http2.Frame {
	out := f.cli.Output()
	f.cli.Advance(len(out))
	rd := http2.NewFramer(nil, bytes.NewReader(append([]byte(nil), out...)))
	var fs []http2.Frame
	for {
		fr, err := rd.ReadFrame()
		if err != nil {
			return fs
		}
		fs = append(fs, fr)
	}
}

func (f *fakeServer) head(id uint32, end bool, fields ...string) {
	f.eb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = f.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	_ = f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: f.eb.Bytes(), EndStream: end, EndHeaders: true})
	f.feed()
}

func (f *fakeServer) open(t *testing.T, method string, end bool) *Stream {
	t.Helper()
	s, hb, err := f.cli.Open(method, "http", "b", "/")
	if err != nil {
		t.Fatal(err)
	}
	if err := hb.Send(end); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestClientEdges: what a backend may do to the client side, and what the client answers.
func TestClientEdges(t *testing.T) {
	t.Run("goaway refuses the streams above last", func(t *testing.T) {
		f := newFakeServer(t, Config{})
		for range 3 {
			f.open(t, "GET", true)
		}
		_ = f.fr.WriteGoAway(3, http2.ErrCodeNo, nil)
		f.feed()
		f.head(1, true, ":status", "204")
		f.head(3, false, ":status", "200")
		_ = f.fr.WriteData(3, true, []byte("ok"))
		f.feed()
		f.cr.wantEvents(t, "reset 5 REFUSED_STREAM", "goaway NO_ERROR", "response 1 204 end=true", "response 3 200 end=false", "end 3 2")
		if f.cli.Available() != 0 || !f.cli.Done() || f.ctr.RefusedStreams.Load() != 1 {
			t.Fatalf("after GOAWAY: available %d done %v refused %d", f.cli.Available(), f.cli.Done(), f.ctr.RefusedStreams.Load())
		}
		if _, _, err := f.cli.Open("GET", "http", "b", "/"); err != ErrNoStreams {
			t.Fatalf("Open after GOAWAY: %v", err)
		}
	})
	t.Run("max concurrent streams", func(t *testing.T) {
		f := newFakeServer(t, Config{}, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 2})
		f.open(t, "GET", true)
		f.open(t, "GET", true)
		if f.cli.Available() != 0 {
			t.Fatalf("Available %d after 2 of 2", f.cli.Available())
		}
		if _, _, err := f.cli.Open("GET", "http", "b", "/"); err != ErrNoStreams {
			t.Fatalf("third Open: %v", err)
		}
		_ = f.fr.WriteRSTStream(1, http2.ErrCodeRefusedStream)
		f.feed()
		f.cr.wantEvents(t, "reset 1 REFUSED_STREAM")
		if f.cli.Available() != 1 {
			t.Fatalf("Available %d after a reset", f.cli.Available())
		}
	})
	t.Run("response trailers and interim heads", func(t *testing.T) {
		f := newFakeServer(t, Config{})
		f.open(t, "POST", true)
		f.head(1, false, ":status", "100")
		f.head(1, false, ":status", "200", "content-type", "application/grpc")
		_ = f.fr.WriteData(1, false, []byte("12345"))
		f.feed()
		f.head(1, true, "grpc-status", "0", "grpc-message", "")
		f.cr.wantEvents(t, "response 1 200 content-type=application/grpc end=false", "trailers 1 grpc-status=0 grpc-message=")
		if f.cli.NumStreams() != 0 {
			t.Fatalf("streams %d", f.cli.NumStreams())
		}
	})
	t.Run("malformed response heads", func(t *testing.T) {
		for _, tc := range [][]string{
			{"content-type", "x"},                // no :status
			{":status", "20"},                    // short
			{":status", "200", ":status", "200"}, // twice
			{":status", "200", "connection", "close"},
			{":status", "200", ":path", "/"},
			{":status", "101"},
			{":status", "200", "Upper", "x"},
		} {
			f := newFakeServer(t, Config{})
			f.open(t, "GET", true)
			f.head(1, false, tc...)
			f.cr.wantEvents(t, "reset 1 PROTOCOL_ERROR")
			if f.ctr.MalformedResponses.Load() != 1 || f.err != nil {
				t.Fatalf("%v: malformed %d err %v", tc, f.ctr.MalformedResponses.Load(), f.err)
			}
			fs := f.frames()
			if len(fs) == 0 {
				t.Fatalf("%v: no RST_STREAM", tc)
			}
			if rst, ok := fs[len(fs)-1].(*http2.RSTStreamFrame); !ok || rst.ErrCode != http2.ErrCodeProtocol {
				t.Fatalf("%v: last frame %v", tc, fs[len(fs)-1])
			}
		}
	})
	t.Run("content-length checked, not for HEAD", func(t *testing.T) {
		f := newFakeServer(t, Config{})
		f.open(t, "GET", true)
		f.head(1, false, ":status", "200", "content-length", "10")
		_ = f.fr.WriteData(1, true, []byte("short"))
		f.feed()
		f.cr.wantEvents(t, "response 1 200 content-length=10 end=false", "reset 1 PROTOCOL_ERROR")
		f.open(t, "HEAD", true)
		f.head(3, false, ":status", "200", "content-length", "10")
		_ = f.fr.WriteData(3, true, nil)
		f.feed()
		f.cr.wantEvents(t, "response 3 200 content-length=10 end=false", "end 3 0")
	})
	t.Run("push and server streams refused", func(t *testing.T) {
		f := newFakeServer(t, Config{})
		f.open(t, "GET", true)
		f.head(2, false, ":status", "200")
		if ce, ok := f.err.(*ConnError); !ok || ce.Code != ErrCodeProtocol {
			t.Fatalf("HEADERS on stream 2: %v", f.err)
		}
		f.cr.wantEvents(t, "reset 1 PROTOCOL_ERROR")
	})
	t.Run("a window that never opens stalls, then resets", func(t *testing.T) {
		f := newFakeServer(t, Config{StallTimeout: time.Second}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		s := f.open(t, "POST", false)
		n, err := f.cli.WriteData(s, make([]byte, 1000), true)
		if n != 0 || err != nil {
			t.Fatalf("WriteData on a zero window: %d %v", n, err)
		}
		f.frames() // the request head drained: only the window stalls
		d := f.cli.Deadline()
		if d == 0 || d > f.now+int64(time.Second) {
			t.Fatalf("deadline %d, now %d", d, f.now)
		}
		f.now += int64(time.Second)
		if err := f.cli.Tick(); err != nil {
			t.Fatal(err)
		}
		f.cr.wantEvents(t, "reset 1 CANCEL")
		if f.ctr.StallResets.Load() != 1 {
			t.Fatalf("stall resets %d", f.ctr.StallResets.Load())
		}
	})
	t.Run("the response window is given back as it is consumed", func(t *testing.T) {
		f := newFakeServer(t, Config{StreamWindow: 65535, ConnWindow: 65535})
		f.cr.consume = false
		s := f.open(t, "GET", true)
		f.head(1, false, ":status", "200")
		chunk := make([]byte, 16384)
		for range 3 {
			_ = f.fr.WriteData(1, false, chunk)
		}
		_ = f.fr.WriteData(1, false, chunk[:16383])
		f.feed()
		if f.err != nil {
			t.Fatal(f.err)
		}
		for _, fr := range f.frames() {
			if _, ok := fr.(*http2.WindowUpdateFrame); ok {
				t.Fatal("WINDOW_UPDATE before anything was consumed")
			}
		}
		_ = f.fr.WriteData(1, false, []byte("x")) // past the window
		f.feed()
		if ce, ok := f.err.(*ConnError); !ok || ce.Code != ErrCodeFlowControl {
			t.Fatalf("DATA past the window: %v", f.err)
		}
		_ = s
	})
	t.Run("ping on silence", func(t *testing.T) {
		f := newFakeServer(t, Config{PingAfter: time.Second, PingTimeout: time.Second})
		f.frames()
		f.now += int64(time.Second)
		_ = f.cli.Tick()
		fs := f.frames()
		if len(fs) != 1 {
			t.Fatalf("frames after silence: %v", fs)
		}
		if _, ok := fs[0].(*http2.PingFrame); !ok {
			t.Fatalf("not a PING: %v", fs[0])
		}
		f.now += int64(time.Second)
		if err := f.cli.Tick(); err == nil || f.ctr.PingTimeouts.Load() != 1 {
			t.Fatalf("no answer to PING: %v, %d", err, f.ctr.PingTimeouts.Load())
		}
	})
}

func (r *crec) wantEvents(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	for _, e := range r.events {
		if !strings.HasPrefix(e, "writable") {
			got = append(got, e)
		}
	}
	r.events = nil
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("client events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// FuzzClientConn feeds a client connection arbitrary server bytes (after the server's
// SETTINGS), in pieces, with three streams open: no panic, the input buffer within one frame,
// every frame the client writes readable by x/net's Framer, and every response head handed
// over a final one (200–999) on a stream the client opened.
func FuzzClientConn(f *testing.F) {
	var w, eb bytes.Buffer
	fr := http2.NewFramer(&w, nil)
	enc := hpack.NewEncoder(&eb)
	block := func(kv ...string) []byte {
		eb.Reset()
		for i := 0; i+1 < len(kv); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return append([]byte(nil), eb.Bytes()...)
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(":status", "200", "content-type", "x"), EndHeaders: true})
	_ = fr.WriteData(1, false, []byte("hello"))
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block("grpc-status", "0"), EndStream: true, EndHeaders: true})
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(":status", "100"), EndHeaders: true})
	_ = fr.WriteGoAway(3, http2.ErrCodeNo, nil)
	_ = fr.WriteRSTStream(5, http2.ErrCodeRefusedStream)
	_ = fr.WriteWindowUpdate(0, 1000)
	_ = fr.WritePing(false, [8]byte{1})
	f.Add(append([]byte(nil), w.Bytes()...))
	f.Add([]byte{0, 0, 4, 1, 4, 0, 0, 0, 1, 0x88, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := newFakeServer(t, Config{})
		for range 3 {
			fs.open(t, "GET", true)
		}
		fs.frames()
		for p, i := data, 0; len(p) > 0 && fs.err == nil; i++ {
			n := min(len(p), 1+int(data[i%len(data)])*8)
			if err := fs.cli.Feed(p[:n]); err != nil {
				fs.err = err
			}
			p = p[n:]
			if len(fs.cli.in) > frameHeaderLen+DefaultMaxFrameSize {
				t.Fatalf("input buffer %d bytes", len(fs.cli.in))
			}
			fs.now += 1e6
			_ = fs.cli.Tick()
		}
		out := append([]byte(nil), fs.cli.Output()...)
		rd := http2.NewFramer(nil, bytes.NewReader(out))
		for {
			_, err := rd.ReadFrame()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("the client wrote a frame x/net cannot read: %v", err)
			}
		}
		for _, e := range fs.cr.events {
			if strings.HasPrefix(e, "response ") {
				var id, status int
				if _, err := fmt.Sscanf(e, "response %d %d", &id, &status); err != nil || status < 200 || status > 999 || id%2 != 1 || id > 5 {
					t.Fatalf("event %q", e)
				}
			}
		}
	})
}
