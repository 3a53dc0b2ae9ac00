package upstream

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ballast/balance"
)

// TestStressMaxConns runs many goroutines through Acquire/Release on a pool whose backends are
// limited to maxConns, while another goroutine keeps changing the pool. The limit must hold at
// every moment, every request must be served (the backlog has room for all), and nothing may
// leak.
func TestStressMaxConns(t *testing.T) {
	const (
		workers  = 8
		iters    = 150
		maxConns = 2
	)
	for _, a := range balance.Algorithms() {
		t.Run(a.Name, func(t *testing.T) {
			cfg := poolCfg(a.Name, be("a", 1), be("b", 2), be("c", 1))
			cfg.MaxConns, cfg.MaxQueue = maxConns, workers
			cfg.TableSize = 251 // a small prime: maglev rebuilds on every mutation
			p := mustPool(t, cfg, nil, nil)
			var peak atomic.Int64
			var errs atomic.Int64
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(w), 7))
					for range iters {
						var tried balance.Tried
						b, err := p.Acquire(r.Uint64(), tried)
						if err != nil {
							errs.Add(1)
							t.Errorf("Acquire: %v", err)
							return
						}
						n := b.InFlight()
						for {
							old := peak.Load()
							if n <= old || peak.CompareAndSwap(old, n) {
								break
							}
						}
						p.Release(b, time.Duration(r.IntN(1000))*time.Microsecond, r.IntN(10) == 0)
					}
				}()
			}
			wg.Add(1)
			go func() { // changes c while the workers run; a and b stay usable throughout
				defer wg.Done()
				for k := 0; k < 200; k++ {
					select {
					case <-stop:
						return
					default:
					}
					var err error
					switch k % 4 {
					case 0:
						err = p.SetWeight("c", 3)
					case 1:
						err = p.Drain("c")
					case 2:
						err = p.Enable("c")
					case 3:
						err = p.ResetWeight("c")
					}
					if err != nil {
						t.Errorf("mutation: %v", err)
						return
					}
				}
			}()
			done := make(chan struct{})
			go func() {
				wg.Wait()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(2 * time.Minute): // a hang detector, not a performance bound
				close(stop)
				t.Fatalf("workers stuck: queue %d, stats %+v", p.Queue(), p.QueueStats())
			}
			if got := peak.Load(); got > maxConns || got < 1 {
				t.Errorf("peak in flight on one backend %d, want 1..%d", got, maxConns)
			}
			var total uint64
			for _, b := range p.Backends() {
				total += b.Requests()
			}
			if want := uint64(workers * iters); total != want && errs.Load() == 0 {
				t.Errorf("requests %d, want %d", total, want)
			}
			st := p.QueueStats()
			if st.Queued != st.Dispatched || st.TimedOut != 0 || st.Rejected != 0 {
				t.Errorf("queue stats %+v: every queued request must be dispatched", st)
			}
			assertIdle(t, p)
		})
	}
}
