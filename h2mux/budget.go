package h2mux

import "time"

// budget is a token bucket in integer arithmetic: burst tokens, refilled at rate per second.
// Time is the owner's (Config.Now), in nanoseconds.
type budget struct {
	tokens int64 // in units of 1/rate seconds × 1e9: tokens × 1e9
	last   int64
	burst  int64
	rate   int64
}

func (b *budget) init(burst, rate int, now int64) {
	b.burst, b.rate = int64(burst), int64(rate)
	b.tokens = b.burst * int64(time.Second)
	b.last = now
}

// take spends one token and reports whether there was one.
func (b *budget) take(now int64) bool {
	if b.burst <= 0 {
		return true // disabled
	}
	if d := now - b.last; d > 0 {
		if d > int64(time.Hour) {
			d = int64(time.Hour) // no overflow; an hour refills any sane burst
		}
		b.tokens += d * b.rate
		if max := b.burst * int64(time.Second); b.tokens > max {
			b.tokens = max
		}
	}
	b.last = now
	if b.tokens < int64(time.Second) {
		return false
	}
	b.tokens -= int64(time.Second)
	return true
}
