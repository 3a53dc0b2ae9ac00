package h2mux

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"golang.org/x/net/http2"
)

// TestSendWindows: response DATA is framed only within the client's stream and connection
// windows (RFC 9113 §6.9), the rest waits for WINDOW_UPDATE or a larger
// SETTINGS_INITIAL_WINDOW_SIZE (which may also make a window negative, §6.9.2), and the
// owner is told when to go on (Handler.Writable).
func TestSendWindows(t *testing.T) {
	t.Run("stream window", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.r.body = []byte("0123456789")
		got := cl.exchange(func() {
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
			cl.headers(1, true, getHead...)
		})
		wantFrames(t, got, "SETTINGS ack", "HEADERS 1 :status=200 content-type=text/plain", "DATA 1 1")
		wantFrames(t, cl.exchange(func() { cl.fr.WriteWindowUpdate(1, 2) }), "DATA 1 2")
		// A larger initial window grows the open stream's window by the difference.
		got = cl.exchange(func() { cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100}) })
		wantFrames(t, got, "SETTINGS ack", "DATA 1 7 end")
		if w := strings.Join(cl.r.events, ","); w != "request 1 GET / end=true,writable 1,writable 1" {
			t.Errorf("events %s", w)
		}
	})
	t.Run("woken and blocked again, listed once", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.r.body = make([]byte, 1000)
		cl.exchange(func() {
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			cl.headers(1, true, getHead...)
		})
		for i := 0; i < 500; i++ {
			got := cl.exchange(func() { cl.fr.WriteWindowUpdate(1, 1) })
			if len(got) != 1 || len(cl.c.blocked) > 1 {
				t.Fatalf("update %d: frames %q, %d listed", i, got, len(cl.c.blocked))
			}
			cl.c.Advance(0)
		}
		got := cl.exchange(func() { cl.fr.WriteWindowUpdate(1, 500) })
		wantFrames(t, got, "DATA 1 500 end")
		if len(cl.c.blocked) != 0 {
			t.Errorf("%d streams listed after the end", len(cl.c.blocked))
		}
	})
	t.Run("negative stream window", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.r.body = []byte("0123456789")
		cl.exchange(func() {
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 5})
			cl.headers(1, true, getHead...)
		})
		// 5 sent; the window drops to 0-5 = -5; an update of 7 leaves 2.
		got := cl.exchange(func() {
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			cl.fr.WriteWindowUpdate(1, 7)
		})
		wantFrames(t, got, "SETTINGS ack", "DATA 1 2")
	})
	t.Run("connection window", func(t *testing.T) {
		cl := newClient(t, Config{MaxOutput: 1 << 20}) // the output's room is not what this tests
		cl.r.body = bytes.Repeat([]byte("x"), 50000)
		got := cl.exchange(func() {
			cl.headers(1, true, getHead...)
			cl.headers(3, true, getHead...)
		})
		// 50000 for stream 1, the connection's remaining 15535 for stream 3.
		wantFrames(t, got, "HEADERS 1 :status=200 content-type=text/plain", "DATA 1 16384", "DATA 1 16384", "DATA 1 16384", "DATA 1 848 end",
			"HEADERS 3 :status=200 content-type=text/plain", "DATA 3 15535")
		got = cl.exchange(func() { cl.fr.WriteWindowUpdate(0, 10) })
		wantFrames(t, got, "DATA 3 10")
		got = cl.exchange(func() { cl.fr.WriteWindowUpdate(3, 1<<20); cl.fr.WriteWindowUpdate(0, 1<<20) })
		wantFrames(t, got, "DATA 3 16384", "DATA 3 16384", "DATA 3 1687 end")
	})
	t.Run("larger MAX_FRAME_SIZE, still 16 KiB frames", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.r.body = bytes.Repeat([]byte("x"), 20000)
		got := cl.exchange(func() {
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
			cl.headers(1, true, getHead...)
		})
		wantFrames(t, got, "SETTINGS ack", "HEADERS 1 :status=200 content-type=text/plain", "DATA 1 16384", "DATA 1 3616 end")
	})
}

// TestReceiveWindows: request DATA counts against the windows Ballast granted; the owner's
// Consumed gives them back (WINDOW_UPDATE at half a window), padding is given back at once,
// and bytes of a stream that ends before the owner consumed them go back to the connection.
func TestReceiveWindows(t *testing.T) {
	cfg := Config{StreamWindow: 65535, ConnWindow: 200000}
	t.Run("consumed", func(t *testing.T) {
		cl := newClient(t, cfg)
		cl.r.consume = true
		cl.r.hold = true
		got := cl.exchange(func() {
			cl.headers(1, false, head("POST")...)
			cl.data(1, false, make([]byte, 16384))
			cl.data(1, false, make([]byte, 16384))
		})
		wantFrames(t, got, "WINDOW_UPDATE 1 32768")
		got = cl.exchange(func() {
			for i := 0; i < 5; i++ {
				cl.data(1, false, make([]byte, 16384))
			}
		})
		// The stream's half window is due after frames 4 and 6, the connection's after 7.
		wantFrames(t, got, "WINDOW_UPDATE 1 32768", "WINDOW_UPDATE 1 32768", "WINDOW_UPDATE 0 114688")
	})
	t.Run("held", func(t *testing.T) {
		cl := newClient(t, cfg)
		cl.r.hold = true
		got := cl.exchange(func() {
			cl.headers(1, false, head("POST")...)
			for i := 0; i < 3; i++ {
				cl.data(1, false, make([]byte, 16384))
			}
			cl.fr.WriteDataPadded(1, false, make([]byte, 100), make([]byte, 200))
		})
		wantFrames(t, got) // nothing consumed but the padding
		s := cl.c.streams[1]
		if s.recvHeld != 3*16384+100 || s.recvAcked != 201 {
			t.Errorf("held %d, acked %d", s.recvHeld, s.recvAcked)
		}
		// The client resets the stream: what the owner held goes back to the connection,
		// and with stream 3's bytes consumed the connection's half window is due.
		cl.exchange(func() { cl.fr.WriteRSTStream(1, http2.ErrCodeCancel) })
		if cl.c.recvAcked != 3*16384+100+201 {
			t.Errorf("connection acked %d after the reset", cl.c.recvAcked)
		}
		cl.r.consume = true
		got = cl.exchange(func() {
			cl.headers(3, false, head("POST")...)
			for i := 0; i < 4; i++ {
				cl.data(3, false, make([]byte, 16384))
			}
		})
		wantFrames(t, got, "WINDOW_UPDATE 3 32768", "WINDOW_UPDATE 3 32768", "WINDOW_UPDATE 0 114989")
	})
	t.Run("padding", func(t *testing.T) {
		cl := newClient(t, cfg)
		cl.r.hold = true
		got := cl.exchange(func() {
			cl.headers(1, false, head("POST")...)
			for i := 0; i < 200; i++ {
				cl.fr.WriteDataPadded(1, false, []byte("x"), make([]byte, 254))
			}
		})
		// Every frame costs 256 bytes of window, 255 of them come back at once: the stream's
		// half window after 129 frames; the connection's is not due in 200.
		wantFrames(t, got, "WINDOW_UPDATE 1 32895")
		if s := cl.c.streams[1]; s.recvWindow != 65535-200*256+32895 || cl.c.recvAcked != 200*255 {
			t.Errorf("stream window %d, connection acked %d", s.recvWindow, cl.c.recvAcked)
		}
	})
}

// TestSplitFeeds: the same bytes fed in pieces of any size give the same frames as fed
// whole: a frame that is not complete waits for the next Feed.
func TestSplitFeeds(t *testing.T) {
	var w bytes.Buffer
	probe := newClient(t, Config{})
	fr := http2.NewFramer(&w, nil)
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: probe.block(head("POST", "content-length", "20000")...), EndHeaders: true})
	fr.WriteData(1, false, make([]byte, 16384))
	fr.WritePing(false, [8]byte{9})
	fr.WriteDataPadded(1, true, make([]byte, 20000-16384), make([]byte, 3))
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: probe.block(getHead...)[:2], EndStream: true})
	fr.WriteContinuation(3, true, probe.block(getHead...)[2:])
	stream := w.Bytes()
	whole := func() ([]string, []string) {
		cl := newClient(t, Config{})
		cl.r.consume = true
		cl.block(getHead...) // keep the HPACK states in step with probe's
		cl.block(head("POST", "content-length", "20000")...)
		cl.feed(stream)
		return cl.frames(), cl.r.events
	}
	wantF, wantE := whole()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		cfg := Config{}
		if round%2 == 1 {
			cfg.Buffers = &freeList{} // the input buffer lent and given back between frames
		}
		cl := newClient(t, cfg)
		cl.r.consume = true
		for p := stream; len(p) > 0; {
			n := 1 + rng.IntN(min(len(p), 1+rng.IntN(40)*100))
			if round == 0 {
				n = 1 // byte by byte
			}
			cl.feed(p[:n])
			p = p[n:]
			if len(cl.c.in) > frameHeaderLen+DefaultMaxFrameSize {
				t.Fatalf("input buffer holds %d bytes", len(cl.c.in))
			}
		}
		got := cl.frames()
		if strings.Join(got, "\n") != strings.Join(wantF, "\n") || strings.Join(cl.r.events, "\n") != strings.Join(wantE, "\n") {
			t.Fatalf("round %d: frames %q events %q, want %q %q", round, got, cl.r.events, wantF, wantE)
		}
		if cl.err != nil {
			t.Fatal(cl.err)
		}
	}
	if len(wantE) != 4 || len(wantF) != 5 {
		t.Errorf("frames %q events %q", wantF, wantE)
	}
}

// TestLargeTransfers moves 64 MiB each way through one stream, the client honouring and
// replenishing windows as a real one does, and checks every byte arrived.
func TestLargeTransfers(t *testing.T) {
	const total = 64 << 20
	body := make([]byte, total)
	for i := range body {
		body[i] = byte(i * 7)
	}
	t.Run("response", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.r.body = body
		cl.headers(1, true, getHead...)
		cl.flush()
		var got bytes.Buffer
		for rounds := 0; ; rounds++ {
			n := 0
			done := false
			for {
				f, err := cl.rd.ReadFrame()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if d, ok := f.(*http2.DataFrame); ok {
					got.Write(d.Data())
					n += len(d.Data())
					done = d.StreamEnded()
				}
			}
			if done {
				break
			}
			if n == 0 || rounds > total/1000 {
				t.Fatalf("stalled after %d bytes", got.Len())
			}
			cl.fr.WriteWindowUpdate(1, uint32(n))
			cl.fr.WriteWindowUpdate(0, uint32(n))
			cl.flush()
		}
		if !bytes.Equal(got.Bytes(), body) {
			t.Fatalf("received %d bytes, not the body", got.Len())
		}
	})
	t.Run("request", func(t *testing.T) {
		cl := newClient(t, Config{})
		sum := 0
		h := fnv.New64a()
		cl.r.hold = true
		cl.exchange(func() { cl.headers(1, false, head("PUT", "content-length", "67108864")...) })
		s := cl.c.streams[1]
		streamWin, connWin := int64(DefaultStreamWindow), int64(DefaultConnWindow)
		// The owner takes the body bytes as they come and consumes them at once.
		cl.r.consume = true
		cl.r.onData = func(p []byte) { h.Write(p); sum += len(p) }
		for off := 0; off < total; {
			for off < total && streamWin > 0 && connWin > 0 {
				n := int(min(int64(16384), streamWin, connWin, int64(total-off)))
				cl.data(1, off+n == total, body[off:off+n])
				off += n
				streamWin -= int64(n)
				connWin -= int64(n)
			}
			for _, f := range cl.exchange(func() {}) {
				var id, inc int
				if _, err := fmt.Sscanf(f, "WINDOW_UPDATE %d %d", &id, &inc); err != nil {
					continue
				}
				if id == 0 {
					connWin += int64(inc)
				} else {
					streamWin += int64(inc)
				}
			}
			if cl.err != nil {
				t.Fatal(cl.err)
			}
		}
		want := fnv.New64a()
		want.Write(body)
		if sum != total || h.Sum64() != want.Sum64() {
			t.Fatalf("owner got %d bytes, or other bytes than were sent", sum)
		}
		if cl.c.NumStreams() != 1 || !s.remoteDone {
			t.Errorf("the request did not end: %d streams", cl.c.NumStreams())
		}
	})
}
