package h2mux

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/net/http2"
)

// The frames of a settings parameter, for raw SETTINGS payloads.
func setting(id http2.SettingID, v uint32) []byte {
	return []byte{byte(id >> 8), byte(id), byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

// TestFrames drives the connection with frames written by x/net's Framer and compares the
// frames it answers with (read by another Framer) and the connection error it ends with.
// Each case names the RFC 9113 rule it checks.
func TestFrames(t *testing.T) {
	const goaway = "GOAWAY "
	type tc struct {
		name  string
		cfg   Config
		hold  bool // the handler answers nothing
		steps func(cl *client)
		want  []string
		code  int // the connection error, or -1
	}
	ok := []string{"HEADERS 1 :status=200 content-type=text/plain", "DATA 1 5 end"}
	cases := []tc{
		{name: "GET answered", steps: func(cl *client) { cl.headers(1, true, getHead...) }, want: ok, code: -1},
		{name: "§6.7 PING acknowledged", steps: func(cl *client) { cl.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}) },
			want: []string{"PING ack 0102030405060708"}, code: -1},
		{name: "§6.7 PING ack ignored", steps: func(cl *client) { cl.fr.WritePing(true, [8]byte{}) }, code: -1},
		{name: "§6.7 PING on a stream", steps: func(cl *client) { cl.fr.WriteRawFrame(http2.FramePing, 0, 1, make([]byte, 8)) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.7 PING of 6 bytes", steps: func(cl *client) { cl.fr.WriteRawFrame(http2.FramePing, 0, 0, make([]byte, 6)) },
			want: []string{goaway + "0 FRAME_SIZE_ERROR"}, code: 6},
		{name: "§6.5 SETTINGS ack with payload", steps: func(cl *client) {
			cl.fr.WriteRawFrame(http2.FrameSettings, 1, 0, setting(http2.SettingMaxFrameSize, 1<<14))
		}, want: []string{goaway + "0 FRAME_SIZE_ERROR"}, code: 6},
		{name: "§6.5 SETTINGS on a stream", steps: func(cl *client) { cl.fr.WriteRawFrame(http2.FrameSettings, 0, 1, nil) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.5 SETTINGS length not a multiple of 6", steps: func(cl *client) { cl.fr.WriteRawFrame(http2.FrameSettings, 0, 0, make([]byte, 5)) },
			want: []string{goaway + "0 FRAME_SIZE_ERROR"}, code: 6},
		{name: "§6.5.2 ENABLE_PUSH 2", steps: func(cl *client) { cl.fr.WriteRawFrame(http2.FrameSettings, 0, 0, setting(http2.SettingEnablePush, 2)) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.5.2 INITIAL_WINDOW_SIZE 2^31", steps: func(cl *client) {
			cl.fr.WriteRawFrame(http2.FrameSettings, 0, 0, setting(http2.SettingInitialWindowSize, 1<<31))
		}, want: []string{goaway + "0 FLOW_CONTROL_ERROR"}, code: 3},
		{name: "§6.5.2 MAX_FRAME_SIZE below 2^14", steps: func(cl *client) {
			cl.fr.WriteRawFrame(http2.FrameSettings, 0, 0, setting(http2.SettingMaxFrameSize, 1<<14-1))
		}, want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.5.2 MAX_FRAME_SIZE 2^24", steps: func(cl *client) {
			cl.fr.WriteRawFrame(http2.FrameSettings, 0, 0, setting(http2.SettingMaxFrameSize, 1<<24))
		}, want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.5.2 unknown setting ignored", steps: func(cl *client) { cl.fr.WriteRawFrame(http2.FrameSettings, 0, 0, setting(0xff, 7)) },
			want: []string{"SETTINGS ack"}, code: -1},
		{name: "§6.5.3 two INITIAL_WINDOW_SIZE values, in order", steps: func(cl *client) {
			p := append(setting(http2.SettingInitialWindowSize, 100), setting(http2.SettingInitialWindowSize, 1)...)
			cl.fr.WriteRawFrame(http2.FrameSettings, 0, 0, p)
			cl.headers(1, true, getHead...)
		}, want: []string{"SETTINGS ack", ok[0], "DATA 1 1"}, code: -1},
		{name: "§6.1 DATA on stream 0", steps: func(cl *client) { cl.data(0, true, []byte("x")) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§5.1 DATA on an idle stream", steps: func(cl *client) { cl.data(1, true, []byte("x")) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.1 DATA padding longer than the payload", hold: true, steps: func(cl *client) {
			cl.headers(1, false, head("POST")...)
			cl.fr.WriteRawFrame(http2.FrameData, 0x8, 1, []byte{5, 'a', 'b'})
		}, want: []string{goaway + "1 PROTOCOL_ERROR"}, code: 1},
		{name: "§5.1 DATA on a half-closed (remote) stream", hold: true, steps: func(cl *client) {
			cl.headers(1, true, getHead...)
			cl.data(1, true, []byte("x"))
		}, want: []string{"RST 1 STREAM_CLOSED"}, code: -1},
		{name: "§5.1 DATA on a closed stream", steps: func(cl *client) {
			cl.headers(1, true, getHead...)
			cl.data(1, true, []byte("x"))
		}, want: append(ok[:2:2], "RST 1 STREAM_CLOSED"), code: -1},
		{name: "§5.1 DATA after the client's RST_STREAM", hold: true, steps: func(cl *client) {
			cl.headers(1, false, head("POST")...)
			cl.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			cl.data(1, true, []byte("x"))
		}, want: []string{"RST 1 STREAM_CLOSED"}, code: -1},
		{name: "§5.1 frames after our RST_STREAM ignored", hold: true, steps: func(cl *client) {
			cl.headers(1, false, head("POST")...)
			cl.fr.WriteWindowUpdate(1, 0) // provokes RST_STREAM PROTOCOL_ERROR
			cl.data(1, false, []byte("x"))
			cl.headers(1, true, "x-trailer", "1")
		}, want: []string{"RST 1 PROTOCOL_ERROR"}, code: -1},
		{name: "§5.1.1 even stream identifier", steps: func(cl *client) { cl.headers(2, true, getHead...) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.2 HEADERS on stream 0", steps: func(cl *client) { cl.headers(0, true, getHead...) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§5.1.1 stream identifier smaller than the previous", hold: true, steps: func(cl *client) {
			cl.headers(5, true, getHead...)
			cl.headers(3, true, getHead...)
		}, want: []string{goaway + "5 PROTOCOL_ERROR"}, code: 1},
		{name: "§5.1 HEADERS on a closed stream", steps: func(cl *client) {
			cl.headers(1, true, getHead...)
			cl.headers(1, true, getHead...)
		}, want: append(ok[:2:2], goaway+"1 PROTOCOL_ERROR"), code: 1},
		{name: "§6.2 HEADERS interrupted by PRIORITY", steps: func(cl *client) {
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.block(getHead...), EndStream: true})
			cl.fr.WritePriority(1, http2.PriorityParam{StreamDep: 0, Weight: 15})
		}, want: []string{goaway + "1 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.2 HEADERS interrupted by HEADERS of another stream", steps: func(cl *client) {
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.block(getHead...), EndStream: true})
			cl.headers(3, true, getHead...)
		}, want: []string{goaway + "1 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.10 CONTINUATION without HEADERS", steps: func(cl *client) { cl.fr.WriteContinuation(1, true, cl.block(getHead...)) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.10 CONTINUATION on stream 0", steps: func(cl *client) {
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.block(getHead...), EndStream: true})
			cl.fr.WriteContinuation(0, true, nil)
		}, want: []string{goaway + "1 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.10 CONTINUATION after END_HEADERS", steps: func(cl *client) {
			cl.headers(1, true, getHead...)
			cl.fr.WriteContinuation(1, true, cl.block("x-a", "b"))
		}, want: append(ok[:2:2], goaway+"1 PROTOCOL_ERROR"), code: 1},
		{name: "§6.10 a block over HEADERS and CONTINUATION frames", steps: func(cl *client) {
			b := cl.block(getHead...)
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:3], EndStream: true})
			cl.fr.WriteContinuation(1, false, b[3:7])
			cl.fr.WriteContinuation(1, true, b[7:])
		}, want: ok, code: -1},
		{name: "§5.5 unknown frame type ignored", steps: func(cl *client) {
			cl.fr.WriteRawFrame(0xee, 0xff, 0, []byte("what"))
			cl.headers(1, true, getHead...)
		}, want: ok, code: -1},
		{name: "§5.5 unknown frame type inside a header block", steps: func(cl *client) {
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.block(getHead...), EndStream: true})
			cl.fr.WriteRawFrame(0xee, 0, 1, nil)
		}, want: []string{goaway + "1 PROTOCOL_ERROR"}, code: 1},
		{name: "§4.1 undefined flags and the reserved bit ignored", steps: func(cl *client) {
			cl.fr.WriteRawFrame(http2.FramePing, 0xfe, 0, make([]byte, 8))
			var raw bytes.Buffer
			fr := http2.NewFramer(&raw, nil)
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.block(getHead...), EndStream: true, EndHeaders: true})
			b := raw.Bytes()
			b[5] |= 0x80 // the reserved bit of the stream identifier
			cl.w.Write(b)
		}, want: append([]string{"PING ack 0000000000000000"}, ok...), code: -1},
		{name: "§4.2 frame larger than MAX_FRAME_SIZE", hold: true, steps: func(cl *client) {
			cl.headers(1, false, head("POST")...)
			cl.data(1, true, make([]byte, 1<<14+1))
		}, want: []string{goaway + "1 FRAME_SIZE_ERROR"}, code: 6},
		{name: "§4.2 DATA of 2^14 bytes", steps: func(cl *client) {
			cl.headers(1, false, head("POST")...)
			cl.data(1, true, make([]byte, 1<<14))
		}, want: ok, code: -1},
		{name: "§8.4 PUSH_PROMISE from the client", steps: func(cl *client) {
			cl.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: cl.block(getHead...), EndHeaders: true})
		}, want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.3 PRIORITY on stream 0", steps: func(cl *client) { cl.fr.WritePriority(0, http2.PriorityParam{Weight: 1}) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.3 PRIORITY of 4 bytes", steps: func(cl *client) {
			cl.headers(1, true, getHead...)
			cl.fr.WriteRawFrame(http2.FramePriority, 0, 1, make([]byte, 4))
		}, want: append(ok[:2:2], "RST 1 FRAME_SIZE_ERROR"), code: -1},
		{name: "§5.3.1 PRIORITY depending on itself", steps: func(cl *client) {
			cl.headers(1, true, getHead...)
			cl.fr.WritePriority(1, http2.PriorityParam{StreamDep: 1, Weight: 1})
		}, want: append(ok[:2:2], "RST 1 PROTOCOL_ERROR"), code: -1},
		{name: "§5.3.1 HEADERS depending on itself", steps: func(cl *client) {
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.block(getHead...), EndStream: true, EndHeaders: true,
				Priority: http2.PriorityParam{StreamDep: 1, Weight: 1}})
		}, want: []string{"RST 1 PROTOCOL_ERROR"}, code: -1},
		{name: "§5.1 PRIORITY on an idle stream opens nothing", steps: func(cl *client) {
			cl.fr.WritePriority(3, http2.PriorityParam{StreamDep: 0, Weight: 1})
			cl.headers(1, true, getHead...)
		}, want: ok, code: -1},
		{name: "§6.2 HEADERS with padding and priority", steps: func(cl *client) {
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.block(getHead...), EndStream: true, EndHeaders: true,
				PadLength: 7, Priority: http2.PriorityParam{StreamDep: 0, Weight: 200, Exclusive: true}})
		}, want: ok, code: -1},
		{name: "§6.2 HEADERS padding longer than the payload", steps: func(cl *client) {
			cl.fr.WriteRawFrame(http2.FrameHeaders, 0x8|0x4|0x1, 1, []byte{9, 0x82})
		}, want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.4 RST_STREAM on stream 0", steps: func(cl *client) { cl.fr.WriteRSTStream(0, http2.ErrCodeCancel) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.4 RST_STREAM on an idle stream", steps: func(cl *client) { cl.fr.WriteRSTStream(1, http2.ErrCodeCancel) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.4 RST_STREAM of 3 bytes", hold: true, steps: func(cl *client) {
			cl.headers(1, true, getHead...)
			cl.fr.WriteRawFrame(http2.FrameRSTStream, 0, 1, make([]byte, 3))
		}, want: []string{goaway + "1 FRAME_SIZE_ERROR"}, code: 6},
		{name: "§7 RST_STREAM with an unknown code", hold: true, steps: func(cl *client) {
			cl.headers(1, true, getHead...)
			cl.fr.WriteRSTStream(1, 0xabc)
			cl.fr.WritePing(false, [8]byte{})
		}, want: []string{"PING ack 0000000000000000"}, code: -1},
		{name: "§6.9 WINDOW_UPDATE of 0 on the connection", steps: func(cl *client) { cl.fr.WriteWindowUpdate(0, 0) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.9 WINDOW_UPDATE of 0 on a stream", hold: true, steps: func(cl *client) {
			cl.headers(1, true, getHead...)
			cl.fr.WriteWindowUpdate(1, 0)
		}, want: []string{"RST 1 PROTOCOL_ERROR"}, code: -1},
		{name: "§6.9 WINDOW_UPDATE of 3 bytes", steps: func(cl *client) { cl.fr.WriteRawFrame(http2.FrameWindowUpdate, 0, 0, make([]byte, 3)) },
			want: []string{goaway + "0 FRAME_SIZE_ERROR"}, code: 6},
		{name: "§5.1 WINDOW_UPDATE on an idle stream", steps: func(cl *client) { cl.fr.WriteWindowUpdate(1, 1) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.9.1 connection window above 2^31-1", steps: func(cl *client) {
			cl.fr.WriteWindowUpdate(0, 1<<31-1)
		}, want: []string{goaway + "0 FLOW_CONTROL_ERROR"}, code: 3},
		{name: "§6.9.1 stream window above 2^31-1", hold: true, steps: func(cl *client) {
			cl.headers(1, true, getHead...)
			cl.fr.WriteWindowUpdate(1, 1<<31-1)
		}, want: []string{"RST 1 FLOW_CONTROL_ERROR"}, code: -1},
		{name: "§6.9.2 INITIAL_WINDOW_SIZE overflowing a stream window", hold: true, steps: func(cl *client) {
			cl.headers(1, true, getHead...)
			cl.fr.WriteWindowUpdate(1, 1<<31-1-65535)
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65536})
		}, want: []string{goaway + "1 FLOW_CONTROL_ERROR"}, code: 3},
		{name: "§6.8 GOAWAY on a stream", steps: func(cl *client) { cl.fr.WriteRawFrame(http2.FrameGoAway, 0, 1, make([]byte, 8)) },
			want: []string{goaway + "0 PROTOCOL_ERROR"}, code: 1},
		{name: "§6.8 client GOAWAY: open streams go on", hold: false, steps: func(cl *client) {
			cl.fr.WriteGoAway(0, http2.ErrCodeNo, nil)
			cl.headers(1, true, getHead...)
		}, want: ok, code: -1},
		{name: "§6.9.1 DATA past the stream window", cfg: Config{StreamWindow: 65535, ConnWindow: 1 << 20}, hold: true, steps: func(cl *client) {
			cl.headers(1, false, head("POST")...)
			for i := 0; i < 4; i++ {
				cl.data(1, false, make([]byte, 16384))
			}
		}, want: []string{"RST 1 FLOW_CONTROL_ERROR"}, code: -1},
		{name: "§6.9.1 DATA past the connection window", cfg: Config{StreamWindow: 1 << 20, ConnWindow: 65535}, hold: true, steps: func(cl *client) {
			cl.headers(1, false, head("POST")...)
			for i := 0; i < 4; i++ {
				cl.data(1, false, make([]byte, 16384))
			}
		}, want: []string{goaway + "1 FLOW_CONTROL_ERROR"}, code: 3},
		{name: "§5.1.2 MAX_CONCURRENT_STREAMS", cfg: Config{MaxConcurrentStreams: 2}, hold: true, steps: func(cl *client) {
			cl.headers(1, true, getHead...)
			cl.headers(3, true, getHead...)
			cl.headers(5, true, getHead...)
			cl.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			cl.headers(7, true, getHead...)
		}, want: []string{"RST 5 REFUSED_STREAM"}, code: -1},
		{name: "§3.4 preface not followed by SETTINGS", code: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.steps == nil {
				// The preface case: a Conn without newClient's handshake.
				r := &recorder{}
				conn := NewConn(r, Config{})
				r.c = conn
				var w bytes.Buffer
				w.WriteString(http2.ClientPreface)
				http2.NewFramer(&w, nil).WritePing(false, [8]byte{})
				err := conn.Feed(w.Bytes())
				if ce, ok := err.(*ConnError); !ok || ce.Code != ErrCodeProtocol {
					t.Fatalf("Feed: %v", err)
				}
				return
			}
			cl := newClient(t, c.cfg)
			cl.r.hold = c.hold
			got := cl.exchange(func() { c.steps(cl) })
			wantFrames(t, got, c.want...)
			if cl.connCode() != c.code {
				t.Errorf("connection error %v, want code %d", cl.err, c.code)
			}
			if c.code >= 0 && !cl.c.Done() {
				t.Error("Done false after a connection error")
			}
			if t.Failed() {
				t.Logf("events: %q", cl.r.events)
			}
		})
	}
}

// TestInvalidPreface: bytes that are not the client preface end the connection.
func TestInvalidPreface(t *testing.T) {
	conn := NewConn(&recorder{}, Config{})
	if err := conn.Feed([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err == nil {
		t.Fatal("no error")
	}
	if !strings.Contains(string(conn.Output()), "invalid connection preface") {
		t.Errorf("no GOAWAY with the reason in %q", conn.Output())
	}
}

// TestConnectionEnd: a connection error and Abort each end every open stream, and the owner
// hears of each (Handler.Reset); nothing is written after the GOAWAY.
func TestConnectionEnd(t *testing.T) {
	cl := newClient(t, Config{})
	cl.r.hold = true
	cl.exchange(func() {
		for _, id := range []uint32{1, 3, 5} {
			cl.headers(id, false, head("POST")...)
		}
	})
	s := cl.c.streams[3]
	got := cl.exchange(func() { cl.fr.WriteRawFrame(http2.FramePing, 0, 1, make([]byte, 8)) })
	wantFrames(t, got, "GOAWAY 5 PROTOCOL_ERROR")
	resets := 0
	for _, e := range cl.r.events {
		if strings.HasPrefix(e, "reset ") && strings.HasSuffix(e, " PROTOCOL_ERROR") {
			resets++
		}
	}
	if resets != 3 || cl.c.NumStreams() != 0 {
		t.Errorf("%d resets reported, %d streams left: %q", resets, cl.c.NumStreams(), cl.r.events)
	}
	if _, err := cl.c.WriteData(s, []byte("x"), true); err == nil {
		t.Error("WriteData after the connection error")
	}
	if err := cl.c.Feed([]byte("more")); err != cl.err {
		t.Errorf("Feed after the error: %v", err)
	}
	if len(cl.c.Output()) != 0 {
		t.Error("output after the GOAWAY")
	}

	cl = newClient(t, Config{})
	cl.r.hold = true
	cl.exchange(func() { cl.headers(1, false, head("POST")...) })
	cl.c.Abort()
	if last := cl.r.events[len(cl.r.events)-1]; last != "reset 1 CANCEL" || !cl.c.Done() || len(cl.c.Output()) != 0 {
		t.Errorf("after Abort: %q, Done %v", last, cl.c.Done())
	}
}

// The owner cancels a stream whose response it cannot complete: RST_STREAM with its code, the
// Handler not told, the stream gone, the client's reset budget untouched, and the frames the
// client still sends on it ignored.
func TestOwnerCancel(t *testing.T) {
	cl := newClient(t, Config{ResetBurst: 1})
	cl.r.hold = true
	cl.exchange(func() { cl.headers(1, false, head("POST")...) })
	s := cl.c.streams[1]
	if err := cl.c.Headers(s, 200).Send(false); err != nil {
		t.Fatal(err)
	}
	cl.c.Cancel(s, ErrCodeInternal)
	cl.drain()
	wantFrames(t, cl.frames(), "HEADERS 1 :status=200", "RST 1 INTERNAL_ERROR")
	if cl.c.NumStreams() != 0 {
		t.Errorf("%d streams after Cancel", cl.c.NumStreams())
	}
	for _, e := range cl.r.events {
		if strings.HasPrefix(e, "reset ") {
			t.Errorf("the Handler was told of the owner's cancel: %q", cl.r.events)
		}
	}
	got := cl.exchange(func() {
		cl.data(1, true, []byte("late"))
		cl.headers(3, true, getHead...)
		cl.fr.WriteRSTStream(3, http2.ErrCodeCancel)
	})
	if cl.err != nil {
		t.Fatalf("after the cancel: %v (frames %q)", cl.err, got)
	}
}

// A Handler that is a Refuser hears of every request head the connection refused itself (for
// its access-log line): 431 past the header limits, 400 for a malformed head, with the
// :method and :path the head had.
func TestRefused(t *testing.T) {
	cl := newClient(t, Config{MaxHeaderListSize: 4096})
	cl.exchange(func() {
		cl.headers(1, true, head("GET", "x-a", strings.Repeat("a", 2000), "x-b", strings.Repeat("b", 2000))...)
		cl.headers(3, true, head("GET", "connection", "close")...)
		cl.headers(5, true, getHead...)
	})
	want := []string{
		"431 GET /: request head past the header list limit (431)",
		"400 GET /: connection-specific field connection",
	}
	if strings.Join(cl.r.refused, "\n") != strings.Join(want, "\n") || len(cl.r.reqs) != 1 {
		t.Errorf("refused %q, want %q; %d requests handed over", cl.r.refused, want, len(cl.r.reqs))
	}
}
