package upstream

import (
	"sync"
	"testing"
	"time"

	"ballast/balance"
)

// TestFailureStreak: Release counts failures in a row response by response; a success ends the
// streak, but the longest streak since the last TakeFailureStreakPeak is kept for outlier
// detection; ResetFailureStreak forgets both.
func TestFailureStreak(t *testing.T) {
	p := mustPool(t, poolCfg("roundrobin", be("a", 1)), nil, nil)
	release := func(outcomes ...bool) *Backend {
		var b *Backend
		for _, failed := range outcomes {
			b = mustAcquire(t, p)
			p.Release(b, time.Millisecond, failed)
		}
		return b
	}
	b := release(true, true, true, false, true)
	if s, pk := b.FailureStreak(), b.TakeFailureStreakPeak(); s != 1 || pk != 3 {
		t.Fatalf("streak %d, peak %d; want 1 (after the success) and 3", s, pk)
	}
	if pk := b.TakeFailureStreakPeak(); pk != 0 {
		t.Fatalf("peak %d right after taking it, want 0", pk)
	}
	release(true) // the running streak continues: 2, and the peak shows it
	if s, pk := b.FailureStreak(), b.TakeFailureStreakPeak(); s != 2 || pk != 2 {
		t.Fatalf("streak %d, peak %d; want 2 and 2", s, pk)
	}
	release(true)
	b.ResetFailureStreak()
	if s, pk := b.FailureStreak(), b.TakeFailureStreakPeak(); s != 0 || pk != 0 {
		t.Fatalf("after a reset: streak %d, peak %d", s, pk)
	}

	// Concurrent failures only: every one is counted, none lost to a race.
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				b, err := p.Acquire(0, balance.Tried{})
				if err != nil {
					t.Error(err)
					return
				}
				p.Release(b, time.Millisecond, true)
			}
		}()
	}
	wg.Wait()
	if s, pk := b.FailureStreak(), b.TakeFailureStreakPeak(); s != workers*each || pk != workers*each {
		t.Fatalf("after %d concurrent failures: streak %d, peak %d", workers*each, s, pk)
	}
}
