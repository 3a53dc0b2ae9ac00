package h2mux

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzFrames holds h2mux to x/net's Framer and hpack decoder on arbitrary input, read three
// ways:
//
//  1. As frames: every frame parseFrame accepts the Framer accepts and the other way round,
//     with the same fields. Where they part is listed in frameDifference.
//  2. As two header blocks sent on streams 1 and 3 (the HPACK dynamic table carried from one
//     to the next): a request h2mux hands its owner has exactly the fields x/net decoded; a
//     block x/net refuses h2mux refuses; a block x/net decodes and h2mux refuses breaks one
//     of the request rules x/net's Framer leaves to its server (requestRules), named in the
//     reason h2mux gives.
//  3. As a client's bytes after the preface, fed in pieces: no panic, every frame h2mux
//     writes readable by a Framer (its HPACK by x/net's decoder), the buffers within bounds.
func FuzzFrames(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzFrameLayer(t, data)
		fuzzHeaderBlocks(t, data)
		fuzzConn(t, data)
	})
}

// frameDifference says why h2mux and the Framer may disagree on a frame, or "".
func frameDifference(h frameHeader, merr *frameError) string {
	switch {
	case h.typ == 0x10:
		return "PRIORITY_UPDATE (RFC 9218) is an unknown frame to h2mux, which ignores priorities"
	case h.typ == frameSettings && merr != nil &&
		(merr.reason == "SETTINGS_ENABLE_PUSH neither 0 nor 1" || merr.reason == "SETTINGS_MAX_FRAME_SIZE out of range"):
		return "h2mux checks every SETTINGS value of RFC 9113 §6.5.2 in the frame; the Framer leaves two to its server"
	}
	return ""
}

func fuzzFrameLayer(t *testing.T, data []byte) {
	fr := http2.NewFramer(nil, bytes.NewReader(data))
	fr.AllowIllegalReads = true // the CONTINUATION order is the Conn's, tested apart
	fr.SetMaxReadFrameSize(DefaultMaxFrameSize)
	for p := data; len(p) >= frameHeaderLen; {
		h := parseFrameHeader(p)
		xf, xerr := fr.ReadFrame()
		if h.length > DefaultMaxFrameSize {
			if !errors.Is(xerr, http2.ErrFrameTooLarge) {
				t.Fatalf("%d-byte frame: Framer says %v", h.length, xerr)
			}
			return
		}
		end := frameHeaderLen + int(h.length)
		if len(p) < end {
			if xerr == nil {
				t.Fatalf("truncated frame accepted by the Framer")
			}
			return
		}
		mf, merr := parseFrame(h, p[frameHeaderLen:end])
		p = p[end:]
		if (merr == nil) != (xerr == nil) {
			if frameDifference(h, merr) != "" {
				continue
			}
			t.Fatalf("frame %+v: h2mux %+v, Framer %v", h, merr, xerr)
		}
		if merr != nil || h.typ == 0x10 {
			continue
		}
		xh := xf.Header()
		if uint8(xh.Type) != h.typ || uint8(xh.Flags) != h.flags || xh.StreamID != h.streamID || xh.Length != h.length {
			t.Fatalf("header %+v, Framer %+v", h, xh)
		}
		if diff := compareFrame(&mf, xf); diff != "" {
			t.Fatalf("frame %+v: %s", h, diff)
		}
	}
}

// compareFrame compares the fields parseFrame decoded with the Framer's.
func compareFrame(m *frame, xf http2.Frame) string {
	eq := func(a, b []byte) bool { return bytes.Equal(a, b) }
	prio := func(p http2.PriorityParam) bool {
		return m.hasPrio && p.StreamDep == m.streamDep && p.Exclusive == m.exclusive && p.Weight == m.weight
	}
	switch x := xf.(type) {
	case *http2.DataFrame:
		if !eq(x.Data(), m.data) {
			return "DATA payload differs"
		}
	case *http2.HeadersFrame:
		if !eq(x.HeaderBlockFragment(), m.data) || x.HasPriority() != m.hasPrio || (m.hasPrio && !prio(x.Priority)) {
			return "HEADERS fragment or priority differs"
		}
	case *http2.PriorityFrame:
		if !prio(x.PriorityParam) {
			return "PRIORITY differs"
		}
	case *http2.RSTStreamFrame:
		if uint32(x.ErrCode) != uint32(m.code) {
			return "RST_STREAM code differs"
		}
	case *http2.SettingsFrame:
		var b []byte
		x.ForeachSetting(func(s http2.Setting) error {
			b = appendSetting(b, uint16(s.ID), s.Val)
			return nil
		})
		if !eq(b, m.data) && !(len(b) == 0 && len(m.data) == 0) {
			return "SETTINGS differ"
		}
	case *http2.PushPromiseFrame:
		if x.PromiseID != m.promiseID || !eq(x.HeaderBlockFragment(), m.data) {
			return "PUSH_PROMISE differs"
		}
	case *http2.PingFrame:
		if x.Data != m.ping {
			return "PING data differs"
		}
	case *http2.GoAwayFrame:
		if x.LastStreamID != m.lastID || uint32(x.ErrCode) != uint32(m.code) || !eq(x.DebugData(), m.data) {
			return "GOAWAY differs"
		}
	case *http2.WindowUpdateFrame:
		if x.Increment != m.increment {
			return "WINDOW_UPDATE increment differs"
		}
	case *http2.ContinuationFrame:
		if !eq(x.HeaderBlockFragment(), m.data) {
			return "CONTINUATION fragment differs"
		}
	case *http2.UnknownFrame:
		if !eq(x.Payload(), m.data) {
			return "unknown frame payload differs"
		}
	default:
		return "unexpected Framer frame type"
	}
	return ""
}

// requestRules are the reasons h2mux refuses a request head whose block x/net's Framer
// decodes without complaint: RFC 9113 §8.2.1 whitespace, §8.2.2, §8.3.1 and the host
// agreement, which x/net checks in its server (or not at all), and the content-length a
// body must match.
var requestRules = []string{
	"no :method", "no :scheme or no :path", "invalid :method", "invalid :scheme", "invalid :path",
	"invalid :authority", "invalid host", "CONNECT with", "empty pseudo-header field", "unknown or response pseudo-header field",
	"field value with leading or trailing whitespace", "connection-specific field", "te other than trailers",
	"invalid or conflicting content-length", "more than one host field", "host differs from :authority",
	"content-length without a body",
}

func fuzzHeaderBlocks(t *testing.T, data []byte) {
	if len(data) == 0 {
		return
	}
	k := int(data[0]) % len(data)
	blocks := [][]byte{data[1 : k+1], data[k+1:]}
	const limit = 1 << 20
	cfg := Config{MaxHeaderListSize: limit, MaxHeaderBlockSize: 4 * limit, MaxHeaderFields: 1 << 30, ResetBurst: 1 << 30, EmptyFrameBurst: 1 << 30}
	cl := newClient(t, cfg)
	cl.r.hold = true

	var wire bytes.Buffer
	wf := http2.NewFramer(&wire, nil)
	xr := http2.NewFramer(nil, &wire)
	xr.ReadMetaHeaders = hpack.NewDecoder(DefaultHeaderTableSize, nil)
	xr.MaxHeaderListSize = limit
	for i, block := range blocks {
		if len(block) > DefaultMaxFrameSize {
			block = block[:DefaultMaxFrameSize]
		}
		id := uint32(2*i + 1)
		wf.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true})
		raw := append([]byte(nil), wire.Bytes()...)
		xf, xerr := xr.ReadFrame()
		nreq := len(cl.r.reqs)
		cl.feed(raw)
		got := cl.frames()
		var ce http2.ConnectionError
		switch {
		case errors.As(xerr, &ce):
			if cl.err == nil {
				t.Fatalf("block %d: x/net connection error %v, h2mux accepted (%q)", i, xerr, got)
			}
			return
		case cl.err != nil:
			var se http2.StreamError
			if errors.As(xerr, &se) && cl.connCode() == int(ErrCodeCompression) {
				return // x/net stops decoding strings after an invalid field; h2mux decodes them all
			}
			t.Fatalf("block %d: h2mux connection error %v, x/net %v", i, cl.err, xerr)
		case xerr != nil:
			if len(cl.r.reqs) != nreq {
				t.Fatalf("block %d: x/net refused it (%v), h2mux handed it over", i, xerr)
			}
			continue
		}
		mh := xf.(*http2.MetaHeadersFrame)
		if mh.Truncated {
			if len(cl.r.reqs) != nreq {
				t.Fatalf("block %d: x/net truncated it, h2mux handed it over", i)
			}
			continue
		}
		if len(cl.r.reqs) == nreq {
			id, _, reason := cl.c.LastStreamError()
			known := false
			for _, r := range requestRules {
				known = known || strings.HasPrefix(reason, r)
			}
			if id != uint32(2*i+1) || !known {
				t.Fatalf("block %d: x/net decoded %v, h2mux refused it: %q (stream %d)", i, mh.Fields, reason, id)
			}
			continue
		}
		r := cl.r.reqs[nreq]
		var want []string
		for _, f := range mh.Fields {
			if !f.IsPseudo() {
				want = append(want, f.Name+"\x00"+f.Value)
			}
		}
		var gotF []string
		for _, f := range r.Fields {
			gotF = append(gotF, f.Name+"\x00"+f.Value)
		}
		if strings.Join(gotF, "\n") != strings.Join(want, "\n") ||
			r.Method != mh.PseudoValue("method") || r.Path != mh.PseudoValue("path") ||
			r.Scheme != mh.PseudoValue("scheme") || r.Authority != mh.PseudoValue("authority") {
			t.Fatalf("block %d: h2mux %+v, x/net %v", i, r, mh.Fields)
		}
	}
}

func fuzzConn(t *testing.T, data []byte) {
	cl := newClient(t, Config{})
	if len(data) > 0 && data[0]&1 == 1 {
		cl.r.body = bytes.Repeat([]byte("b"), 40000)
	}
	cl.rd.ReadMetaHeaders = hpack.NewDecoder(DefaultHeaderTableSize, nil)
	for p, i := data, 0; len(p) > 0 && cl.err == nil; i++ {
		n := len(p)
		if len(data) > 1 {
			n = min(n, 1+int(data[i%len(data)])*8)
		}
		cl.feed(p[:n])
		p = p[n:]
		if len(cl.c.in) > frameHeaderLen+DefaultMaxFrameSize {
			t.Fatalf("input buffer %d bytes", len(cl.c.in))
		}
		cl.now += 1e6
		cl.c.Tick()
		cl.drain()
	}
	for {
		_, err := cl.rd.ReadFrame()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("h2mux wrote a frame x/net cannot read: %v", err)
		}
	}
}

// fuzzSeeds are frame sequences a client sends, written by x/net's Framer and encoder.
func fuzzSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	add := func(fn func(fr *http2.Framer, enc func(kv ...string) []byte)) {
		var w, eb bytes.Buffer
		fr := http2.NewFramer(&w, nil)
		fr.AllowIllegalWrites = true
		e := hpack.NewEncoder(&eb)
		enc := func(kv ...string) []byte {
			eb.Reset()
			for i := 0; i+1 < len(kv); i += 2 {
				e.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
			}
			return append([]byte(nil), eb.Bytes()...)
		}
		fn(fr, enc)
		seeds = append(seeds, w.Bytes())
	}
	get := []string{":method", "GET", ":scheme", "https", ":path", "/index.html", ":authority", "www.example.com", "user-agent", "fuzz", "cookie", "a=b"}
	add(func(fr *http2.Framer, enc func(kv ...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(get...), EndStream: true, EndHeaders: true})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: enc(get...), EndStream: true, EndHeaders: true})
	})
	add(func(fr *http2.Framer, enc func(kv ...string) []byte) {
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 15})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(":method", "POST", ":scheme", "http", ":path", "/up", "content-length", "5"),
			EndHeaders: true, PadLength: 3, Priority: http2.PriorityParam{StreamDep: 0, Weight: 9}})
		fr.WriteDataPadded(1, false, []byte("abc"), []byte{0, 0})
		fr.WriteWindowUpdate(1, 100)
		fr.WriteWindowUpdate(0, 100)
		fr.WriteData(1, false, []byte("de"))
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc("x-trailer", "t"), EndStream: true, EndHeaders: true})
		fr.WritePing(false, [8]byte{1})
	})
	add(func(fr *http2.Framer, enc func(kv ...string) []byte) {
		b := enc(get...)
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:4], EndStream: true})
		fr.WriteContinuation(1, false, b[4:9])
		fr.WriteContinuation(1, true, b[9:])
		fr.WritePriority(3, http2.PriorityParam{StreamDep: 1, Exclusive: true, Weight: 200})
		fr.WriteRSTStream(1, http2.ErrCodeCancel)
		fr.WriteRawFrame(0xee, 0x3, 0, []byte("ext"))
		fr.WriteGoAway(1, http2.ErrCodeNo, []byte("bye"))
	})
	add(func(fr *http2.Framer, enc func(kv ...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(":method", "GET", ":scheme", "https", ":path", "/", "Upper", "x", "te", "gzip"), EndStream: true, EndHeaders: true})
		fr.WriteRawFrame(http2.FrameSettings, 0, 0, []byte{0, 2, 0, 0, 0, 5})
		fr.WriteRawFrame(0x10, 0, 0, binary.BigEndian.AppendUint32(nil, 1))
	})
	return seeds
}
