//go:build linux

package h1

import (
	"ballast/httpcore"
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// crashingBackend is a raw HTTP/1.1 backend that answers the first request on each connection
// and then, depending on mode, either reads the next request in full and closes without
// answering (a backend that crashed after receiving it) or closes the idle connection at once.
// The first responses are held until warm connections are open, so a burst of warm-up
// requests through the proxy leaves that many pooled connections.
type crashingBackend struct {
	addr   string
	conns  atomic.Int64
	warm   int
	ready  chan struct{} // closed when warm connections are open
	closed chan struct{} // one value per idle connection closed in closeIdle mode

	mu       sync.Mutex
	seen     []string // "METHOD body" of every request read in full, in order
	accepted []net.Conn
}

const (
	crashAfterRead = iota // read the second request, close without answering
	closeIdle             // close the connection right after the first answer
)

func newCrashingBackend(t *testing.T, warm, mode int) *crashingBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cb := &crashingBackend{addr: ln.Addr().String(), warm: warm, ready: make(chan struct{}), closed: make(chan struct{}, 64)}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		cb.mu.Lock()
		for _, c := range cb.accepted {
			_ = c.Close() // wakes the handlers still reading pooled connections
		}
		cb.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			cb.mu.Lock()
			cb.accepted = append(cb.accepted, c)
			cb.mu.Unlock()
			if cb.conns.Add(1) == int64(warm) {
				close(cb.ready)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				br := bufio.NewReader(c)
				if !cb.read(br) {
					return
				}
				select {
				case <-cb.ready:
				case <-time.After(10 * time.Second):
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				if mode == closeIdle {
					_ = c.Close()
					cb.closed <- struct{}{}
					return
				}
				cb.read(br) // the request it "crashes" on: received in full, never answered
			}()
		}
	}()
	return cb
}

// warmUp leaves cb.warm pooled connections in the proxy: as many concurrent GETs, which the
// backend holds until all those connections are open.
func (cb *crashingBackend) warmUp(t *testing.T, tp *testProxy, c *http.Client, pool string) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range cb.warm {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get(tp.url(fmt.Sprintf("/warm/%d", i)))
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("warm-up: %d", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	waitFor(t, "warm connections pooled", func() bool {
		return inflight(tp.pools[pool]) == 0 && cb.conns.Load() == int64(cb.warm)
	})
}

// read reads one request with its body and records it.
func (cb *crashingBackend) read(br *bufio.Reader) bool {
	req, err := http.ReadRequest(br)
	if err != nil {
		return false
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return false
	}
	cb.mu.Lock()
	cb.seen = append(cb.seen, req.Method+" "+string(body))
	cb.mu.Unlock()
	return true
}

// count reports how many requests with this "METHOD body" the backend read in full.
func (cb *crashingBackend) count(s string) int {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	n := 0
	for _, x := range cb.seen {
		if x == s {
			n++
		}
	}
	return n
}

// TestNoReplayOfSentRequest is issue 8 item 1: a request that reached a backend which then
// died without answering is replayed only if it is idempotent, never because
// retries.non_idempotent is set; one that provably did not (the pooled connection was found
// closed before anything was sent) goes out on a fresh connection whatever its method.
func TestNoReplayOfSentRequest(t *testing.T) {
	tests := []struct {
		name          string
		warm          int // pooled connections before the request
		mode          int
		method        string
		nonIdempotent bool
		wantStatus    int
		wantSeen      int // how often the backend read this request in full
	}{
		{"POST that reached a crashing backend is not replayed", 3, crashAfterRead, "POST", false, 502, 1},
		{"POST on the only pooled connection is not replayed", 1, crashAfterRead, "POST", false, 502, 1},
		{"POST not replayed with non_idempotent", 3, crashAfterRead, "POST", true, 502, 1},
		{"GET that reached a crashing backend is retried", 3, crashAfterRead, "GET", false, 200, 2},
		{"POST on an idle connection the backend closed goes out fresh", 3, closeIdle, "POST", false, 200, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			warm := tc.warm
			cb := newCrashingBackend(t, warm, tc.mode)
			pc := testPool("p", "roundrobin", cb.addr)
			pc.Retries.NonIdempotent = tc.nonIdempotent
			pc.Retries.Budget = 1
			pc.Timeouts.Response = dur(10 * time.Second)
			tp := startProxy(t, testConfig(pc))
			c := testClient()
			cb.warmUp(t, tp, c, "p")
			if tc.mode == closeIdle {
				for range warm {
					select {
					case <-cb.closed:
					case <-time.After(10 * time.Second):
						t.Fatal("backend did not close its idle connections")
					}
				}
			}

			const body = "transfer=100EUR"
			resp, got := get(t, c, tc.method, tp.url("/pay"), strings.NewReader(body), nil)
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("client got %d %q, want %d", resp.StatusCode, got, tc.wantStatus)
			}
			// The backend reads the request in full before it closes, and the proxy answers
			// only after that close, so the count is final once the client has its answer.
			if n := cb.count(tc.method + " " + body); n != tc.wantSeen {
				t.Errorf("backend received the %s %d times, want %d", tc.method, n, tc.wantSeen)
			}
			waitFor(t, "in-flight back to 0", func() bool { return inflight(tp.pools["p"]) == 0 })
		})
	}
}

// TestNoReplayWithCurl is issue 8 item 1 as reported, with curl as the client: after warm-up,
// `curl -X POST -d 'transfer=100EUR' http://LB/pay` gets 502 and the backend, which received
// the POST and crashed, received it once.
func TestNoReplayWithCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed (Debian package curl)")
	}
	oneShard(t) // curl's connection must find the warm-up's pooled ones on its shard
	cb := newCrashingBackend(t, 3, crashAfterRead)
	pc := testPool("p", "roundrobin", cb.addr)
	pc.Retries.Budget = 1
	tp := startProxy(t, testConfig(pc))
	cb.warmUp(t, tp, testClient(), "p")
	out, err := exec.Command(curl, "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20",
		"-X", "POST", "-d", "transfer=100EUR", tp.url("/pay")).Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	if string(out) != "502" {
		t.Errorf("curl got %s, want 502", out)
	}
	if n := cb.count("POST transfer=100EUR"); n != 1 {
		t.Errorf("backend received the POST %d times, want 1", n)
	}
}

// FuzzReplaySafety is the fasthttp plane's fuzz target for the engine's side of replay
// safety: wherever an attempt fails (its connect, a write or read of the request and
// response head, the body's upload, the response timeout, a malformed head), on a pooled
// connection or a fresh one, with retries.non_idempotent or not, the failure the engine gives
// it (writeFailure for a write or read, as attempt.failed sees it) and the Outcome it builds
// (Sent: the attempt wrote a byte) let the core send it again (a fresh connection or another
// backend) only when nothing was written or its method is idempotent.
func FuzzReplaySafety(f *testing.F) {
	f.Add("POST", uint8(0), true, true, true)
	f.Add("GET", uint8(0), true, true, false)
	f.Add("PATCH", uint8(1), true, false, true)
	f.Add("DELETE", uint8(3), false, true, false)
	f.Add("post", uint8(4), true, true, true)
	f.Fuzz(func(t *testing.T, method string, site uint8, reused, wrote, nonIdempotent bool) {
		a := &attempt{reused: reused, wrote: wrote}
		var fail httpcore.Failure
		switch site % 5 {
		case 0:
			fail = writeFailure(a) // send, readResponse
		case 1:
			fail = httpcore.Closed // uploadFailed
		case 2:
			fail = httpcore.Timeout // the response timer
		case 3:
			fail = httpcore.BadGateway // a malformed or oversized response head
		case 4:
			fail, a.wrote = httpcore.Connect, false // connected: nothing written yet
		}
		o := httpcore.Outcome{Failure: fail, Reused: a.reused, Sent: a.wrote}
		ps := &httpcore.Pool{NonIdempotent: nonIdempotent}
		idem := httpcore.Idempotent([]byte(method))
		replay := o.Fresh(idem) || ps.Retryable(&o, idem, true)
		if a.wrote && replay && !idem {
			t.Fatalf("%s that was sent, failing as %v, would be replayed", method, fail)
		}
		if site%5 == 0 && !a.wrote && a.reused && fail != httpcore.Stale {
			t.Fatalf("nothing sent on a pooled connection, yet failure %v", fail)
		}
	})
}
