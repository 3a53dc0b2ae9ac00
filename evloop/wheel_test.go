package evloop

import (
	"math/rand/v2"
	"testing"
)

type recorder struct {
	fired []int64
	id    int
	log   *[]int
	then  func(now int64)
}

// oneTimer is a wheel started at 0 and one timer on it, not armed, that records when it fires.
func oneTimer() (*wheel, *recorder, *Timer) {
	w, r, tm := new(wheel), new(recorder), new(Timer)
	w.init(0)
	tm.Init(r)
	return w, r, tm
}

func (r *recorder) Expire(now int64) {
	r.fired = append(r.fired, now)
	if r.log != nil {
		*r.log = append(*r.log, r.id)
	}
	if r.then != nil {
		r.then(now)
	}
}

const tick = int64(1) << TickShift

func TestWheelFiresOnceAtOrAfterDeadline(t *testing.T) {
	w, r, tm := oneTimer()
	w.arm(tm, 10*tick+5)
	for now := int64(0); now < 20*tick; now += tick / 3 {
		w.advance(now)
		if len(r.fired) > 0 && r.fired[0] < 10*tick+5 {
			t.Fatalf("fired at %d, before its deadline %d", r.fired[0], 10*tick+5)
		}
	}
	if len(r.fired) != 1 {
		t.Fatalf("fired %d times, want once", len(r.fired))
	}
	// The first advance at or after the boundary that ends the deadline's tick fires it.
	if first := (11*tick + tick/3 - 1) / (tick / 3) * (tick / 3); r.fired[0] != first {
		t.Fatalf("fired at %d, want %d: the first advance at or after the tick boundary %d", r.fired[0], first, 11*tick)
	}
	if tm.Armed() || w.n != 0 {
		t.Fatalf("timer still armed after firing (n=%d)", w.n)
	}
}

// TestWheelNeverEarly: deadlines at and around tick boundaries, the clock advanced a
// nanosecond at a time across them: a timer fires on the first advance at or after its
// deadline that reaches a tick boundary (its deadline's own when it is one), never before.
func TestWheelNeverEarly(t *testing.T) {
	const k = 40 * tick // a boundary some way into the run
	for _, c := range []struct {
		name string
		at   int64
		fire int64 // the boundary it fires at
	}{
		{"a boundary", k, k},
		{"a nanosecond after a boundary", k + 1, k + tick},
		{"a nanosecond before a boundary", k - 1, k},
		{"mid-tick", k + tick/2, k + tick},
		{"the last nanosecond of a tick", k + tick - 1, k + tick},
		{"the next boundary", k + tick, k + tick},
		{"a turn later, mid-tick", k + wheelSize*tick + tick/2, k + (wheelSize+1)*tick},
	} {
		w, r, tm := oneTimer()
		w.arm(tm, c.at)
		// Advance in steps that land on every nanosecond around the deadline and the boundary.
		var probes []int64
		for now := int64(tick); now < c.at-2; now += 3 * tick / 2 {
			probes = append(probes, now)
		}
		for d := int64(-2); d <= 2; d++ {
			probes = append(probes, c.at+d)
		}
		for d := int64(-2); d <= 2; d++ {
			if p := c.fire + d; p > c.at+2 {
				probes = append(probes, p)
			}
		}
		for _, now := range probes {
			w.advance(now)
			if len(r.fired) > 0 {
				break
			}
		}
		switch {
		case len(r.fired) != 1:
			t.Errorf("%s (deadline %d): fired %d times by %d, want once", c.name, c.at, len(r.fired), probes[len(probes)-1])
		case r.fired[0] < c.at:
			t.Errorf("%s (deadline %d): fired at %d, %d ns early", c.name, c.at, r.fired[0], c.at-r.fired[0])
		case r.fired[0] != c.fire:
			t.Errorf("%s (deadline %d): fired at %d, want at the boundary %d", c.name, c.at, r.fired[0], c.fire)
		}
	}
}

// A timer armed for a deadline already passed, or the current tick's, fires at the next
// tick boundary: the wheel never goes back to a tick it ran.
func TestWheelPastDeadline(t *testing.T) {
	w, r, tm := oneTimer()
	w.advance(10*tick + tick/2)
	w.arm(tm, 3*tick)
	w.advance(11*tick - 1)
	if len(r.fired) != 0 {
		t.Fatal("a past deadline fired before the next tick boundary")
	}
	w.advance(11 * tick)
	if len(r.fired) != 1 {
		t.Fatalf("a past deadline fired %d times at the next boundary, want once", len(r.fired))
	}
}

func TestWheelLazyMoveLaterAndEarlier(t *testing.T) {
	w, r, tm := oneTimer()
	w.arm(tm, 5*tick)
	w.arm(tm, 50*tick) // later: stays in slot 5, moves on when slot 5 runs
	w.advance(6 * tick)
	if len(r.fired) != 0 {
		t.Fatal("fired at its old deadline after being moved later")
	}
	w.arm(tm, 20*tick) // earlier than 50: relinked
	w.advance(19 * tick)
	if len(r.fired) != 0 {
		t.Fatal("fired early")
	}
	w.advance(21 * tick)
	if len(r.fired) != 1 {
		t.Fatalf("fired %d times by tick 21, want 1", len(r.fired))
	}
	w.advance(60 * tick)
	if len(r.fired) != 1 {
		t.Fatal("fired again at the abandoned deadline")
	}
}

func TestWheelStopAndFarDeadlines(t *testing.T) {
	var w wheel
	w.init(0)
	var a, b recorder
	var ta, tb Timer
	ta.Init(&a)
	tb.Init(&b)
	far := int64(3*wheelSize+7) * tick // three turns away, same slot as tick 7
	w.arm(&ta, far)
	w.arm(&tb, 7*tick)
	w.stop(&tb)
	w.stop(&tb) // twice: no effect
	for now := int64(0); now <= far+tick; now += 97 * tick {
		w.advance(now)
		if len(a.fired) > 0 && a.fired[0] < far {
			t.Fatalf("far timer fired at %d, before %d", a.fired[0], far)
		}
	}
	w.advance(far + tick)
	if len(a.fired) != 1 || len(b.fired) != 0 {
		t.Fatalf("fired: far %d (want 1), stopped %d (want 0)", len(a.fired), len(b.fired))
	}
}

// Expire may stop and arm timers of the same slot while the slot is being fired.
func TestWheelExpireChangesSiblings(t *testing.T) {
	var w wheel
	w.init(0)
	var order []int
	rs := make([]recorder, 4)
	ts := make([]Timer, 4)
	for i := range ts {
		rs[i].id, rs[i].log = i, &order
		ts[i].Init(&rs[i])
		w.arm(&ts[i], 3*tick)
	}
	// Whichever fires first stops the others but re-arms 2 for later.
	first := true
	for i := range rs {
		rs[i].then = func(int64) {
			if !first {
				return
			}
			first = false
			for j := range ts {
				w.stop(&ts[j])
			}
			w.arm(&ts[2], 9*tick)
		}
	}
	w.advance(4 * tick)
	if len(order) != 1 {
		t.Fatalf("fired %v at tick 4, want exactly one", order)
	}
	w.advance(10 * tick)
	if len(order) != 2 || order[1] != 2 {
		t.Fatalf("fired %v, want the re-armed timer 2 second", order)
	}
	if w.n != 0 {
		t.Fatalf("%d timers left armed", w.n)
	}
}

func TestWheelNext(t *testing.T) {
	var w wheel
	w.init(100 * tick)
	if _, ok := w.next(); ok {
		t.Fatal("next reported a slot with no timer armed")
	}
	var r recorder
	var tm Timer
	tm.Init(&r)
	for _, d := range []int64{1, 63, 64, 65, 1000, wheelSize - 1, wheelSize + 5} {
		w.arm(&tm, (100+d)*tick)
		got, ok := w.next()
		want := 100 + d
		if d > wheelSize { // a later turn sits in the slot of this turn
			want = 100 + d - wheelSize
		}
		if !ok || got != want {
			t.Fatalf("deadline +%d ticks: next = %d, %v; want %d", d, got, ok, want)
		}
		w.stop(&tm)
	}
}

// A random model check: every armed timer fires exactly once, at the first advance that
// reaches the first tick boundary at or after its deadline (advance being called every few
// ticks), so never before its deadline.
func TestWheelModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var w wheel
	w.init(0)
	const n = 500
	rs := make([]recorder, n)
	ts := make([]Timer, n)
	want := make([]int64, n) // 0: not armed
	for i := range ts {
		ts[i].Init(&rs[i])
	}
	now := int64(0)
	for step := 0; step < 20000; step++ {
		i := rng.IntN(n)
		switch rng.IntN(4) {
		case 0, 1:
			at := now + rng.Int64N(int64(2*wheelSize)*tick)
			w.arm(&ts[i], at)
			want[i] = at
		case 2:
			w.stop(&ts[i])
			want[i] = 0
		case 3:
			now += rng.Int64N(8 * tick)
			before := make([]int, n)
			for k := range rs {
				before[k] = len(rs[k].fired)
			}
			w.advance(now)
			for k := range rs {
				f := len(rs[k].fired) - before[k]
				due := want[k] != 0 && want[k] <= now>>TickShift<<TickShift // by the last boundary reached
				switch {
				case f > 1:
					t.Fatalf("timer %d fired %d times in one advance", k, f)
				case f == 1 && !due:
					t.Fatalf("timer %d fired at %d, deadline %d", k, now, want[k])
				case f == 0 && due:
					t.Fatalf("timer %d (deadline %d) did not fire by %d", k, want[k], now)
				}
				if f == 1 {
					want[k] = 0
				}
			}
		}
	}
}

// The wheel's costs per operation, allocation-free: arming and stopping a timer; a
// keep-alive connection's timer moved later on every request while the clock runs on (the
// lazy re-arm, its slot reached now and then); and a shard's steady state of timers armed
// and fired, 1024 armed at any time with deadlines spread over 256 ticks.
func BenchmarkWheelArmStop(b *testing.B) {
	w, _, tm := oneTimer()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w.arm(tm, int64(i&1023)*tick+int64(i))
		w.stop(tm)
	}
}

func BenchmarkWheelMoveLater(b *testing.B) {
	w, r, tm := oneTimer()
	now := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		now += 20_000 // a request every 20 µs
		w.advance(now)
		w.arm(tm, now+60_000_000_000)
	}
	if len(r.fired) != 0 {
		b.Fatal("the moved timer fired")
	}
}

// fireCount counts the timers that fire.
type fireCount int

func (c *fireCount) Expire(int64) { *c++ }

func BenchmarkWheelFire(b *testing.B) {
	var w wheel
	w.init(0)
	const n = 1024
	var fired fireCount
	ts := make([]Timer, n)
	for i := range ts {
		ts[i].Init(&fired)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	delays := make([]int64, 4096)
	for i := range delays {
		delays[i] = rng.Int64N(256 * tick)
	}
	now := int64(0)
	i := 0
	b.ReportAllocs()
	for ; b.Loop(); i++ {
		now += tick / 4
		w.advance(now)
		for k := 0; k < 4; k++ { // re-arm the stopped ones, some of them each op
			t := &ts[(4*i+k)%n]
			if !t.Armed() {
				w.arm(t, now+delays[(4*i+k)%len(delays)])
			}
		}
	}
	if i > 4*256 && fired == 0 {
		b.Fatal("no timer fired")
	}
}
