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

// recorder is a Handler that records the events and, unless hold is set, answers each
// request once it is complete with status 200 and body (what the h2spec harness does).
type recorder struct {
	c       *Conn
	events  []string
	reqs    []Request // copies of the request heads
	body    []byte
	hold    bool // answer nothing
	early   bool // answer at the request head, before its body (a backend that does not wait)
	consume bool // call Consumed for request bytes at once
	pending map[*Stream][]byte
	onData  func(p []byte)
	refused []string // Refuser reports, apart from events
}

func (r *recorder) Refused(method, path string, status int, reason string) {
	r.refused = append(r.refused, fmt.Sprintf("%d %s %s: %s", status, method, path, reason))
}

func (r *recorder) Request(s *Stream, req *Request, end bool) {
	cp := *req
	cp.Fields = append([]hpack.HeaderField(nil), req.Fields...)
	r.reqs = append(r.reqs, cp)
	r.events = append(r.events, fmt.Sprintf("request %d %s %s end=%v", s.ID(), req.Method, req.Path, end))
	if end || r.early {
		r.answer(s)
	}
}

func (r *recorder) Data(s *Stream, p []byte, end bool) {
	if r.onData != nil {
		r.onData(p)
		if r.consume {
			r.c.Consumed(s, len(p))
		}
		return
	}
	r.events = append(r.events, fmt.Sprintf("data %d %d end=%v", s.ID(), len(p), end))
	if r.consume {
		r.c.Consumed(s, len(p))
	}
	if end {
		r.answer(s)
	}
}

func (r *recorder) Trailers(s *Stream, t []hpack.HeaderField) {
	var b strings.Builder
	for _, f := range t {
		fmt.Fprintf(&b, " %s=%s", f.Name, f.Value)
	}
	r.events = append(r.events, fmt.Sprintf("trailers %d%s", s.ID(), b.String()))
	r.answer(s)
}

func (r *recorder) Reset(s *Stream, code ErrCode) {
	r.events = append(r.events, fmt.Sprintf("reset %d %v", s.ID(), code))
	delete(r.pending, s)
}

func (r *recorder) Writable(s *Stream) {
	r.events = append(r.events, fmt.Sprintf("writable %d", s.ID()))
	if p, ok := r.pending[s]; ok {
		r.write(s, p)
	}
}

func (r *recorder) GoAway(code ErrCode, debug []byte) {
	r.events = append(r.events, fmt.Sprintf("goaway %v", code))
}

func (r *recorder) answer(s *Stream) {
	if r.hold {
		return
	}
	h := r.c.Headers(s, 200)
	h.Add("content-type", "text/plain")
	if err := h.Send(len(r.body) == 0); err != nil {
		panic(err)
	}
	if len(r.body) > 0 {
		r.write(s, r.body)
	}
}

func (r *recorder) write(s *Stream, p []byte) {
	n, err := r.c.WriteData(s, p, true)
	if err != nil {
		panic(err)
	}
	if n < len(p) {
		if r.pending == nil {
			r.pending = map[*Stream][]byte{}
		}
		r.pending[s] = p[n:]
	} else {
		delete(r.pending, s)
	}
}

// client drives a Conn with frames written by x/net's Framer and reads its output with
// another Framer: no sockets.
type client struct {
	t   *testing.T
	c   *Conn
	r   *recorder
	now int64
	w   bytes.Buffer // client to server, not yet fed
	fr  *http2.Framer
	enc *hpack.Encoder
	eb  bytes.Buffer
	out bytes.Buffer // server to client, drained from the Conn
	rd  *http2.Framer
	err error // the last Feed's error
	ctr *Counters
	cfg Config
}

// newClient starts a connection: preface, empty SETTINGS, and the acknowledgement of the
// server's SETTINGS; the server's preface frames are read and checked.
func newClient(t *testing.T, cfg Config) *client {
	t.Helper()
	cl := &client{t: t, r: &recorder{body: []byte("hello")}, now: int64(time.Hour)}
	cl.ctr = new(Counters)
	if cfg.Counters == nil {
		cfg.Counters = cl.ctr
	} else {
		cl.ctr = cfg.Counters
	}
	cfg.Now = func() int64 { return cl.now }
	cl.cfg = cfg
	cl.c = NewConn(cl.r, cfg)
	cl.r.c = cl.c
	cl.fr = http2.NewFramer(&cl.w, nil)
	cl.fr.AllowIllegalWrites = true // the tests write what a hostile client would
	cl.enc = hpack.NewEncoder(&cl.eb)
	cl.rd = http2.NewFramer(nil, &cl.out)
	cl.rd.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	cl.rd.MaxHeaderListSize = 1 << 20
	cl.w.WriteString(http2.ClientPreface)
	cl.fr.WriteSettings()
	cl.fr.WriteSettingsAck()
	cl.flush()
	got := cl.frames()
	if len(got) < 2 || !strings.HasPrefix(got[0], "SETTINGS ") || got[len(got)-1] != "SETTINGS ack" {
		t.Fatalf("server preface: %q", got)
	}
	return cl
}

// flush feeds what the client wrote to the Conn, in one Feed, and drains the output.
func (cl *client) flush() {
	cl.feed(cl.w.Bytes())
	cl.w.Reset()
}

// feed feeds p and drains the output.
func (cl *client) feed(p []byte) {
	if err := cl.c.Feed(p); err != nil {
		cl.err = err
	}
	cl.drain()
}

func (cl *client) drain() {
	for {
		o := cl.c.Output()
		if len(o) == 0 {
			return
		}
		cl.out.Write(o)
		cl.c.Advance(len(o))
	}
}

// frames reads the frames the server wrote since the last call, summarized.
func (cl *client) frames() []string {
	var got []string
	for {
		f, err := cl.rd.ReadFrame()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			cl.t.Fatalf("reading the server's frames: %v (after %q)", err, got)
		}
		got = append(got, summarize(f))
	}
}

func summarize(f http2.Frame) string {
	end := func(b bool) string {
		if b {
			return " end"
		}
		return ""
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return "SETTINGS ack"
		}
		var b strings.Builder
		b.WriteString("SETTINGS")
		f.ForeachSetting(func(s http2.Setting) error {
			fmt.Fprintf(&b, " %v=%d", s.ID, s.Val)
			return nil
		})
		return b.String()
	case *http2.MetaHeadersFrame:
		var b strings.Builder
		fmt.Fprintf(&b, "HEADERS %d", f.StreamID)
		for _, hf := range f.Fields {
			fmt.Fprintf(&b, " %s=%s", hf.Name, hf.Value)
		}
		return b.String() + end(f.StreamEnded())
	case *http2.DataFrame:
		return fmt.Sprintf("DATA %d %d", f.StreamID, len(f.Data())) + end(f.StreamEnded())
	case *http2.RSTStreamFrame:
		return fmt.Sprintf("RST %d %v", f.StreamID, f.ErrCode)
	case *http2.GoAwayFrame:
		return fmt.Sprintf("GOAWAY %d %v", f.LastStreamID, f.ErrCode)
	case *http2.WindowUpdateFrame:
		return fmt.Sprintf("WINDOW_UPDATE %d %d", f.StreamID, f.Increment)
	case *http2.PingFrame:
		if f.IsAck() {
			return fmt.Sprintf("PING ack %x", f.Data)
		}
		return "PING"
	}
	return fmt.Sprintf("%v", f.Header())
}

// block encodes fields given as "name", "value", ... with the client's HPACK encoder.
func (cl *client) block(kv ...string) []byte {
	cl.eb.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		cl.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return append([]byte(nil), cl.eb.Bytes()...)
}

var getHead = []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "example.com"}

func head(method string, extra ...string) []string {
	h := []string{":method", method, ":scheme", "https", ":path", "/", ":authority", "example.com"}
	return append(h, extra...)
}

// headers writes a HEADERS frame with END_HEADERS.
func (cl *client) headers(id uint32, end bool, kv ...string) {
	cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: cl.block(kv...), EndStream: end, EndHeaders: true})
}

func (cl *client) data(id uint32, end bool, p []byte) { cl.fr.WriteData(id, end, p) }

// exchange writes with fn, flushes, and returns the server's frames.
func (cl *client) exchange(fn func()) []string {
	fn()
	cl.flush()
	return cl.frames()
}

func wantFrames(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("server frames:\n  got  %q\n  want %q", got, want)
	}
}

// connCode returns the code of the connection error the last Feed returned, or -1.
func (cl *client) connCode() int {
	var ce *ConnError
	if errors.As(cl.err, &ce) {
		return int(ce.Code)
	}
	return -1
}
