package evloop

import "math/bits"

// Timer is one deadline of a shard, embedded in what it times (a connection), so arming,
// moving and stopping it allocate nothing. The zero Timer is stopped; Init gives it the
// Expirer that hears it fire.
type Timer struct {
	at   int64 // the deadline, shard clock (ns); meaningful while armed
	tick int64 // the tick of the slot it sits in
	slot int32 // its slot, slotNone when stopped, slotDue while in the list being fired
	// prev and next link the timers of one slot (or of the due list).
	prev, next *Timer
	f          Expirer
}

// Expirer hears its timer fire, on the shard's goroutine, with the shard clock's now. The
// timer is stopped when Expire runs; Expire may arm it (or any other timer) again.
type Expirer interface{ Expire(now int64) }

// Init sets what t calls when it fires. A Timer is initialised once and then armed and
// stopped any number of times.
func (t *Timer) Init(f Expirer) { t.f, t.slot = f, slotNone }

// Armed reports whether t is armed, and At its deadline.
func (t *Timer) Armed() bool { return t.slot != slotNone }
func (t *Timer) At() int64   { return t.at }

const (
	slotNone = -1
	slotDue  = -2

	// TickShift sets the wheel's resolution, a tick of 2^22 ns (about 4.19 ms): a timer
	// fires at the first tick boundary at or after its deadline, never before it, so up to a
	// tick after it, then late by the shard's wake-up.
	TickShift = 22
	wheelBits = 12
	wheelSize = 1 << wheelBits // 4096 slots: one turn of the wheel is about 17 s
	wheelMask = wheelSize - 1
)

// tickOf is the tick a timer with deadline at sits in: the one that begins at the first tick
// boundary at or after at (at / 2^TickShift rounded up: an arithmetic shift rounds down), so
// that it fires when the clock reaches that boundary.
func tickOf(at int64) int64 { return -(-at >> TickShift) }

// wheel is a hashed timing wheel: timers hang in the slot of their tick (tickOf) modulo
// wheelSize, one doubly linked list per slot, and a bitmap marks the slots that hold any, so
// the next deadline worth waking for is a scan of 64 words. A timer more than a turn away
// sits in its slot until the turn it is due (each turn passes it once).
//
// Moving a timer later, which a keep-alive connection does on every request, only stores its
// new deadline: the slot where it sits is reached earlier and puts it where it now belongs
// (lazy re-arming). Moving it earlier relinks it.
type wheel struct {
	slots [wheelSize]*Timer
	bits  [wheelSize / 64]uint64
	now   int64 // the last tick whose slot was run: every timer due by its start has fired
	n     int   // armed timers
	due   *Timer
}

func (w *wheel) init(now int64) { w.now = now >> TickShift }

// arm sets t to fire at (shard clock); a deadline already due fires at the next tick.
func (w *wheel) arm(t *Timer, at int64) {
	tk := max(tickOf(at), w.now+1)
	if t.slot >= 0 {
		if t.tick <= tk {
			t.at = at // its slot comes first and moves it on
			return
		}
		w.unlink(t)
	} else if t.slot == slotDue {
		w.unlink(t)
	} else {
		w.n++
	}
	t.at = at
	w.place(t, tk)
}

// stop disarms t; stopping a stopped timer does nothing.
func (w *wheel) stop(t *Timer) {
	if t.slot == slotNone {
		return
	}
	w.unlink(t)
	t.slot = slotNone
	w.n--
}

func (w *wheel) place(t *Timer, tk int64) {
	i := int32(tk & wheelMask)
	t.tick, t.slot, t.prev = tk, i, nil
	t.next = w.slots[i]
	if t.next != nil {
		t.next.prev = t
	}
	w.slots[i] = t
	w.bits[i>>6] |= 1 << (i & 63)
}

func (w *wheel) unlink(t *Timer) {
	if t.prev != nil {
		t.prev.next = t.next
	} else if t.slot == slotDue {
		w.due = t.next
	} else {
		w.slots[t.slot] = t.next
		if t.next == nil {
			w.bits[t.slot>>6] &^= 1 << (t.slot & 63)
		}
	}
	if t.next != nil {
		t.next.prev = t.prev
	}
	t.prev, t.next = nil, nil
}

// advance runs every slot up to now's tick and fires the timers that are due (their deadline
// at or before the start of now's tick, so at or before now), in no particular order within a
// tick. It returns how many fired.
func (w *wheel) advance(now int64) int {
	target := now >> TickShift
	if target <= w.now {
		return 0
	}
	fired := 0
	if target-w.now > wheelSize { // a long sleep: every slot once, at the final tick
		w.now = target - wheelSize
	}
	for w.now < target {
		w.now++
		i := w.now & wheelMask
		if w.bits[i>>6]&(1<<(i&63)) == 0 {
			continue
		}
		fired += w.run(int32(i), now)
	}
	return fired
}

// run takes slot i's timers into the due list (so that Expire may stop or arm any timer
// while they are fired) and fires those due by the start of tick w.now; the others go to
// where they belong.
func (w *wheel) run(i int32, now int64) int {
	w.due = w.slots[i]
	w.slots[i] = nil
	w.bits[i>>6] &^= 1 << (i & 63)
	for t := w.due; t != nil; t = t.next {
		t.slot = slotDue
	}
	fired := 0
	for w.due != nil {
		t := w.due
		w.due = t.next
		if w.due != nil {
			w.due.prev = nil
		}
		t.prev, t.next = nil, nil
		if tk := tickOf(t.at); tk > w.now {
			w.place(t, tk) // moved later, or a later turn
			continue
		}
		t.slot = slotNone
		w.n--
		fired++
		t.f.Expire(now)
	}
	return fired
}

// next returns the tick of the next slot that holds a timer, or false when none is armed.
// The slot may hold only timers of later turns or moved later: waking for it then fires
// nothing, at most once per slot and turn.
func (w *wheel) next() (int64, bool) {
	if w.n == 0 {
		return 0, false
	}
	start := (w.now + 1) & wheelMask
	word, off := start>>6, start&63
	if m := w.bits[word] >> off; m != 0 {
		return w.now + 1 + int64(bits.TrailingZeros64(m)), true
	}
	dist := 64 - off // slots checked so far
	for k := int64(1); k <= int64(len(w.bits)); k++ {
		m := w.bits[(word+k)%int64(len(w.bits))]
		if k == int64(len(w.bits)) { // back at the start word: only its bits below off
			m &= (1 << off) - 1
		}
		if m != 0 {
			return w.now + 1 + dist + int64(bits.TrailingZeros64(m)), true
		}
		dist += 64
	}
	return 0, false // only the due list holds timers (advance is running)
}
