package h2mux

import (
	"strings"
	"testing"

	"golang.org/x/net/http2"
)

// TestRequestHeads holds request heads to RFC 9113 §8.2 and §8.3.1: a malformed one is a
// stream error PROTOCOL_ERROR and never reaches the owner; a valid one reaches it with its
// pseudo-header fields and regular fields apart.
func TestRequestHeads(t *testing.T) {
	const bad = "RST 1 PROTOCOL_ERROR"
	cases := []struct {
		name   string
		fields []string
		reject bool
	}{
		{"valid", head("GET", "accept", "*/*", "cookie", "a=1", "cookie", "b=2"), false},
		{"§8.2 uppercase name", head("GET", "Accept", "*/*"), true},
		{"§8.2 name with a space", head("GET", "x a", "1"), true},
		{"§8.2 name with a colon inside", head("GET", "x:a", "1"), true},
		{"§8.2 empty name", head("GET", "", "1"), true},
		{"§8.2.1 value with CR", head("GET", "x-a", "1\r2"), true},
		{"§8.2.1 value with LF", head("GET", "x-a", "1\nx-b: 2"), true},
		{"§8.2.1 value with NUL", head("GET", "x-a", "1\x002"), true},
		{"RFC 9110 §5.5 value with another control", head("GET", "x-a", "1\x012"), true},
		{"§8.2.1 value with a leading space", head("GET", "x-a", " 1"), true},
		{"§8.2.1 value with a trailing tab", head("GET", "x-a", "1\t"), true},
		{"value with inner space, tab and obs-text", head("GET", "x-a", "1 \t2\xff"), false},
		{"§8.2.2 connection", head("GET", "connection", "keep-alive"), true},
		{"§8.2.2 keep-alive", head("GET", "keep-alive", "5"), true},
		{"§8.2.2 proxy-connection", head("GET", "proxy-connection", "close"), true},
		{"§8.2.2 transfer-encoding", head("POST", "transfer-encoding", "chunked"), true},
		{"§8.2.2 upgrade", head("GET", "upgrade", "h2c"), true},
		{"§8.2.2 te: gzip", head("GET", "te", "gzip"), true},
		{"§8.2.2 te: trailers", head("GET", "te", "trailers"), false},
		{"§8.3 unknown pseudo-header", head("GET", ":foo", "bar"), true},
		{"§8.3 response pseudo-header", []string{":status", "200", ":method", "GET", ":scheme", "https", ":path", "/"}, true},
		{"§8.3 pseudo-header after a regular field", []string{":method", "GET", "x-a", "1", ":scheme", "https", ":path", "/"}, true},
		{"§8.3.1 no :method", []string{":scheme", "https", ":path", "/"}, true},
		{"§8.3.1 no :scheme", []string{":method", "GET", ":path", "/"}, true},
		{"§8.3.1 no :path", []string{":method", "GET", ":scheme", "https"}, true},
		{"§8.3.1 empty :path", []string{":method", "GET", ":scheme", "https", ":path", ""}, true},
		{"§8.3.1 duplicated :method", []string{":method", "GET", ":method", "GET", ":scheme", "https", ":path", "/"}, true},
		{"§8.3.1 duplicated :path", []string{":method", "GET", ":scheme", "https", ":path", "/", ":path", "/"}, true},
		{"§8.3.1 :path with a space", []string{":method", "GET", ":scheme", "https", ":path", "/a b"}, true},
		{"§8.3.1 :path not origin-form", []string{":method", "GET", ":scheme", "https", ":path", "a"}, true},
		{"§8.3.1 :path * for OPTIONS", []string{":method", "OPTIONS", ":scheme", "https", ":path", "*"}, false},
		{"§8.3.1 :path * for GET", []string{":method", "GET", ":scheme", "https", ":path", "*"}, true},
		{"§8.3.1 :method not a token", []string{":method", "GE T", ":scheme", "https", ":path", "/"}, true},
		{"§8.3.1 :scheme not a scheme", []string{":method", "GET", ":scheme", "ht tp", ":path", "/"}, true},
		{"§8.3.1 :authority with userinfo", []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "u@example.com"}, true},
		{"§8.3.1 host differs from :authority", head("GET", "host", "evil.example"), true},
		{"§8.3.1 host equal to :authority", head("GET", "host", "EXAMPLE.com"), false},
		{"two host fields", []string{":method", "GET", ":scheme", "https", ":path", "/", "host", "a", "host", "b"}, true},
		{"host without :authority", []string{":method", "GET", ":scheme", "https", ":path", "/", "host", "a.example:8080"}, false},
		{"§8.5 CONNECT", []string{":method", "CONNECT", ":authority", "example.com:443"}, false},
		{"§8.5 CONNECT with :path", []string{":method", "CONNECT", ":authority", "example.com:443", ":path", "/"}, true},
		{"§8.5 CONNECT without :authority", []string{":method", "CONNECT"}, true},
		{"RFC 8441 :protocol not offered", []string{":method", "CONNECT", ":protocol", "websocket", ":scheme", "https", ":path", "/", ":authority", "a"}, true},
		{"content-length not a number", head("POST", "content-length", "1x"), true},
		{"content-length negative", head("POST", "content-length", "-1"), true},
		{"two content-length values", head("POST", "content-length", "1", "content-length", "2"), true},
		{"repeated equal content-length", head("POST", "content-length", "0", "content-length", "0"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := newClient(t, Config{})
			cl.r.hold = true
			got := cl.exchange(func() { cl.headers(1, true, c.fields...) })
			if c.reject {
				wantFrames(t, got, bad)
				if len(cl.r.reqs) != 0 {
					t.Errorf("the owner got the malformed request: %q", cl.r.events)
				}
				if cl.ctr.MalformedRequests.Load() != 1 {
					t.Errorf("MalformedRequests = %d", cl.ctr.MalformedRequests.Load())
				}
				return
			}
			wantFrames(t, got)
			if len(cl.r.reqs) != 1 {
				t.Fatalf("events %q", cl.r.events)
			}
			r := cl.r.reqs[0]
			var regular []string
			for i := 0; i < len(c.fields); i += 2 {
				if !strings.HasPrefix(c.fields[i], ":") {
					regular = append(regular, c.fields[i]+"="+c.fields[i+1])
				}
			}
			var gotFields []string
			for _, f := range r.Fields {
				gotFields = append(gotFields, f.Name+"="+f.Value)
			}
			if strings.Join(gotFields, "|") != strings.Join(regular, "|") {
				t.Errorf("fields %q, want %q", gotFields, regular)
			}
		})
	}
}

// TestRequestPseudoFields: the pseudo-header fields and the content-length land in Request.
func TestRequestPseudoFields(t *testing.T) {
	cl := newClient(t, Config{})
	cl.r.hold = true
	cl.exchange(func() {
		cl.headers(1, false, ":method", "POST", ":scheme", "http", ":path", "/a?b=c", ":authority", "h.example:81", "content-length", "3")
	})
	if len(cl.r.reqs) != 1 {
		t.Fatalf("events %q", cl.r.events)
	}
	r := cl.r.reqs[0]
	if r.Method != "POST" || r.Scheme != "http" || r.Path != "/a?b=c" || r.Authority != "h.example:81" || r.ContentLength != 3 {
		t.Errorf("request %+v", r)
	}
}

// TestRequestBodies checks content-length against DATA (RFC 9113 §8.1.1) and the trailers
// rules (§8.1): each case is a stream error PROTOCOL_ERROR or a complete request.
func TestRequestBodies(t *testing.T) {
	post := func(extra ...string) []string { return head("POST", extra...) }
	cases := []struct {
		name   string
		steps  func(cl *client)
		want   []string
		events []string
	}{
		{"content-length equals the DATA", func(cl *client) {
			cl.headers(1, false, post("content-length", "4")...)
			cl.data(1, true, []byte("abcd"))
		}, nil, []string{"request 1 POST / end=false", "data 1 4 end=true"}},
		{"§8.1.1 DATA longer than content-length", func(cl *client) {
			cl.headers(1, false, post("content-length", "1")...)
			cl.data(1, true, []byte("abcd"))
		}, []string{"RST 1 PROTOCOL_ERROR"}, []string{"request 1 POST / end=false", "reset 1 PROTOCOL_ERROR"}},
		{"§8.1.1 DATA frames summing past content-length", func(cl *client) {
			cl.headers(1, false, post("content-length", "5")...)
			cl.data(1, false, []byte("abc"))
			cl.data(1, true, []byte("abc"))
		}, []string{"RST 1 PROTOCOL_ERROR"}, []string{"request 1 POST / end=false", "data 1 3 end=false", "reset 1 PROTOCOL_ERROR"}},
		{"§8.1.1 body shorter than content-length", func(cl *client) {
			cl.headers(1, false, post("content-length", "5")...)
			cl.data(1, true, []byte("abc"))
		}, []string{"RST 1 PROTOCOL_ERROR"}, []string{"request 1 POST / end=false", "reset 1 PROTOCOL_ERROR"}},
		{"§8.1.1 content-length without a body", func(cl *client) {
			cl.headers(1, true, post("content-length", "5")...)
		}, []string{"RST 1 PROTOCOL_ERROR"}, nil},
		{"§8.1.1 trailers before the body is complete", func(cl *client) {
			cl.headers(1, false, post("content-length", "5")...)
			cl.data(1, false, []byte("abc"))
			cl.headers(1, true, "x-t", "1")
		}, []string{"RST 1 PROTOCOL_ERROR"}, []string{"request 1 POST / end=false", "data 1 3 end=false", "reset 1 PROTOCOL_ERROR"}},
		{"trailers", func(cl *client) {
			cl.headers(1, false, post("te", "trailers")...)
			cl.data(1, false, []byte("abc"))
			cl.headers(1, true, "grpc-status", "0", "x-t", "a b")
		}, nil, []string{"request 1 POST / end=false", "data 1 3 end=false", "trailers 1 grpc-status=0 x-t=a b"}},
		{"§8.1 trailers without END_STREAM", func(cl *client) {
			cl.headers(1, false, post()...)
			cl.headers(1, false, "x-t", "1")
		}, []string{"RST 1 PROTOCOL_ERROR"}, []string{"request 1 POST / end=false", "reset 1 PROTOCOL_ERROR"}},
		{"§8.3 pseudo-header field in trailers", func(cl *client) {
			cl.headers(1, false, post()...)
			cl.headers(1, true, ":path", "/x")
		}, []string{"RST 1 PROTOCOL_ERROR"}, []string{"request 1 POST / end=false", "reset 1 PROTOCOL_ERROR"}},
		{"§8.2 uppercase trailer name", func(cl *client) {
			cl.headers(1, false, post()...)
			cl.headers(1, true, "X-T", "1")
		}, []string{"RST 1 PROTOCOL_ERROR"}, []string{"request 1 POST / end=false", "reset 1 PROTOCOL_ERROR"}},
		{"§8.2.2 connection-specific trailer", func(cl *client) {
			cl.headers(1, false, post()...)
			cl.headers(1, true, "transfer-encoding", "chunked")
		}, []string{"RST 1 PROTOCOL_ERROR"}, []string{"request 1 POST / end=false", "reset 1 PROTOCOL_ERROR"}},
		{"empty DATA with END_STREAM ends the body", func(cl *client) {
			cl.headers(1, false, post()...)
			cl.data(1, false, []byte("ab"))
			cl.data(1, true, nil)
		}, nil, []string{"request 1 POST / end=false", "data 1 2 end=false", "data 1 0 end=true"}},
		{"padded DATA", func(cl *client) {
			cl.headers(1, false, post()...)
			cl.fr.WriteDataPadded(1, true, []byte("abc"), make([]byte, 20))
		}, nil, []string{"request 1 POST / end=false", "data 1 3 end=true"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := newClient(t, Config{})
			cl.r.hold = true
			got := cl.exchange(func() { c.steps(cl) })
			wantFrames(t, got, c.want...)
			if strings.Join(cl.r.events, "\n") != strings.Join(c.events, "\n") {
				t.Errorf("events %q, want %q", cl.r.events, c.events)
			}
			if cl.err != nil {
				t.Errorf("connection error %v", cl.err)
			}
		})
	}
}

// TestResponseEncoding: the response head is lowercased, cleaned of connection-specific
// fields, starts with a dynamic table size update to 0 and decodes with x/net's decoder; a
// head larger than the client's MAX_FRAME_SIZE goes out as HEADERS and CONTINUATION frames;
// trailers end the stream.
func TestResponseEncoding(t *testing.T) {
	cl := newClient(t, Config{})
	cl.r.hold = true
	cl.exchange(func() { cl.headers(1, true, getHead...) })
	s := cl.c.streams[1]
	h := cl.c.Headers(s, 503)
	h.Add("Content-Type", "text/plain")
	h.Add("Connection", "keep-alive")
	h.Add("Transfer-Encoding", "chunked")
	h.Add("X-Custom-Header", "v")
	h.AddBytes([]byte("Set-Cookie"), []byte("a=b"))
	h.Add("bad name", "x")
	h.Add("x-bad-value", "a\r\nb")
	big := strings.Repeat("z", 40000)
	h.Add("x-big", big)
	if err := h.Send(false); err != nil {
		t.Fatal(err)
	}
	raw := append([]byte(nil), cl.c.Output()...)
	cl.drain()
	if _, err := cl.c.WriteData(s, []byte("body"), false); err != nil {
		t.Fatal(err)
	}
	tr := cl.c.Trailers(s)
	tr.Add("Grpc-Status", "0")
	if err := tr.Send(false); err != nil {
		t.Fatal(err)
	}
	cl.drain()
	got := cl.frames()
	wantFrames(t, got,
		"HEADERS 1 :status=503 content-type=text/plain x-custom-header=v set-cookie=a=b x-big="+big,
		"DATA 1 4", "HEADERS 1 grpc-status=0 end")
	// The first block begins with the size update, and the big head took three frames.
	if raw[3] != 0x1 || raw[9] != 0x20 {
		t.Errorf("first frame type %#x, block starts %#x", raw[3], raw[9])
	}
	var types []byte
	for p := raw; len(p) >= 9; {
		n := int(p[0])<<16 | int(p[1])<<8 | int(p[2])
		types = append(types, p[3])
		p = p[9+n:]
	}
	if string(types) != "\x01\x09\x09" {
		t.Errorf("frame types %x, want HEADERS and two CONTINUATION", types)
	}
	if d := cl.ctr.ResponseFieldsDropped.Load(); d != 4 {
		t.Errorf("ResponseFieldsDropped = %d, want 4", d)
	}
	if cl.c.NumStreams() != 0 {
		t.Errorf("%d streams open after the trailers", cl.c.NumStreams())
	}
	// The client's HEADER_TABLE_SIZE change brings the size update back once.
	cl.exchange(func() {
		cl.fr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
		cl.headers(3, true, getHead...)
	})
	s = cl.c.streams[3]
	if err := cl.c.Headers(s, 204).Send(true); err != nil {
		t.Fatal(err)
	}
	if o := cl.c.Output(); len(o) != 11 || o[9] != 0x20 || o[10] != 0x89 {
		t.Errorf("204 head %x, want a size update and the static :status 204", o)
	}
	cl.drain()
	wantFrames(t, cl.frames(), "HEADERS 3 :status=204 end")
}

// TestOwnerErrors: what the owner may not do is refused with an error, never framed.
func TestOwnerErrors(t *testing.T) {
	cl := newClient(t, Config{})
	cl.r.hold = true
	cl.exchange(func() { cl.headers(1, true, getHead...) })
	s := cl.c.streams[1]
	if _, err := cl.c.WriteData(s, []byte("x"), false); err != ErrNoHeaders {
		t.Errorf("DATA before the head: %v", err)
	}
	if err := cl.c.Trailers(s).Send(true); err != ErrNoHeaders {
		t.Errorf("trailers before the head: %v", err)
	}
	if err := cl.c.Headers(s, 100).Send(true); err != errStatus {
		t.Errorf("interim head with END_STREAM: %v", err)
	}
	if err := cl.c.Headers(s, 1000).Send(false); err != errStatus {
		t.Errorf("status 1000: %v", err)
	}
	if err := cl.c.Headers(s, 100).Send(false); err != nil {
		t.Errorf("interim head: %v", err)
	}
	if err := cl.c.Headers(s, 200).Send(false); err != nil {
		t.Errorf("head: %v", err)
	}
	if err := cl.c.Headers(s, 200).Send(false); err != ErrStreamClosed {
		t.Errorf("second final head: %v", err)
	}
	if _, err := cl.c.WriteData(s, nil, true); err != nil {
		t.Errorf("end: %v", err)
	}
	cl.drain()
	wantFrames(t, cl.frames(), "HEADERS 1 :status=100", "HEADERS 1 :status=200", "DATA 1 0 end")
	// s is recycled now; a new stream gets a fresh struct state.
	cl.exchange(func() { cl.headers(3, true, getHead...) })
	s3 := cl.c.streams[3]
	hb := cl.c.Headers(s3, 200)
	hb.Add("x-huge", strings.Repeat("a", MaxResponseHeaderBlock))
	if err := hb.Send(true); err != ErrHeadersTooLarge {
		t.Errorf("oversized head: %v", err)
	}
	if len(cl.c.Output()) != 0 {
		t.Errorf("refused calls framed %d bytes", len(cl.c.Output()))
	}
}
