package h2mux

import (
	"testing"
	"time"
)

// TestLinger: a response complete while its request is still arriving (a backend that answers
// before the body) leaves the stream readable for LingerTimeout: what the client sends on it
// is still checked (trailers without END_STREAM, a window past 2^31-1, DATA past content-length
// get their stream errors, as h2spec 8.1/1 and 6.9.1/3 expect whichever arrives first), DATA
// is dropped (the connection window given back, the owner told nothing), a request that ends
// ends the stream without a reset, and one that does not gets RST_STREAM NO_ERROR once the time
// is up.
func TestLinger(t *testing.T) {
	answered := []string{"HEADERS 1 :status=200 content-type=text/plain", "DATA 1 5 end"}
	for _, tc := range []struct {
		name  string
		then  func(cl *client)
		tick  time.Duration // the clock moves this far, then Tick
		want  []string      // frames after the response
		calls int           // Handler events after Request
	}{
		{name: "trailers without END_STREAM", then: func(cl *client) { cl.headers(1, false, "x-t", "1") },
			want: []string{"RST 1 PROTOCOL_ERROR"}},
		{name: "stream window above 2^31-1", then: func(cl *client) {
			cl.fr.WriteWindowUpdate(1, 1<<31-1)
			cl.fr.WriteWindowUpdate(1, 1<<31-1)
		}, want: []string{"RST 1 FLOW_CONTROL_ERROR"}},
		{name: "the rest of the body, then its end", then: func(cl *client) {
			cl.data(1, false, make([]byte, 1000))
			cl.data(1, true, make([]byte, 10))
		}},
		{name: "trailers end it", then: func(cl *client) { cl.headers(1, true, "x-t", "1") }},
		{name: "a request that never ends is reset", then: func(cl *client) { cl.data(1, false, make([]byte, 100)) },
			tick: DefaultLingerTimeout, want: []string{"RST 1 NO_ERROR"}},
		{name: "not before its time", then: func(cl *client) { cl.data(1, false, make([]byte, 100)) },
			tick: DefaultLingerTimeout - time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newClient(t, Config{})
			cl.r.early = true
			got := cl.exchange(func() { cl.headers(1, false, head("POST")...) })
			wantFrames(t, got, answered...)
			if d := cl.c.Deadline(); d != cl.now+int64(DefaultLingerTimeout) {
				t.Errorf("Deadline %d, want the linger's end %d", d, cl.now+int64(DefaultLingerTimeout))
			}
			events := len(cl.r.events)
			got = cl.exchange(func() { tc.then(cl) })
			if tc.tick > 0 {
				cl.now += int64(tc.tick)
				if err := cl.c.Tick(); err != nil {
					t.Fatal(err)
				}
				cl.drain()
				got = append(got, cl.frames()...)
			}
			wantFrames(t, got, tc.want...)
			if n := len(cl.r.events) - events; n != tc.calls {
				t.Errorf("%d Handler events after the response (%q), want %d", n, cl.r.events[events:], tc.calls)
			}
			if want := uint64(len(tc.want)); tc.tick == DefaultLingerTimeout && cl.ctr.LingerResets.Load() != want || tc.tick != DefaultLingerTimeout && cl.ctr.LingerResets.Load() != 0 {
				t.Errorf("LingerResets %d", cl.ctr.LingerResets.Load())
			}
			if cl.connCode() != -1 {
				t.Errorf("connection error %v", cl.err)
			}
			if open := cl.c.NumStreams(); tc.tick != DefaultLingerTimeout-time.Millisecond && open != 0 {
				t.Errorf("%d streams open at the end", open)
			}
		})
	}
}
