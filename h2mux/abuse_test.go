package h2mux

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// last returns the last frame summary, or "".
func last(frames []string) string {
	if len(frames) == 0 {
		return ""
	}
	return frames[len(frames)-1]
}

// TestRapidReset (CVE-2023-44487): a client that opens streams and resets them at once
// spends the reset budget and gets GOAWAY ENHANCE_YOUR_CALM; one that cancels at a sane pace
// never does. Every reset stream was reported to the owner.
func TestRapidReset(t *testing.T) {
	t.Run("burst", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.r.hold = true
		got := cl.exchange(func() {
			for i := 0; i < 300; i++ {
				id := uint32(2*i + 1)
				cl.headers(id, true, getHead...)
				cl.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
		})
		if last(got) != "GOAWAY 401 ENHANCE_YOUR_CALM" || cl.connCode() != int(ErrCodeEnhanceYourCalm) {
			t.Fatalf("frames end %q, error %v", last(got), cl.err)
		}
		if r, f := cl.ctr.ClientResets.Load(), cl.ctr.ResetFloods.Load(); r != DefaultResetBurst+1 || f != 1 {
			t.Errorf("ClientResets %d, ResetFloods %d", r, f)
		}
		if n := strings.Count(strings.Join(cl.r.events, "\n"), "reset "); n != DefaultResetBurst+1 {
			t.Errorf("%d resets reported to the owner", n)
		}
	})
	t.Run("paced", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.r.hold = true
		for i := 0; i < 1000; i++ {
			id := uint32(2*i + 1)
			cl.now += int64(time.Second / (DefaultResetRate - 10))
			cl.exchange(func() {
				cl.headers(id, true, getHead...)
				cl.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			})
		}
		if cl.err != nil || cl.ctr.ClientResets.Load() != 1000 {
			t.Fatalf("error %v after %d resets", cl.err, cl.ctr.ClientResets.Load())
		}
	})
	t.Run("answered streams cost nothing", func(t *testing.T) {
		cl := newClient(t, Config{})
		for i := 0; i < 1000; i++ {
			id := uint32(2*i + 1)
			cl.exchange(func() {
				cl.headers(id, true, getHead...)
				cl.fr.WriteRSTStream(id, http2.ErrCodeCancel) // after the response: nothing to cancel
			})
		}
		if cl.err != nil || cl.ctr.ClientResets.Load() != 0 {
			t.Fatalf("error %v, %d resets", cl.err, cl.ctr.ClientResets.Load())
		}
	})
}

// TestMadeYouReset (CVE-2025-8671): every way a client makes the server reset its streams
// counts against the same budget, and ends the connection with ENHANCE_YOUR_CALM.
func TestMadeYouReset(t *testing.T) {
	provokers := map[string]func(cl *client, id uint32){
		"WINDOW_UPDATE of 0": func(cl *client, id uint32) {
			cl.headers(id, false, head("POST")...)
			cl.fr.WriteWindowUpdate(id, 0)
		},
		"stream window overflow": func(cl *client, id uint32) {
			cl.headers(id, false, head("POST")...)
			cl.fr.WriteWindowUpdate(id, 1<<31-1)
		},
		"DATA on a half-closed stream": func(cl *client, id uint32) {
			cl.headers(id, true, getHead...)
			cl.data(id, true, []byte("x"))
		},
		"malformed request": func(cl *client, id uint32) { cl.headers(id, true, head("GET", "Upper", "1")...) },
		"content-length mismatch": func(cl *client, id uint32) {
			cl.headers(id, false, head("POST", "content-length", "1")...)
			cl.data(id, true, []byte("xx"))
		},
		"PRIORITY of bad length": func(cl *client, id uint32) {
			cl.headers(id, false, head("POST")...)
			cl.fr.WriteRawFrame(http2.FramePriority, 0, id, []byte{0})
		},
	}
	for name, provoke := range provokers {
		t.Run(name, func(t *testing.T) {
			cl := newClient(t, Config{})
			cl.r.hold = true
			got := cl.exchange(func() {
				for i := 0; i < 300; i++ {
					provoke(cl, uint32(2*i+1))
				}
			})
			if !strings.HasSuffix(last(got), "ENHANCE_YOUR_CALM") || cl.ctr.ResetFloods.Load() != 1 {
				t.Fatalf("frames end %q; %d resets sent", last(got), cl.ctr.StreamErrors.Load())
			}
			if n := cl.ctr.StreamErrors.Load(); n != DefaultResetBurst+1 {
				t.Errorf("StreamErrors %d", n)
			}
		})
	}
}

// TestRefusedStreams: HEADERS past MAX_CONCURRENT_STREAMS get REFUSED_STREAM; a client that
// keeps opening past the limit spends the reset budget.
func TestRefusedStreams(t *testing.T) {
	cl := newClient(t, Config{MaxConcurrentStreams: 1})
	cl.r.hold = true
	got := cl.exchange(func() {
		for i := 0; i < 300; i++ {
			cl.headers(uint32(2*i+1), true, getHead...)
		}
	})
	if got[0] != "RST 3 REFUSED_STREAM" || last(got) != "GOAWAY 403 ENHANCE_YOUR_CALM" {
		t.Fatalf("frames %q … %q", got[0], last(got))
	}
	if n := cl.ctr.RefusedStreams.Load(); n != DefaultResetBurst+1 {
		t.Errorf("RefusedStreams %d", n)
	}
	if len(cl.r.reqs) != 1 {
		t.Errorf("the owner got %d requests", len(cl.r.reqs))
	}
}

// TestContinuationFlood (CVE-2024-27316): a header block that never ends is cut off at
// MaxHeaderBlockSize, the bytes after the list limit counted; empty CONTINUATION frames
// spend the empty-frame budget first.
func TestContinuationFlood(t *testing.T) {
	t.Run("bytes", func(t *testing.T) {
		cl := newClient(t, Config{})
		got := cl.exchange(func() {
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.block(getHead...)})
			frag := bytes.Repeat([]byte{0x82}, 1000) // ":method: GET", one byte each
			for i := 0; i < 100; i++ {
				cl.fr.WriteContinuation(1, false, frag)
			}
		})
		wantFrames(t, got, "GOAWAY 1 ENHANCE_YOUR_CALM")
		if cl.ctr.ContinuationFloods.Load() != 1 {
			t.Errorf("ContinuationFloods %d", cl.ctr.ContinuationFloods.Load())
		}
		// 16 KiB of fields (32 bytes each at least: 512 fields) passes the limit early; the rest
		// of the 32 KiB block is counted.
		if n := cl.ctr.HeaderBytesPastLimit.Load(); n < 16<<10 || n > DefaultMaxHeaderBlockSize {
			t.Errorf("HeaderBytesPastLimit %d", n)
		}
		if len(cl.r.reqs) != 0 {
			t.Error("the owner got the request")
		}
	})
	t.Run("empty frames", func(t *testing.T) {
		cl := newClient(t, Config{})
		got := cl.exchange(func() {
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.block(getHead...)})
			for i := 0; i < 1000; i++ {
				cl.fr.WriteContinuation(1, false, nil)
			}
		})
		wantFrames(t, got, "GOAWAY 1 ENHANCE_YOUR_CALM")
		if cl.ctr.EmptyFrameFloods.Load() != 1 {
			t.Errorf("EmptyFrameFloods %d", cl.ctr.EmptyFrameFloods.Load())
		}
	})
}

// TestHeaderLimits: a request head past the list size or the field count, however small its
// block (HPACK bombs), is answered 431 and never reaches the owner, and the HPACK state stays
// in step: the next request on the connection is served. A single field longer than the
// limit breaks the HPACK state and ends the connection.
func TestHeaderLimits(t *testing.T) {
	answered := []string{"HEADERS 3 :status=200 content-type=text/plain", "DATA 3 5 end"}
	t.Run("list size", func(t *testing.T) {
		cl := newClient(t, Config{MaxHeaderListSize: 4096})
		got := cl.exchange(func() {
			cl.headers(1, false, head("POST", "x-a", strings.Repeat("a", 2000), "x-b", strings.Repeat("b", 2000))...)
			cl.headers(3, true, head("GET", "x-a", strings.Repeat("a", 2000))...) // x-a from the dynamic table
		})
		wantFrames(t, got, append([]string{"HEADERS 1 :status=431 end", "RST 1 NO_ERROR"}, answered...)...)
		if cl.ctr.HeadersTooLarge.Load() != 1 || len(cl.r.reqs) != 1 || cl.r.reqs[0].Fields[0].Value[0] != 'a' {
			t.Errorf("HeadersTooLarge %d, requests %q", cl.ctr.HeadersTooLarge.Load(), cl.r.events)
		}
	})
	t.Run("HPACK bomb", func(t *testing.T) {
		cl := newClient(t, Config{})
		got := cl.exchange(func() {
			// One 4000-byte field enters the dynamic table with request 1 …
			cl.headers(1, true, head("GET", "x-bomb", strings.Repeat("x", 4000))...)
			// … and a 400-byte block refers to it 400 times: 1.6 MB decoded.
			cl.eb.Reset()
			for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/"}} {
				cl.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			for i := 0; i < 400; i++ {
				cl.enc.WriteField(hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("x", 4000)})
			}
			block := append([]byte(nil), cl.eb.Bytes()...)
			if len(block) > 1000 {
				t.Fatalf("the bomb's block is %d bytes", len(block))
			}
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block, EndStream: true, EndHeaders: true})
			cl.headers(5, true, getHead...)
		})
		wantFrames(t, got, "HEADERS 1 :status=200 content-type=text/plain", "DATA 1 5 end", "HEADERS 3 :status=431 end",
			"HEADERS 5 :status=200 content-type=text/plain", "DATA 5 5 end")
		if cl.ctr.HeadersTooLarge.Load() != 1 {
			t.Errorf("HeadersTooLarge %d", cl.ctr.HeadersTooLarge.Load())
		}
	})
	t.Run("field count", func(t *testing.T) {
		cl := newClient(t, Config{MaxHeaderFields: 20})
		kv := head("GET")
		for i := 0; i < 30; i++ {
			kv = append(kv, "x-f", "1")
		}
		got := cl.exchange(func() { cl.headers(1, true, kv...); cl.headers(3, true, getHead...) })
		wantFrames(t, got, append([]string{"HEADERS 1 :status=431 end"}, answered...)...)
	})
	t.Run("one field longer than the limit", func(t *testing.T) {
		cl := newClient(t, Config{MaxHeaderListSize: 4096})
		got := cl.exchange(func() { cl.headers(1, true, head("GET", "x-a", strings.Repeat("a", 5000))...) })
		wantFrames(t, got, "GOAWAY 1 COMPRESSION_ERROR")
	})
	t.Run("invalid HPACK", func(t *testing.T) {
		cl := newClient(t, Config{})
		got := cl.exchange(func() {
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, EndStream: true, EndHeaders: true})
		})
		wantFrames(t, got, "GOAWAY 1 COMPRESSION_ERROR")
	})
}

// TestControlFloods (CVE-2019-9512 ping, CVE-2019-9515 settings, CVE-2019-9514 reset): a
// client that provokes control frames and does not read its socket ends with
// ENHANCE_YOUR_CALM once MaxQueuedControl are queued; one that reads never does.
func TestControlFloods(t *testing.T) {
	floods := map[string]func(cl *client, i int){
		"PING":     func(cl *client, i int) { cl.fr.WritePing(false, [8]byte{byte(i)}) },
		"SETTINGS": func(cl *client, i int) { cl.fr.WriteSettings() },
		"RST_STREAM provoked": func(cl *client, i int) {
			cl.data(uint32(2*i+1), false, nil) // DATA on a stream the server closed: RST_STREAM
		},
	}
	for name, flood := range floods {
		t.Run(name+" unread", func(t *testing.T) {
			cl := newClient(t, Config{ResetBurst: 1 << 30})
			if name == "RST_STREAM provoked" {
				for i := 0; i < 2000; i++ {
					cl.exchange(func() { cl.headers(uint32(2*i+1), true, getHead...) })
				}
			}
			for i := 0; i < 2000; i++ {
				flood(cl, i)
			}
			if err := cl.c.Feed(cl.w.Bytes()); err == nil {
				t.Fatal("no connection error")
			}
			if cl.ctr.ControlFloods.Load() != 1 || !strings.HasSuffix(string(cl.c.Output()), "too many control frames queued") {
				t.Errorf("ControlFloods %d", cl.ctr.ControlFloods.Load())
			}
			if p := len(cl.c.Output()); p > DefaultMaxQueuedControl*20+200 {
				t.Errorf("%d bytes queued", p)
			}
		})
		t.Run(name+" read", func(t *testing.T) {
			cl := newClient(t, Config{ResetBurst: 1 << 30})
			for i := 0; i < 5000; i++ {
				if name == "RST_STREAM provoked" {
					cl.headers(uint32(2*i+1), true, getHead...)
				}
				flood(cl, i)
				if i%100 == 99 {
					cl.flush()
				}
			}
			cl.flush()
			if cl.err != nil || cl.ctr.ControlFloods.Load() != 0 {
				t.Errorf("error %v", cl.err)
			}
		})
	}
}

// TestEmptyFrameFlood (CVE-2019-9518): frames that carry nothing spend the empty-frame budget
// (ENHANCE_YOUR_CALM); at a sane pace they never do.
func TestEmptyFrameFlood(t *testing.T) {
	floods := map[string]func(cl *client){
		"DATA":     func(cl *client) { cl.data(1, false, nil) },
		"PRIORITY": func(cl *client) { cl.fr.WritePriority(3, http2.PriorityParam{StreamDep: 1, Weight: 3}) },
	}
	for name, flood := range floods {
		t.Run(name, func(t *testing.T) {
			cl := newClient(t, Config{})
			cl.r.hold = true
			got := cl.exchange(func() {
				cl.headers(1, false, head("POST")...)
				for i := 0; i < 1000; i++ {
					flood(cl)
				}
			})
			wantFrames(t, got, "GOAWAY 1 ENHANCE_YOUR_CALM")
			if cl.ctr.EmptyFrameFloods.Load() != 1 {
				t.Errorf("EmptyFrameFloods %d", cl.ctr.EmptyFrameFloods.Load())
			}
		})
		t.Run(name+" paced", func(t *testing.T) {
			cl := newClient(t, Config{})
			cl.r.hold = true
			cl.exchange(func() { cl.headers(1, false, head("POST")...) })
			for i := 0; i < 1000; i++ {
				cl.now += int64(time.Second / (DefaultEmptyFrameRate - 10))
				cl.exchange(func() { flood(cl) })
			}
			if cl.err != nil {
				t.Fatal(cl.err)
			}
		})
	}
}

// TestStalls (CVE-2019-9517): a stream the client gives no window is reset with CANCEL after
// StallTimeout (and counts against the reset budget); a connection whose output the owner
// could not drain for StallTimeout ends; the output never holds more than MaxOutput of
// DATA, whatever the owner has to send. The Conn asks for each timer through Deadline.
func TestStalls(t *testing.T) {
	t.Run("zero window", func(t *testing.T) {
		cl := newClient(t, Config{})
		got := cl.exchange(func() {
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			cl.headers(1, true, getHead...)
			cl.headers(3, true, getHead...)
		})
		wantFrames(t, got, "SETTINGS ack", "HEADERS 1 :status=200 content-type=text/plain", "HEADERS 3 :status=200 content-type=text/plain")
		d := cl.c.Deadline()
		if want := cl.now + int64(DefaultStallTimeout); d != want {
			t.Fatalf("deadline %d, want %d", d, want)
		}
		cl.now = d - 1
		if err := cl.c.Tick(); err != nil || len(cl.c.Output()) != 0 {
			t.Fatalf("Tick before the deadline: %v, %d bytes", err, len(cl.c.Output()))
		}
		cl.now = d
		if err := cl.c.Tick(); err != nil {
			t.Fatal(err)
		}
		cl.drain()
		wantFrames(t, cl.frames(), "RST 1 CANCEL", "RST 3 CANCEL")
		if cl.ctr.StallResets.Load() != 2 || cl.c.NumStreams() != 0 || cl.c.Deadline() != 0 {
			t.Errorf("StallResets %d, %d streams, deadline %d", cl.ctr.StallResets.Load(), cl.c.NumStreams(), cl.c.Deadline())
		}
		if e := strings.Join(cl.r.events[len(cl.r.events)-2:], ","); e != "reset 1 CANCEL,reset 3 CANCEL" {
			t.Errorf("events %s", e)
		}
	})
	t.Run("window used up by a write", func(t *testing.T) {
		cl := newClient(t, Config{})
		got := cl.exchange(func() {
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
			cl.headers(1, true, getHead...)
		})
		wantFrames(t, got, "SETTINGS ack", "HEADERS 1 :status=200 content-type=text/plain", "DATA 1 1")
		if d := cl.c.Deadline(); d != cl.now+int64(DefaultStallTimeout) {
			t.Fatalf("deadline %d: the stall timer did not start", d)
		}
		cl.now += int64(DefaultStallTimeout)
		cl.c.Tick()
		cl.drain()
		wantFrames(t, cl.frames(), "RST 1 CANCEL")
	})
	t.Run("window given in time", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.exchange(func() {
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			cl.headers(1, true, getHead...)
		})
		cl.now += int64(DefaultStallTimeout) - 1
		wantFrames(t, cl.exchange(func() { cl.fr.WriteWindowUpdate(1, 100) }), "DATA 1 5 end")
		cl.now += int64(DefaultStallTimeout)
		if err := cl.c.Tick(); err != nil || cl.ctr.StallResets.Load() != 0 {
			t.Fatalf("Tick: %v, %d resets", err, cl.ctr.StallResets.Load())
		}
	})
	t.Run("slow reader", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.r.body = make([]byte, 10<<20)
		cl.headers(1, true, getHead...)
		cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
		cl.fr.WriteWindowUpdate(0, 1<<30)
		if err := cl.c.Feed(cl.w.Bytes()); err != nil {
			t.Fatal(err)
		}
		// The owner cannot write to the socket: nothing is drained.
		if p := len(cl.c.Output()); p > DefaultMaxOutput+1000 {
			t.Errorf("%d bytes in the output", p)
		}
		d := cl.c.Deadline()
		if d != cl.now+int64(DefaultStallTimeout) {
			t.Fatalf("deadline %d", d)
		}
		cl.now = d
		if err := cl.c.Tick(); err == nil || cl.ctr.OutputStalls.Load() != 1 {
			t.Fatalf("Tick: %v, OutputStalls %d", err, cl.ctr.OutputStalls.Load())
		}
		if !cl.c.Done() {
			t.Error("not Done")
		}
	})
	t.Run("slow reader catching up", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.r.body = make([]byte, 10<<20)
		cl.exchange(func() {
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
			cl.fr.WriteWindowUpdate(0, 1<<30)
		})
		cl.headers(1, true, getHead...)
		cl.c.Feed(cl.w.Bytes())
		total := 0
		for i := 0; cl.c.NumStreams() > 0; i++ {
			cl.now += int64(DefaultStallTimeout) / 2
			if err := cl.c.Tick(); err != nil {
				t.Fatal(err)
			}
			n := min(len(cl.c.Output()), 100<<10)
			total += n
			cl.c.Advance(n) // 100 KiB per half stall period: slow, but draining
		}
		if total < 10<<20 || cl.ctr.OutputStalls.Load() != 0 {
			t.Errorf("%d bytes drained, %d stalls", total, cl.ctr.OutputStalls.Load())
		}
	})
}

// TestTimers: SETTINGS unacknowledged for SettingsTimeout end the connection; IdleTimeout
// starts a graceful close of a connection without streams.
func TestTimers(t *testing.T) {
	t.Run("settings timeout", func(t *testing.T) {
		r := &recorder{}
		now := int64(time.Hour)
		c := NewConn(r, Config{Now: func() int64 { return now }})
		var w bytes.Buffer
		w.WriteString(http2.ClientPreface)
		http2.NewFramer(&w, nil).WriteSettings()
		if err := c.Feed(w.Bytes()); err != nil {
			t.Fatal(err)
		}
		c.Advance(len(c.Output()))
		if d := c.Deadline(); d != now+int64(DefaultSettingsTimeout) {
			t.Fatalf("deadline %d", d)
		}
		now += int64(DefaultSettingsTimeout)
		if err := c.Tick(); err == nil || c.Counters().SettingsTimeouts.Load() != 1 {
			t.Fatalf("Tick: %v", err)
		}
	})
	t.Run("idle", func(t *testing.T) {
		cl := newClient(t, Config{IdleTimeout: time.Minute})
		cl.exchange(func() { cl.headers(1, true, getHead...) })
		if d := cl.c.Deadline(); d != cl.now+int64(time.Minute) {
			t.Fatalf("deadline %d", d)
		}
		cl.now += int64(time.Minute)
		if err := cl.c.Tick(); err != nil {
			t.Fatal(err)
		}
		cl.drain()
		wantFrames(t, cl.frames(), "GOAWAY 1 NO_ERROR")
		if !cl.c.Done() || cl.c.Deadline() != 0 {
			t.Errorf("Done %v, deadline %d", cl.c.Done(), cl.c.Deadline())
		}
	})
}

// TestShutdown: GOAWAY names the last stream; streams open go on, new ones are refused
// without costing the client anything, and Done follows the last stream.
func TestShutdown(t *testing.T) {
	cl := newClient(t, Config{})
	cl.r.hold = true
	cl.exchange(func() { cl.headers(1, true, getHead...) })
	cl.c.Shutdown()
	got := cl.exchange(func() { cl.headers(3, true, getHead...) })
	wantFrames(t, got, "GOAWAY 1 NO_ERROR", "RST 3 REFUSED_STREAM")
	if cl.c.Done() {
		t.Fatal("Done with stream 1 open")
	}
	s := cl.c.streams[1]
	if err := cl.c.Headers(s, 204).Send(true); err != nil {
		t.Fatal(err)
	}
	if !cl.c.Done() {
		t.Error("not Done after the last stream")
	}
}

// TestMemoryBound: what a connection holds stays within its bounds whatever the client
// does: a frame header announcing 16 MiB is refused before any of it is buffered, the input
// buffer never passes one frame, and 250 streams with unconsumed bodies hold no bytes in
// the Conn (the owner got them) and no more window than granted.
func TestMemoryBound(t *testing.T) {
	cl := newClient(t, Config{})
	cl.feed([]byte{0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1})
	if cl.err == nil || len(cl.c.in) != 0 {
		t.Errorf("16 MiB frame header: %v, %d bytes buffered", cl.err, len(cl.c.in))
	}

	cl = newClient(t, Config{})
	cl.r.hold = true
	cl.r.onData = func([]byte) {}
	for i := 0; i < DefaultMaxConcurrentStreams; i++ {
		id := uint32(2*i + 1)
		cl.headers(id, false, head("POST")...)
		cl.data(id, false, make([]byte, 4000))
	}
	cl.flush()
	if cl.c.NumStreams() != DefaultMaxConcurrentStreams || cl.err != nil {
		t.Fatalf("%d streams, %v", cl.c.NumStreams(), cl.err)
	}
	held := int64(0)
	for _, s := range cl.c.streams {
		held += s.recvHeld
	}
	if held != DefaultMaxConcurrentStreams*4000 || held > DefaultConnWindow {
		t.Errorf("held %d", held)
	}
	// The client may send no more than the connection window.
	for i := 0; i < 100 && cl.err == nil; i++ {
		cl.data(1, false, make([]byte, 16384))
		cl.flush()
	}
	if cl.connCode() != int(ErrCodeFlowControl) {
		t.Errorf("past the windows: %v", cl.err)
	}

	// When 250 streams end, the connection keeps a few stream structs, not 250.
	cl = newClient(t, Config{ResetBurst: 1 << 30})
	cl.r.hold = true
	cl.exchange(func() {
		for i := 0; i < DefaultMaxConcurrentStreams; i++ {
			cl.headers(uint32(2*i+1), false, head("POST")...)
		}
	})
	cl.exchange(func() {
		for i := 0; i < DefaultMaxConcurrentStreams; i++ {
			cl.fr.WriteRSTStream(uint32(2*i+1), http2.ErrCodeCancel)
		}
	})
	if cl.c.NumStreams() != 0 || cl.c.freeN != maxFreeStreams || cl.err != nil {
		t.Errorf("%d streams, %d kept free, %v", cl.c.NumStreams(), cl.c.freeN, cl.err)
	}
}

// PINGs on silence: after PingAfter without a byte from the client the connection pings it;
// anything that arrives (the PING's ACK) clears it; silence for PingTimeout after a PING ends
// the connection (a peer that vanished without a FIN), counted.
func TestPingOnSilence(t *testing.T) {
	cl := newClient(t, Config{PingAfter: 30 * time.Second, PingTimeout: 15 * time.Second})
	if d := cl.c.Deadline(); d != cl.now+int64(30*time.Second) {
		t.Fatalf("deadline %d, want now+30s", d-cl.now)
	}
	cl.now += int64(30 * time.Second)
	if err := cl.c.Tick(); err != nil {
		t.Fatal(err)
	}
	cl.drain()
	wantFrames(t, cl.frames(), "PING")
	if d := cl.c.Deadline(); d != cl.now+int64(15*time.Second) {
		t.Fatalf("deadline after the PING %d, want now+15s", d-cl.now)
	}
	cl.now += int64(10 * time.Second)
	cl.exchange(func() { cl.fr.WritePing(true, [8]byte{'b', 'a', 'l', 'l', 'a', 's', 't', '!'}) })
	if err := cl.c.Tick(); err != nil || cl.c.Deadline() != cl.now+int64(30*time.Second) {
		t.Fatalf("after the ACK: %v, deadline now+%d", err, cl.c.Deadline()-cl.now)
	}
	cl.now += int64(30 * time.Second)
	cl.c.Tick()
	cl.drain()
	wantFrames(t, cl.frames(), "PING")
	cl.now += int64(15 * time.Second)
	if err := cl.c.Tick(); err == nil || cl.ctr.PingTimeouts.Load() != 1 || !cl.c.Done() {
		t.Fatalf("unanswered PING: %v, PingTimeouts %d", err, cl.ctr.PingTimeouts.Load())
	}
}
