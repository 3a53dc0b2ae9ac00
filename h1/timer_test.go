//go:build linux

package h1

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"ballast/config"
	"ballast/evloop"
)

// The data planes' timers run on the shards' timer wheel, whose tick is 2^22 ns (4.19 ms).
// Measured from the backends' side, a hedged copy and a response timeout's close never come
// before their delay after the client sent the request (the wheel once fired a timer when the
// shard's clock entered its deadline's tick: up to a tick early). Only the lower bound is
// asserted: how late a timer fires depends on the machine.

// delays are the timers' delays of the tests below: 20 ms and on, each a twelfth of a tick
// more than the last, so that their deadlines fall at every phase of the shards' ticks
// however the requests' starts lock to them (each starts when the last one's timer fired).
func delays() []time.Duration {
	ds := make([]time.Duration, 12)
	for i := range ds {
		ds[i] = 20*time.Millisecond + time.Duration(i)*(time.Duration(1)<<evloop.TickShift)/12
	}
	return ds
}

// TestHedgeNeverEarly: every request is hedged (whichever backend gets it first holds it),
// each through a pool of its own hedge.delay; the copy reaches its backend no sooner than
// that delay after the client began to send.
func TestHedgeNeverEarly(t *testing.T) {
	var mu sync.Mutex
	copyAt := map[string]time.Time{} // request path: when its last copy arrived
	h := func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		mu.Lock()
		_, again := copyAt[r.URL.Path]
		copyAt[r.URL.Path] = now // the original's time, then the copy's
		mu.Unlock()
		if !again { // the original: held until the copy's response ends it
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		_, _ = w.Write([]byte("copy"))
	}
	a, b := httpBackend(t, h), httpBackend(t, h)
	ds := delays()
	var pools []config.Pool
	for i, d := range ds {
		pc := testPool("h"+strconv.Itoa(i), "roundrobin", a, b)
		pc.Hedge.Delay, pc.Hedge.MaxHedges = dur(d), 1
		pc.Retries.Budget = 1 // every request may be hedged
		pools = append(pools, pc)
	}
	cfg := testConfig(pools...)
	te := startEngine(t, cfg)
	c := testClient()
	for i, d := range ds {
		path := "/h" + strconv.Itoa(i) + "/"
		start := time.Now()
		resp, body := get(t, c, "GET", te.url(path), nil, nil)
		if resp.StatusCode != 200 || string(body) != "copy" {
			t.Fatalf("hedge.delay %v: %d %q, want the hedged copy's answer", d, resp.StatusCode, body)
		}
		mu.Lock()
		at := copyAt[path]
		mu.Unlock()
		if got := at.Sub(start); got < d {
			t.Errorf("hedge.delay %v: the copy reached its backend %v after the client began to send, before the delay", d, got)
		}
	}
}

// TestResponseTimeoutNeverEarly: a backend that reads the request and never answers sees
// Ballast close the connection no sooner than timeouts.response after the client began to
// send (each request through a route of its own timeout), and the client's 504 comes no
// sooner either.
func TestResponseTimeoutNeverEarly(t *testing.T) {
	ds := delays()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	closed := make(chan time.Time, len(ds))
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(conn)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				_, err := br.ReadByte() // nothing more comes: this returns when Ballast closes
				if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
					closed <- time.Now()
				}
			}()
		}
	}()
	pc := testPool("p", "roundrobin", ln.Addr().String())
	pc.Retries.Attempts = 1
	cfg := testConfig(pc)
	var routes []config.Route
	for i, d := range ds {
		routes = append(routes, config.Route{PathPrefix: "/t" + strconv.Itoa(i) + "/", Pool: "p",
			RoutePolicy: config.RoutePolicy{Timeouts: &config.RouteTimeouts{Response: dur(d)}}})
	}
	cfg.Routes = append(routes, cfg.Routes...)
	te := startEngine(t, cfg)
	c := testClient()
	for i, d := range ds {
		start := time.Now()
		resp, _ := get(t, c, "GET", te.url("/t"+strconv.Itoa(i)+"/"), nil, nil)
		answered := time.Now()
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("timeouts.response %v: status %d, want 504", d, resp.StatusCode)
		}
		if got := answered.Sub(start); got < d {
			t.Errorf("timeouts.response %v: 504 after %v, before the timeout", d, got)
		}
		select {
		case at := <-closed:
			if got := at.Sub(start); got < d {
				t.Errorf("timeouts.response %v: the backend's connection closed %v after the client began to send, before the timeout", d, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("timeouts.response %v: the backend's connection was not closed", d)
		}
	}
}
