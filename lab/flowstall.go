package lab

import (
	"cmp"
	"math"
	"slices"
	"time"

	"ballast/lab/backend"
	"ballast/lab/loadgen"
)

// Flow stalls: stretches of a traced run in which nothing came out of Ballast (no request
// reached a backend, no response reached a client) although it held work (two or more
// requests written by the client and not yet at their backend, or responses the backend had
// written and the client not yet read: one alone is its own slow hop). The lab's stall probe sees only the lab process; Ballast's own
// process, descheduled on a busy machine, stops every request through it at once, which
// independent draws of each request's hops cannot do: a backend whose queue drains during it
// idles, and a throughput row loses that time. They are measured on the lab's two clocks
// (the load generator's and the backends'), which cover the whole run, not only the part
// Ballast's ring of releases holds.

// stallAt is one stall: when it began (since the run's begin) and how long it lasted.
type stallAt struct {
	at, d time.Duration
}

// flowStallMin is the shortest flow stall counted: a backend of the heterogeneous scenario
// drains the requests queued in it in one to two milliseconds, so stalls of that length
// already idle it. A stall of the lab process that holds a response is counted from a
// millisecond after the response was due (timerGrain: the timers of an idle Go process fire
// on its next wake-up, up to a millisecond late, which the overshoot hop draws).
const (
	flowStallMin = time.Millisecond
	timerGrain   = time.Millisecond
)

// flowStallsDrained returns the stalls of at least minLen in a traced run: stretches in which
// nothing came out of Ballast (no arrival at a backend, no response read by a client) while it
// held two or more requests or responses, and stretches in which nothing happened on either of
// the lab's clocks while two or more backend responses were overdue (their service ended more
// than timerGrain before), merged where they overlap. It returns each stall's drain too:
// what Ballast held at a stall's end (requests on their way to a backend, responses on their
// way to a client) comes out one after another, and the drain samples are the gaps between
// consecutive outputs of those, from the stall's end, up to the next stall (the model spaces
// the events a stall postponed by draws of them: sim.Jitter.Drain).
func flowStallsDrained(res *loadgen.Result, arrivals []backend.Arrival, minLen time.Duration) ([]stallAt, []time.Duration) {
	begin := res.Begin
	type span struct{ arrived, due, done int64 }
	first := map[int64]span{}
	var labEvents []int64
	var overdue []interval
	for _, a := range arrivals {
		if a.Seq < 0 {
			continue
		}
		s := span{int64(a.Arrived.Sub(begin)), int64(a.Started.Add(a.Service).Sub(begin)), int64(a.Done.Sub(begin))}
		if f, ok := first[a.Seq]; !ok || s.arrived < f.arrived {
			first[a.Seq] = s
		}
		labEvents = append(labEvents, s.arrived, s.done)
		if from := s.due + int64(timerGrain); s.done > from {
			overdue = append(overdue, interval{from, s.done})
		}
	}
	var inBallast []interval
	var outputs []int64
	for _, e := range res.Trace {
		labEvents = append(labEvents, e.Start, e.Sent, e.Done)
		s, ok := first[e.Index]
		if !ok || !e.OK {
			continue
		}
		inBallast = append(inBallast, interval{e.Sent, s.arrived}, interval{s.done, e.Done})
		outputs = append(outputs, s.arrived, e.Done)
	}
	out := append(gapsWhilePending(outputs, inBallast, minLen), gapsWhilePending(labEvents, overdue, minLen)...)
	slices.SortFunc(out, func(x, y stallAt) int { return cmp.Compare(x.at, y.at) })
	var merged []stallAt
	for _, s := range out {
		if n := len(merged); n > 0 && s.at <= merged[n-1].at+merged[n-1].d {
			merged[n-1].d = max(merged[n-1].d, s.at+s.d-merged[n-1].at)
			continue
		}
		merged = append(merged, s)
	}
	return merged, drains(merged, inBallast)
}

// drains returns, for each stall, the gaps between the outputs of what Ballast held at its
// end (the intervals of pending open then), in order from its end, those before the next
// stall's start only.
func drains(stalls []stallAt, pending []interval) []time.Duration {
	var out []time.Duration
	var outs []int64
	for i, s := range stalls {
		end := int64(s.at + s.d)
		limit := int64(math.MaxInt64)
		if i+1 < len(stalls) {
			limit = int64(stalls[i+1].at)
		}
		outs = outs[:0]
		for _, p := range pending {
			if p.start < end && p.end >= end && p.end < limit {
				outs = append(outs, p.end)
			}
		}
		slices.Sort(outs)
		prev := end
		for _, t := range outs {
			out = append(out, time.Duration(t-prev))
			prev = t
		}
	}
	return out
}

type interval struct{ start, end int64 }

// gapsWhilePending returns the stretches of at least minLen between consecutive progress
// events in which at least two pending intervals were open: from the later of the gap's
// start and the second earliest start of those still open at its end, to its end. A stretch
// that held up one request alone is that request's own slow hop (a sparse run's forward of
// a few milliseconds, say), which its hop sample holds already: counted as a stall too, the
// model would draw it twice.
func gapsWhilePending(progress []int64, pending []interval, minLen time.Duration) []stallAt {
	if len(progress) < 2 || len(pending) == 0 {
		return nil
	}
	progress = slices.Clone(progress)
	slices.Sort(progress)
	pending = slices.Clone(pending)
	// By end, with the second smallest start among those ending at or after each.
	slices.SortFunc(pending, func(x, y interval) int { return cmp.Compare(x.end, y.end) })
	secondStart := make([]int64, len(pending))
	first, second := int64(math.MaxInt64), int64(math.MaxInt64)
	for i := len(pending) - 1; i >= 0; i-- {
		switch s := pending[i].start; {
		case s < first:
			first, second = s, first
		case s < second:
			second = s
		}
		secondStart[i] = second
	}
	var out []stallAt
	for k := 1; k < len(progress); k++ {
		p, q := progress[k-1], progress[k]
		if q-p < int64(minLen) {
			continue
		}
		// Nothing progressed in (p, q): what was pending then ends at q or later.
		i, _ := slices.BinarySearchFunc(pending, q, func(x interval, t int64) int { return cmp.Compare(x.end, t) })
		if i == len(pending) || secondStart[i] >= q {
			continue
		}
		if from := max(p, secondStart[i]); q-from >= int64(minLen) {
			out = append(out, stallAt{time.Duration(from), time.Duration(q - from)})
		}
	}
	return out
}
