package backend

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestWorkConserving checks the K-worker FIFO in virtual time with few waiters: a request that
// waited starts as soon as any worker is free in virtual time, whichever worker's timer fired
// first in real time. Two workers' deadlines often fall in one wake-up of the process (Go's
// timers of an idle process fire on its next wake-up, about a millisecond apart): when the later
// worker's timer was seen first and handed the one waiter its slot, the waiter started at that
// worker's free time and the earlier worker's virtual idle time was lost, up to a service
// time per wake-up (a two-worker backend fed by a balancer lost 1 % of its capacity that way).
func TestWorkConserving(t *testing.T) {
	const (
		k       = 2
		service = 700 * time.Microsecond
		clients = 3 // one more than the workers: mostly one waiter
		n       = 3000
	)
	s := start(t, Config{Workers: k, Service: service})
	s.StartTrace()
	hc := &fasthttp.HostClient{Addr: s.Addr(), MaxConns: clients}
	var wg sync.WaitGroup
	var mu sync.Mutex
	left := n
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://" + s.Addr() + "/")
			for {
				mu.Lock()
				if left == 0 {
					mu.Unlock()
					return
				}
				left--
				mu.Unlock()
				if err := hc.DoTimeout(req, resp, 20*time.Second); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	tr := s.Trace()
	if len(tr) != n {
		t.Fatalf("traced %d requests, want %d", len(tr), n)
	}
	queued, lost, worst := idleWhileWaiting(tr, k)
	if queued < n/10 {
		t.Fatalf("only %d of %d requests waited for a worker: the test did not load the backend", queued, n)
	}
	// Clock reads at arrival and at the hand-off may disagree by a few microseconds.
	if worst > 50*time.Microsecond {
		t.Errorf("%d requests waited; a worker was free in virtual time while one waited for %v in all (worst %v)", queued, lost, worst)
	}
	t.Logf("%d of %d requests waited; idle worker time while one waited: %v (worst %v)", queued, n, lost, worst)
}

// idleWhileWaiting replays the virtual schedule of a traced K-worker backend: for every request
// that waited, how long, between its arrival and its start, fewer than k requests were in
// service. It returns the number that waited, the sum and the largest of those times.
func idleWhileWaiting(tr []Arrival, k int) (queued int, sum, worst time.Duration) {
	type edge struct {
		at time.Time
		d  int
	}
	var es []edge
	for _, a := range tr {
		es = append(es, edge{a.Started, +1}, edge{a.Started.Add(a.Service), -1})
	}
	slices.SortFunc(es, func(x, y edge) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return x.d - y.d // an end before a start at the same instant
	})
	for _, a := range tr {
		if !a.Queued || !a.Started.After(a.Arrived) {
			continue
		}
		queued++
		var idle time.Duration
		busy := 0
		last := a.Arrived
		for _, e := range es {
			if e.at.After(a.Started) || e.at.Equal(a.Started) {
				if busy < k && last.Before(a.Started) {
					idle += a.Started.Sub(last)
				}
				break
			}
			if e.at.After(last) && e.at.After(a.Arrived) {
				if busy < k {
					idle += e.at.Sub(last)
				}
				last = e.at
			}
			busy += e.d
		}
		sum += idle
		worst = max(worst, idle)
	}
	return queued, sum, worst
}
